package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
)

// ChecksumsFormat is the format tag of `kvaudit checksum -o json`.
const ChecksumsFormat = "kvaudit-checksums/1"

// ChecksumsJSON is the stable schema of `kvaudit checksum -o json` (docs/spec.md
// §12). Fields are added, never renamed or removed.
type ChecksumsJSON struct {
	Format string `json:"format"`
	TPSize int    `json:"tp_size"`
	PPSize int    `json:"pp_size"`
	// Numbering is where the checks count pieces from: "request" (the
	// default) or "block" (vLLM's published code), docs/spec.md §1.
	Numbering string                `json:"numbering"`
	Requests  []ChecksumRequestJSON `json:"requests"`
	// Repeated are the blocks given at several positions of one request
	// (an audit finding: exit 1), when there are some.
	Repeated []RepeatedBlockJSON `json:"repeated_blocks,omitempty"`
}

// ChecksumRequestJSON is one request's checks.
type ChecksumRequestJSON struct {
	ID                     string              `json:"id"`
	ProducerID             string              `json:"producer_id,omitempty"`
	NumTokens              int                 `json:"num_tokens"`
	NumLocalComputedTokens int                 `json:"num_local_computed_tokens"`
	Groups                 []ChecksumGroupJSON `json:"groups"`
	SkippedGroups          []SkippedGroupJSON  `json:"skipped_groups"`
	// Unverified holds load-level reasons, e.g. not every rank was given.
	Unverified []string `json:"unverified"`
}

// ChecksumGroupJSON is one group's checks: Checks[k][i] is check k at block
// position Start+i.
type ChecksumGroupJSON struct {
	ID              int              `json:"id"`
	Kind            string           `json:"kind"`
	BlockSize       int              `json:"block_size"`
	Start           int              `json:"start"`
	Fingerprint     layout.Hex64     `json:"fingerprint"`
	FingerprintFlat layout.Hex64     `json:"fingerprint_flat"`
	Checks          [][]layout.Hex64 `json:"checks"`
	ReplicaKeys     [][2]int         `json:"replica_keys"`
	MissingReplica  bool             `json:"missing_replica,omitempty"`
	// Mix is kvaudit's mix check (docs/spec.md §14) beside Checks,
	// Mix[k][i] beside Checks[k][i], in either numbering (the mix check
	// has one); absent when an engine or record did not give it.
	Mix [][]layout.Hex64 `json:"mix,omitempty"`
}

// SkippedGroupJSON is a group that is not checksummed and why.
type SkippedGroupJSON struct {
	ID     int    `json:"id"`
	Reason string `json:"reason"`
}

// groupChecks returns a group's checks in numbering n (nil when the side
// did not give block-numbered ones).
func groupChecks(g *side.GroupChecks, n checksum.Numbering) [][]uint64 {
	if n == checksum.NumberBlock {
		return g.ChecksBlock
	}
	return g.Checks
}

// NewChecksumsJSONNumbered converts a side's checks to the JSON schema in
// numbering n.
func NewChecksumsJSONNumbered(c *side.Checks, n checksum.Numbering) *ChecksumsJSON {
	out := &ChecksumsJSON{Format: ChecksumsFormat, TPSize: c.TPSize, PPSize: c.PPSize, Numbering: n.String(), Requests: []ChecksumRequestJSON{}}
	skipped := skippedList(c.Skipped)
	for _, r := range c.Requests {
		rj := ChecksumRequestJSON{
			ID: r.ID, ProducerID: r.ProducerID, NumTokens: r.NumTokens,
			NumLocalComputedTokens: r.NumLocalComputedTokens,
			Groups:                 []ChecksumGroupJSON{}, SkippedGroups: skipped,
			Unverified: append([]string{}, r.Unverified...),
		}
		for _, g := range r.Groups {
			gj := ChecksumGroupJSON{
				ID: g.ID, Kind: g.Kind, BlockSize: g.BlockSize, Start: g.Start,
				Fingerprint: layout.Hex64(g.Fingerprint), FingerprintFlat: layout.Hex64(g.FingerprintFlat),
				Checks: make([][]layout.Hex64, len(groupChecks(g, n))), ReplicaKeys: g.Keys, MissingReplica: g.MissingReplica,
			}
			gj.Checks = hexLists(groupChecks(g, n))
			if g.ChecksMix != nil {
				gj.Mix = hexLists(g.ChecksMix)
			}
			rj.Groups = append(rj.Groups, gj)
		}
		out.Requests = append(out.Requests, rj)
	}
	return out
}

// hexLists writes lists of uint64s as hex.
func hexLists(lists [][]uint64) [][]layout.Hex64 {
	out := make([][]layout.Hex64, len(lists))
	for k, l := range lists {
		out[k] = make([]layout.Hex64, len(l))
		for i, v := range l {
			out[k][i] = layout.Hex64(v)
		}
	}
	return out
}

func skippedList(m map[int]string) []SkippedGroupJSON {
	out := []SkippedGroupJSON{}
	for id, reason := range m {
		out = append(out, SkippedGroupJSON{ID: id, Reason: reason})
	}
	slices.SortFunc(out, func(a, b SkippedGroupJSON) int { return a.ID - b.ID })
	return out
}

// WriteJSON writes v as indented JSON with a final newline, streaming the
// lists of checks (writeJSON): an output of millions of checks is never
// held whole.
func WriteJSON(w io.Writer, v any) error { return writeJSON(w, v) }

// ChecksumsTableNumbered lays out a side's checks in numbering n: one row
// per request, group and block position, every check in full. The rows
// are made as the table is rendered (Table.Stream).
func ChecksumsTableNumbered(c *side.Checks, n checksum.Numbering) *Table {
	maxChecks := 1
	for _, r := range c.Requests {
		for _, g := range r.Groups {
			maxChecks = max(maxChecks, len(groupChecks(g, n)))
		}
	}
	title := fmt.Sprintf("checksums (tp %d x pp %d)", c.TPSize, c.PPSize)
	if n != checksum.NumberRequest {
		title = fmt.Sprintf("checksums (tp %d x pp %d, %s numbering)", c.TPSize, c.PPSize, n)
	}
	t := &Table{
		Title:  title,
		Header: []string{"request", "group", "kind", "position", "tokens"},
		Drop:   []string{"kind", "tokens"},
		Whole:  []string{"request"},
	}
	for k := range maxChecks {
		t.Header = append(t.Header, fmt.Sprintf("check %d", k))
	}
	t.Stream = func(add func(...Cell)) {
		row := make([]Cell, 0, 5+maxChecks)
		for _, r := range c.Requests {
			for _, g := range r.Groups {
				checks := groupChecks(g, n)
				group := C("%d", g.ID)
				for i := range g.Positions() {
					pos := g.Start + i
					tokens := C("%d", blockspan.ValidTokens(r.NumTokens, pos, g.BlockSize))
					if g.Kind == layout.KindMamba {
						tokens = C("state")
					}
					row = append(row[:0], Cell{Text: r.ID}, group, Cell{Text: g.Kind}, C("%d", pos), tokens)
					for k := range maxChecks {
						switch {
						case k >= len(checks):
							row = append(row, Cell{Text: "-", Tone: Dim})
						case k > 0 && checks[k][i] != checks[0][i]:
							row = append(row, Cell{Text: layout.Hex64(checks[k][i]).String(), Tone: Bad})
						default:
							row = append(row, Cell{Text: layout.Hex64(checks[k][i]).String()})
						}
					}
					add(slices.Clone(row)...)
				}
			}
		}
	}
	for _, r := range c.Requests {
		if len(r.Unverified) > 0 {
			t.Notes = append(t.Notes, fmt.Sprintf("request %s: %s", r.ID, strings.Join(r.Unverified, "; ")))
		}
	}
	for _, s := range skippedList(c.Skipped) {
		t.Notes = append(t.Notes, fmt.Sprintf("group %d skipped: %s", s.ID, s.Reason))
	}
	return t
}
