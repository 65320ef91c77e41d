package report

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/verify"
)

// This file draws a comparison's block maps on the HTML page: one row per
// request and group, requests whose rows look alike folded into one, each
// map a strip of at most htmlMapCells cells.

// mapRow is one row of block maps: a group of one request, or of several
// requests whose rows look alike (folded), or a load that has no group.
type mapRow struct {
	IDs       []string
	IDsLeft   int
	Group     string
	Kind      string
	BlockSize string
	Numbering string
	Verdict   badge
	Positions string
	Checks    string
	Reason    string
	Hint      string
	// MixOnly are the positions that differ in kvaudit's mix check only
	// (vLLM's checksum agrees), "" when none.
	MixOnly string
	Cells   []stripCell
	Per     int
}

// stripCell is one cell of a block map strip.
type stripCell struct {
	Class, Sym, Tip string
}

// positionStates are the block map's states as the page draws them.
var positionStates = [...]struct{ class, sym, text string }{
	verify.PosNotLoaded:   {"s-nl", "_", "not loaded"},
	verify.PosNotCompared: {"s-nc", "-", "not compared"},
	verify.PosVerified:    {"s-ok", ".", "verified"},
	verify.PosMismatch:    {"s-x", "X", "mismatch"},
}

// tokensOf says which tokens block position p holds ("" when unknown).
func tokensOf(p, blockSize, numTokens int) string {
	if blockSize <= 0 {
		return ""
	}
	lo, hi := p*blockSize, (p+1)*blockSize-1
	if numTokens > 0 {
		hi = min(hi, numTokens-1)
	}
	if hi < lo {
		return "tokens past num_tokens"
	}
	if lo == hi {
		return fmt.Sprintf("token %d", lo)
	}
	return fmt.Sprintf("tokens %d-%d", lo, hi)
}

// stripCells draws a group's block map in at most htmlMapCells cells,
// each with its positions, tokens and state on hover and focus.
func stripCells(g *verify.GroupVerdict, numTokens int) ([]stripCell, int) {
	m := g.Map
	per := 1
	if len(m) > htmlMapCells {
		per = (len(m) + htmlMapCells - 1) / htmlMapCells
	}
	state := g.Kind == "mamba"
	var cells []stripCell
	for i := 0; i < len(m); i += per {
		part := m[i:min(i+per, len(m))]
		worst := slices.Max(part)
		s := positionStates[worst]
		var tip strings.Builder
		if len(part) == 1 {
			fmt.Fprintf(&tip, "position %d", i)
		} else {
			fmt.Fprintf(&tip, "positions %d-%d", i, i+len(part)-1)
		}
		switch {
		case state:
			tip.WriteString(" · the state block")
		case len(part) == 1:
			if t := tokensOf(i, g.BlockSize, numTokens); t != "" {
				tip.WriteString(" · " + t)
			}
		default:
			if g.BlockSize > 0 {
				fmt.Fprintf(&tip, " · tokens %d-%d", i*g.BlockSize, min((i+len(part))*g.BlockSize, max(numTokens, 1))-1)
			}
		}
		if len(part) == 1 {
			tip.WriteString(" · " + s.text)
		} else {
			var counts []string
			for st := verify.PosMismatch; ; st-- {
				if n := countState(part, st); n > 0 {
					counts = append(counts, fmt.Sprintf("%d %s", n, positionStates[st].text))
				}
				if st == verify.PosNotLoaded {
					break
				}
			}
			tip.WriteString(" · " + strings.Join(counts, ", "))
		}
		if worst == verify.PosMismatch && len(g.Checks) > 0 {
			tip.WriteString(" in check(s) " + ranges.Format(g.Checks))
		}
		cells = append(cells, stripCell{Class: s.class, Sym: s.sym, Tip: tip.String()})
	}
	return cells, per
}

func countState(m []verify.PositionState, s verify.PositionState) int {
	n := 0
	for _, x := range m {
		if x == s {
			n++
		}
	}
	return n
}

// mapRows lays out the comparison's block maps, one row per request and
// group, folding requests whose rows are the same but for the id.
func mapRows(res *verify.DiffResult) (rows []mapRow, left int) {
	index := map[string]int{}
	add := func(id string, r mapRow) {
		key := fmt.Sprintf("%#v", r) // all but the id, not yet set
		if i, ok := index[key]; ok {
			if len(rows[i].IDs) < htmlMaxIDs {
				rows[i].IDs = append(rows[i].IDs, id)
			} else {
				rows[i].IDsLeft++
			}
			return
		}
		if len(rows) >= htmlMaxRows {
			left++
			return
		}
		r.IDs = []string{id}
		index[key] = len(rows)
		rows = append(rows, r)
	}
	for _, rv := range res.Requests {
		id := clip(rv.ID)
		if rv.ProducerID != rv.ID {
			id += " ← " + clip(rv.ProducerID)
		}
		if len(rv.Reasons) > 0 || len(rv.Groups) == 0 {
			add(id, mapRow{Group: "–", Numbering: rv.Numbering, Verdict: verdictBadge(rv.Verdict),
				Reason: clip(strings.Join(rv.Reasons, "; ")), Hint: clip(strings.Join(rv.Hints, "; "))})
		}
		for _, g := range rv.Groups {
			r := mapRow{Group: strconv.Itoa(g.ID), Kind: clip(g.Kind), Numbering: rv.Numbering, Verdict: verdictBadge(g.Verdict),
				Positions: clip(ranges.Format(g.Positions)), Checks: clip(ranges.Format(g.Checks)), Reason: clip(g.Reason), Hint: clip(g.Hint),
				MixOnly: clip(ranges.Format(g.MixOnly))}
			switch {
			case g.BlockSize == 0:
			case g.ProducerBlockSize != 0 && g.ProducerBlockSize != g.BlockSize:
				r.BlockSize = fmt.Sprintf("%d (producer %d)", g.BlockSize, g.ProducerBlockSize)
			default:
				r.BlockSize = strconv.Itoa(g.BlockSize)
			}
			r.Cells, r.Per = stripCells(g, rv.NumTokens)
			add(id, r)
		}
	}
	return rows, left
}
