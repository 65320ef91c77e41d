package verify

import (
	"cmp"
	"context"
	"fmt"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/parse"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
)

// Reasons a group's blocks are not checked against stored checksums.
const (
	StoredSkipState = "stored checksums cover attention blocks only (a state group has no token blocks)"
)

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

// RankStored computes the stored checksum of every full block (position p with
// (p+1)*block_size <= num_tokens) that a request of the dump lists a block
// hash for, and reads the manifest's stored checksum of each. Block
// positions count from 0 whatever the request's local prefix hit; null
// blocks and positions past the block table are left out. opts.Requests
// restricts the requests (an id the dump lacks is an error). A block hash
// that is not hex is an error naming the dump and field.
func RankStored(ctx context.Context, d *layout.Dump, opts checksum.Options) (*StoredRank, error) {
	m := d.Manifest
	res := &StoredRank{
		Path: d.Path, TPRank: m.Parallel.TPRank, TPSize: m.Parallel.TPSize,
		PPRank: m.Parallel.PPRank, PPSize: m.Parallel.PPSize, Skipped: map[int]string{},
	}
	for _, id := range opts.Requests {
		if m.Request(id) == nil {
			return nil, &parse.Error{Format: parse.Dump, File: d.Path, Field: "requests", Err: fmt.Errorf("no request %q", id)}
		}
	}
	plan := &ckplan.Plan{Dump: d, Progress: opts.Progress}
	taskOf := map[*layout.LayerView]int{}
	// A block read at the same position (a shared prefix) sums the same
	// for every request: one output slot and one read per (group,
	// position, block), docs/spec.md §10.
	slotOf := map[[3]int]int{}
	var slots []int // the slot of each of res.Blocks
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
					return nil, &parse.Error{Format: parse.Dump, File: d.Path, Field: fmt.Sprintf("requests[%d].stored_checksums[%q][%d]", ri, key, i), Err: err}
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
			fp, _ := checksum.Fingerprints(gv)
			S := gv.Group.BlockSize
			table := r.BlockTable[key]
			full := r.NumTokens / S
			for p, h := range hashes {
				tag, err := checksum.StoredTag(h, fp)
				if err != nil {
					return nil, &parse.Error{Format: parse.Dump, File: d.Path, Field: fmt.Sprintf("%s[%d]", field, p), Err: err}
				}
				if p >= full || p >= len(table) || table[p] == layout.NoBlock {
					continue
				}
				b := StoredBlock{Request: r.ID, Group: id, Position: p, Block: table[p], Hash: h, Value: tag}
				if p < len(stored) {
					b.Stored, b.HasStored = stored[p], true
				}
				res.Blocks = append(res.Blocks, b)
				if out, ok := slotOf[[3]int{id, p, b.Block}]; ok {
					slots = append(slots, out)
					continue
				}
				out := plan.Outputs
				plan.Outputs++
				slotOf[[3]int{id, p, b.Block}] = out
				slots = append(slots, out)
				for _, c := range gv.Caches {
					ti, ok := taskOf[c]
					if !ok {
						ti = len(plan.Tasks)
						taskOf[c] = ti
						plan.Tasks = append(plan.Tasks, ckplan.Task{Cache: c})
					}
					plan.Tasks[ti].Rows = append(plan.Tasks[ti].Rows, ckplan.Row{Block: b.Block, FirstToken: int64(p) * int64(S), Valid: S, Out: out})
				}
			}
		}
	}
	sums := make([]uint64, plan.Outputs)
	if err := engineOf(opts).Run(ctx, plan, sums); err != nil {
		return nil, err
	}
	for i := range res.Blocks {
		b := &res.Blocks[i]
		b.Sum = sums[slots[i]]
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

// engineOf is the engine opts names, checksum.Fast by default.
func engineOf(opts checksum.Options) checksum.Engine {
	if opts.Engine == nil {
		return checksum.Fast{}
	}
	return opts.Engine
}
