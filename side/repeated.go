package side

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/layout"
)

// RepeatedBlock is a block id that one request's block table gives at two
// or more positions of one group (docs/spec.md §9): a block holds one
// position of a request, so all but one of those positions hold the wrong
// KV (a load that wrote a request's blocks into its own cached prefix
// block, say). It is a finding whatever the checksums say: a position not
// compared (a local prefix hit) may be the one overwritten. The same
// block at the same position of several requests (a shared prefix) is
// right and is not one.
type RepeatedBlock struct {
	// Side is "producer" or "consumer" in a comparison, "" for one side.
	Side    string
	Request string
	Group   int
	Block   int
	// Positions are the block positions the table gives it at, in order.
	Positions []int
	// Rank is the first rank whose manifest shows it (the ranks of a
	// side normally share their block tables).
	Rank layout.Rank
}

// String describes the finding in one line.
func (b RepeatedBlock) String() string {
	side := ""
	if b.Side != "" {
		side = b.Side + " "
	}
	return fmt.Sprintf("%srequest %q group %d: block %d is given at positions %s of one request (rank %d:%d)",
		side, b.Request, b.Group, b.Block, ranges.Format(b.Positions), b.Rank.PP, b.Rank.TP)
}

// RepeatedBlocks returns the repeated blocks of the block tables of the
// dumps' requests (all when requests is empty), each once however many
// ranks show it, sorted by request, group and first position. side names
// the dumps' side in the findings. Null entries are not blocks; a state
// group's one block per request cannot repeat. It reads manifests only.
func RepeatedBlocks(side string, dumps []*layout.Dump, requests []string) []RepeatedBlock {
	var out []RepeatedBlock
	type key struct {
		request     string
		group, pos0 int
	}
	seen := map[key]bool{}
	for _, d := range dumps {
		pp, tp := d.Rank()
		for _, r := range d.Manifest.Requests {
			if len(requests) > 0 && !slices.Contains(requests, r.ID) {
				continue
			}
			for gkey, table := range r.BlockTable {
				gid, err := strconv.Atoi(gkey)
				if err != nil {
					continue // the manifest's validation refuses it
				}
				at := map[int][]int{}
				for pos, b := range table {
					if b != layout.NoBlock {
						at[b] = append(at[b], pos)
					}
				}
				for b, pos := range at {
					k := key{r.ID, gid, pos[0]}
					if len(pos) < 2 || seen[k] {
						continue
					}
					seen[k] = true
					out = append(out, RepeatedBlock{Side: side, Request: r.ID, Group: gid, Block: b, Positions: pos, Rank: layout.Rank{PP: pp, TP: tp}})
				}
			}
		}
	}
	slices.SortFunc(out, func(x, y RepeatedBlock) int {
		return cmp.Or(cmp.Compare(x.Request, y.Request), cmp.Compare(x.Group, y.Group), cmp.Compare(x.Positions[0], y.Positions[0]))
	})
	return out
}

// repeatedSummary says in one line which blocks repeat.
func repeatedSummary(rep []RepeatedBlock) string {
	more := ""
	if len(rep) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(rep)-1)
	}
	return fmt.Sprintf("repeated blocks: %s%s", rep[0], more)
}
