package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// This file renders package verify's stored checksums (kvaudit checksum
// --stored, kvaudit diff --stored): their verdict is verify's, this only
// lays them out.

// StoredFormat is the format tag of the stored checksums' JSON.
const StoredFormat = "kvaudit-stored/1"

// StoredJSON is the JSON of stored checksums: each rank's values (what an
// offload tier stores beside each full block, to paste into a manifest's
// stored_checksums) and, where the manifest lists stored checksums, the
// comparison.
type StoredJSON struct {
	Format string `json:"format"`
	// Verdict is verified (every stored checksum matches), mismatch, or
	// unverified (the manifests list none to compare).
	Verdict string           `json:"verdict"`
	Ranks   []StoredRankJSON `json:"ranks"`
}

// StoredRankJSON is one rank's stored checksums.
type StoredRankJSON struct {
	Source string `json:"source"`
	TPRank int    `json:"tp_rank"`
	PPRank int    `json:"pp_rank"`
	// SkippedGroups: group id -> why its blocks are not checked.
	SkippedGroups map[string]string   `json:"skipped_groups"`
	Requests      []StoredRequestJSON `json:"requests"`
	Blocks        []StoredBlockJSON   `json:"blocks"`
}

// StoredRequestJSON holds a request's stored checksums by group id, one per
// position from 0 (the manifest's stored_checksums); a position without a
// block holds 0x0000000000000000.
type StoredRequestJSON struct {
	ID              string                    `json:"id"`
	StoredChecksums map[string][]layout.Hex64 `json:"stored_checksums"`
}

// StoredBlockJSON is one full block: its recomputed stored checksum and
// the manifest's, if any.
type StoredBlockJSON struct {
	Request   string        `json:"request"`
	Group     int           `json:"group"`
	Position  int           `json:"position"`
	Block     int           `json:"block"`
	BlockHash string        `json:"block_hash"`
	Stored    layout.Hex64  `json:"stored_checksum"`
	Manifest  *layout.Hex64 `json:"manifest"`
	// Verdict is match, mismatch or "not stored".
	Verdict string `json:"verdict"`
}

func storedVerdict(b *verify.StoredBlock) string {
	switch {
	case !b.HasStored:
		return "not stored"
	case b.Match():
		return "match"
	}
	return "mismatch"
}

// NewStoredJSON converts stored checksums to their JSON.
func NewStoredJSON(ranks []*verify.StoredRank) *StoredJSON {
	out := &StoredJSON{Format: StoredFormat, Verdict: string(verify.StoredVerdict(ranks)), Ranks: []StoredRankJSON{}}
	for _, r := range ranks {
		rj := StoredRankJSON{Source: r.Path, TPRank: r.TPRank, PPRank: r.PPRank, SkippedGroups: map[string]string{},
			Requests: []StoredRequestJSON{}, Blocks: []StoredBlockJSON{}}
		for id, reason := range r.Skipped {
			rj.SkippedGroups[fmt.Sprint(id)] = reason
		}
		for i := range r.Blocks {
			b := &r.Blocks[i]
			bj := StoredBlockJSON{Request: b.Request, Group: b.Group, Position: b.Position, Block: b.Block,
				BlockHash: b.Hash, Stored: layout.Hex64(b.Value), Verdict: storedVerdict(b)}
			if b.HasStored {
				v := layout.Hex64(b.Stored)
				bj.Manifest = &v
			}
			rj.Blocks = append(rj.Blocks, bj)
			n := len(rj.Requests)
			if n == 0 || rj.Requests[n-1].ID != b.Request {
				rj.Requests = append(rj.Requests, StoredRequestJSON{ID: b.Request, StoredChecksums: map[string][]layout.Hex64{}})
				n++
			}
			key := fmt.Sprint(b.Group)
			vals := rj.Requests[n-1].StoredChecksums[key]
			for len(vals) < b.Position {
				vals = append(vals, 0)
			}
			rj.Requests[n-1].StoredChecksums[key] = append(vals, layout.Hex64(b.Value))
		}
		out.Ranks = append(out.Ranks, rj)
	}
	return out
}

// StoredTable lays out stored checksums: one row per full block with a
// block hash, the stored checksum computed from the block and the one the
// manifest lists (stored_checksums), and whether they match.
func StoredTable(ranks []*verify.StoredRank) *Table {
	t := &Table{
		Title:  "stored checksums: " + string(verify.StoredVerdict(ranks)),
		Header: []string{"rank", "request", "group", "position", "block", "block hash", "computed", "in manifest", "verdict"},
		Drop:   []string{"block hash", "block", "rank", "group"},
		Whole:  []string{"request"},
	}
	for _, r := range ranks {
		for i := range r.Blocks {
			b := &r.Blocks[i]
			manifest := Cell{Text: "-", Tone: Dim}
			mark := Cell{Text: "not stored", Tone: Dim}
			if b.HasStored {
				manifest = C("%s", layout.Hex64(b.Stored))
				mark = Cell{Text: "match", Tone: Good}
				if !b.Match() {
					mark = Cell{Text: "DIFFERS", Tone: Bad}
				}
			}
			t.Add(C("%d:%d", r.PPRank, r.TPRank), C("%s", b.Request), C("%d", b.Group), C("%d", b.Position), C("%d", b.Block),
				C("%s", b.Hash), C("%s", layout.Hex64(b.Value)), manifest, mark)
		}
		for _, id := range slices.Sorted(maps.Keys(r.Skipped)) {
			t.Notes = append(t.Notes, fmt.Sprintf("rank %d:%d group %d: %s", r.PPRank, r.TPRank, id, r.Skipped[id]))
		}
	}
	if len(t.Rows) == 0 {
		t.Notes = append(t.Notes, "no full block lists a block hash (block_hashes in the manifest): nothing to emit or check")
	}
	t.Notes = append(t.Notes, "computed: the stored checksum computed from the block, the rank's part of the block checksum XOR le64(first 8 bytes of the block hash) XOR the rank's nested fingerprint of the group (only full blocks); in manifest: the stored_checksums the manifest lists")
	return t
}

// storedSuite is the stored-checksum audit in JUnit: a case per request
// and group, failing with every block whose stored checksum differs; when
// no block has a stored checksum to compare, one more case says so (an
// error, or skipped with --allow-unverified).
func storedSuite(res *verify.DiffResult, ranks []*verify.StoredRank, allowUnverified bool) junitSuite {
	type bad struct {
		rank *verify.StoredRank
		b    verify.StoredBlock
	}
	var found []auditKey
	byKey := map[auditKey][]bad{}
	for _, r := range ranks {
		for _, b := range r.Mismatches() {
			k := auditKey{b.Request, b.Group}
			found = append(found, k)
			byKey[k] = append(byKey[k], bad{r, b})
		}
	}
	keys, cases := auditCases(res, found, func(*verify.GroupVerdict) string { return "" })
	s := junitSuite{Name: "stored checksums"}
	for _, k := range keys {
		c := cases[k]
		if bs := byKey[k]; len(bs) > 0 {
			var text strings.Builder
			for _, x := range bs {
				fmt.Fprintf(&text, "position %d block %d rank %d:%d: stored checksum %s, the block gives %s\n",
					x.b.Position, x.b.Block, x.rank.PPRank, x.rank.TPRank, layout.Hex64(x.b.Stored), layout.Hex64(x.b.Value))
			}
			c.Failure = &junitOutcome{Message: fmt.Sprintf("%d block(s) differ from the checksum stored with them", len(bs)), Type: "mismatch", Text: text.String()}
		}
		s.Cases = append(s.Cases, *c)
	}
	if verify.StoredVerdict(ranks) == verify.Unverified || len(s.Cases) == 0 {
		c := junitCase{Name: "stored checksums", Classname: "kvaudit.audit"}
		if verify.StoredVerdict(ranks) == verify.Unverified {
			o := &junitOutcome{Message: "no stored checksum to compare", Type: "unverified"}
			if allowUnverified {
				c.Skipped = o
			} else {
				c.Error = o
			}
		}
		s.Cases = append(s.Cases, c)
	}
	return s
}
