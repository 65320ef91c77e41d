package checksum

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
)

// Offload-tier stored checksums (docs/spec.md §10).
//
// An offload store (CPU memory, disk, a remote cache) keeps full blocks
// under their block hash, each with a stored checksum: the rank's part of
// the block checksum XOR the tag le64(first 8 bytes of the block hash) ^
// fingerprint. A dump that lists block_hashes and stored_checksums for a
// request is checked block by block against them, with no producer: a
// block whose KV changed fails, and so does an intact block (and its own,
// intact stored value) that the store returned for another prefix, because
// the tag of the hash the request asked for differs from the tag the value
// was stored under.

// Reasons a group's blocks are not checked against stored checksums.
const (
	StoredSkipState = "stored checksums cover attention blocks only (a state group has no token blocks)"
)

// ParseBlockHash decodes a block hash as a manifest carries it: a string
// of hex digits, with or without a "0x" prefix, upper or lower case, two
// digits per byte in the order of the bytes (the first two digits are
// byte 0, as Python's bytes.hex() writes them), at least 8 bytes (vLLM's
// block hashes are 32-byte SHA-256 digests, 64 digits).
func ParseBlockHash(s string) ([]byte, error) {
	digits := strings.TrimPrefix(s, "0x")
	if len(digits)%2 != 0 {
		return nil, fmt.Errorf("block hash %q: an odd number of hex digits", s)
	}
	b, err := hex.DecodeString(digits)
	if err != nil {
		return nil, fmt.Errorf("block hash %q: not hex digits", s)
	}
	if len(b) < 8 {
		return nil, fmt.Errorf("block hash %q: %d bytes, want at least 8", s, len(b))
	}
	return b, nil
}

// StoredTag returns the tag of a stored checksum: the first 8 bytes of the
// block hash read as a little-endian uint64 (byte 0 is the least
// significant: hash "0102030405060708..." gives 0x0807060504030201), XOR
// the rank's nested fingerprint of the group.
func StoredTag(blockHash string, fingerprint uint64) (uint64, error) {
	b, err := ParseBlockHash(blockHash)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:8]) ^ fingerprint, nil
}

// StoredBlock is one full block of a request that carries a block hash.
type StoredBlock struct {
	Request  string
	Group    int
	Position int
	// Block is the block id in the rank's cache.
	Block int
	Hash  string
	// Sum is the rank's part of the block checksum (all its slices of the
	// block, every replica key); Value is Sum XOR the tag, what an offload
	// store keeps beside the block.
	Sum, Value uint64
	// Stored is the manifest's stored checksum of the block; HasStored is
	// false when the manifest lists none for it.
	Stored    uint64
	HasStored bool
}

// Match reports whether the manifest's stored checksum equals the value
// recomputed from the block (false when there is none).
func (b *StoredBlock) Match() bool { return b.HasStored && b.Stored == b.Value }

// StoredRank is one rank's stored checksums.
type StoredRank struct {
	// Path is the dump.
	Path           string
	TPRank, TPSize int
	PPRank, PPSize int
	// Blocks are every full, non-null block with a block hash, by request
	// (manifest order), group id and position.
	Blocks []StoredBlock
	// Skipped maps a group id to why blocks listed for it are not checked
	// (a docs/spec.md §4 reason, or StoredSkipState).
	Skipped map[int]string
}

// Mismatches returns the blocks whose manifest stored checksum differs
// from the recomputed value.
func (r *StoredRank) Mismatches() []StoredBlock {
	var out []StoredBlock
	for _, b := range r.Blocks {
		if b.HasStored && !b.Match() {
			out = append(out, b)
		}
	}
	return out
}

// Checked counts the blocks that have a stored checksum to compare.
func (r *StoredRank) Checked() int {
	n := 0
	for _, b := range r.Blocks {
		if b.HasStored {
			n++
		}
	}
	return n
}

// Stored computes the stored checksum of every full block (position p with
// (p+1)*block_size <= num_tokens) that a request of the dump lists a block
// hash for, and reads the manifest's stored checksum of each. Block
// positions count from 0 whatever the request's local prefix hit; null
// blocks and positions past the block table are left out. opts.Requests
// restricts the requests (an id the dump lacks is an error). A block hash
// that is not hex is an error naming the dump and field.
func Stored(ctx context.Context, d *layout.Dump, opts Options) (*StoredRank, error) {
	m := d.Manifest
	res := &StoredRank{
		Path: d.Path, TPRank: m.Parallel.TPRank, TPSize: m.Parallel.TPSize,
		PPRank: m.Parallel.PPRank, PPSize: m.Parallel.PPSize, Skipped: map[int]string{},
	}
	for _, id := range opts.Requests {
		if m.Request(id) == nil {
			return nil, &layout.DumpError{File: d.Path, Field: "requests", Err: fmt.Errorf("no request %q", id)}
		}
	}
	plan := &Plan{Dump: d, Progress: opts.Progress}
	taskOf := map[*layout.LayerView]int{}
	for ri := range m.Requests {
		r := &m.Requests[ri]
		if len(opts.Requests) > 0 && !slices.Contains(opts.Requests, r.ID) {
			continue
		}
		for _, key := range sortedGroupKeys(r.BlockHashes) {
			id, _ := strconv.Atoi(key) // validated with the manifest
			gv := d.GroupView(id)
			field := fmt.Sprintf("requests[%d].block_hashes[%q]", ri, key)
			hashes := r.BlockHashes[key]
			var stored []uint64
			for i, s := range r.StoredChecksums[key] {
				v, err := layout.ParseHex64(s) // validated with the manifest
				if err != nil {
					return nil, &layout.DumpError{File: d.Path, Field: fmt.Sprintf("requests[%d].stored_checksums[%q][%d]", ri, key, i), Err: err}
				}
				stored = append(stored, v)
			}
			switch {
			case gv.Group.Kind == layout.KindMamba:
				res.Skipped[id] = StoredSkipState
				continue
			case gv.Skip != "":
				res.Skipped[id] = gv.Skip
				continue
			case len(gv.Caches) == 0:
				continue // no layer of the group on this rank
			}
			fp, _ := Fingerprints(gv)
			S := gv.Group.BlockSize
			table := r.BlockTable[key]
			full := r.NumTokens / S
			for p, h := range hashes {
				tag, err := StoredTag(h, fp)
				if err != nil {
					return nil, &layout.DumpError{File: d.Path, Field: fmt.Sprintf("%s[%d]", field, p), Err: err}
				}
				if p >= full || p >= len(table) || table[p] == layout.NoBlock {
					continue
				}
				b := StoredBlock{Request: r.ID, Group: id, Position: p, Block: table[p], Hash: h, Value: tag}
				if p < len(stored) {
					b.Stored, b.HasStored = stored[p], true
				}
				out := plan.Outputs
				plan.Outputs++
				for _, c := range gv.Caches {
					ti, ok := taskOf[c]
					if !ok {
						ti = len(plan.Tasks)
						taskOf[c] = ti
						plan.Tasks = append(plan.Tasks, Task{Cache: c})
					}
					plan.Tasks[ti].Rows = append(plan.Tasks[ti].Rows, Row{Block: b.Block, FirstToken: int64(p) * int64(S), Valid: S, Out: out})
				}
				res.Blocks = append(res.Blocks, b)
			}
		}
	}
	sums := make([]uint64, plan.Outputs)
	if err := opts.engine().Run(ctx, plan, sums); err != nil {
		return nil, err
	}
	for i := range res.Blocks {
		b := &res.Blocks[i]
		b.Sum = sums[i]
		b.Value ^= b.Sum // Value held the tag
	}
	return res, nil
}

func sortedGroupKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return cmp.Compare(x, y)
	})
	return keys
}
