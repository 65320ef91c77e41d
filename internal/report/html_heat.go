package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// This file draws the drill-down's heatmaps on the HTML page: a grid of
// layers by global heads (or states) per distinct pattern of differing
// bytes, each marked cell naming the drill-down's hint, within the caps of
// html.go.

// heatSection is the heatmaps of a comparison, one per distinct pattern,
// and the mismatching positions that have none.
type heatSection struct {
	Maps []heatmap
	// Left counts the patterns not drawn (past the caps), LeftWhere
	// names some of their places.
	Left      int
	LeftWhere []string
	// Quiet are the places where a drilled mismatching position has no
	// differing slice; NotDrilled those the drill-down did not look at.
	Quiet      []string
	NotDrilled []string
}

// heatmap is one pattern: a grid of layers (and replicas) by global heads
// (or states), and the places it was found.
type heatmap struct {
	Caption string
	// Hints say what the drill-down's details of the first place found.
	Hints     []string
	Where     []string
	WhereLeft int
	Max       int
	ColName   string
	Cols      []string
	Rows      []heatRow
}

type heatRow struct {
	Label, Tip string
	Cells      []heatCell
}

type heatCell struct {
	Class, Sym, Tip string
	Focus           bool
}

// heatLevel is the shade of b differing bytes in a map whose most is
// most: 1 to 4 on a log scale, so that one byte next to a whole block
// still shows.
func heatLevel(b, most int) int {
	if most <= 1 {
		return 4
	}
	return max(1, int(math.Ceil(4*math.Log1p(float64(b))/math.Log1p(float64(most)))))
}

// hintMark is the symbol of a drill-down hint in a heatmap cell.
func hintMark(hint string) (class, sym string) {
	switch {
	case strings.Contains(hint, "flipped"):
		return "k-flip", "b"
	case hint == "zeroed":
		return "k-zero", "0"
	case strings.Contains(hint, "swapped"):
		return "k-swap", "⇄"
	case strings.HasPrefix(hint, "holds"):
		return "k-held", "→"
	case hint == "random bytes":
		return "k-rand", "≈"
	}
	return "k-x", "×"
}

// heatPlace is where a heat was found.
type heatPlace struct {
	rv   *verify.RequestVerdict
	heat *drill.Heat
}

func (p heatPlace) String() string {
	s := fmt.Sprintf("request %s group %d", clip(p.rv.ID), p.heat.Group)
	if p.heat.State {
		return s + " (state)"
	}
	return fmt.Sprintf("%s position %d", s, p.heat.Position)
}

// heatKey is a heat's pattern: its axes and each cell's level (0 equal,
// 1-4 differing, ? not drilled, space none).
func heatKey(h *drill.Heat) (key string, most int, quiet bool) {
	for _, b := range h.Bytes {
		most = max(most, b)
	}
	var k strings.Builder
	fmt.Fprintf(&k, "%d/%v/%v/%d/%d/", h.Group, h.State, h.Layers, h.Heads, h.Replicas)
	for _, b := range h.Bytes {
		switch {
		case b == drill.HeatNotDrilled:
			k.WriteByte('?')
		case b == drill.HeatNone:
			k.WriteByte(' ')
		case b == 0:
			k.WriteByte('0')
		default:
			k.WriteByte(byte('0' + heatLevel(b, most)))
		}
	}
	return k.String(), most, most == 0
}

// newHeatSection folds every drilled position's heat by pattern and draws
// each pattern once, within the caps; positions of mismatching groups
// without a heat were not drilled.
func newHeatSection(res *verify.DiffResult) *heatSection {
	s := &heatSection{}
	type pattern struct {
		places []heatPlace
		most   int
	}
	var order []string
	patterns := map[string]*pattern{}
	var quiet, notDrilled []string
	for _, rv := range res.Requests {
		drilled := map[[2]int]bool{}
		for i := range rv.Heat {
			h := &rv.Heat[i]
			drilled[[2]int{h.Group, h.Position}] = true
			key, most, isQuiet := heatKey(h)
			if isQuiet {
				quiet = append(quiet, heatPlace{rv, h}.String())
				continue
			}
			p := patterns[key]
			if p == nil {
				p = &pattern{}
				patterns[key] = p
				order = append(order, key)
			}
			p.places = append(p.places, heatPlace{rv, h})
			p.most = max(p.most, most)
		}
		for _, g := range rv.Groups {
			if g.Verdict != verify.Mismatch {
				continue
			}
			var missing []int
			for _, pos := range g.Positions {
				if g.Kind == "mamba" {
					pos = 0
				}
				if !drilled[[2]int{g.ID, pos}] && !slices.Contains(missing, pos) {
					missing = append(missing, pos)
				}
			}
			if len(missing) > 0 {
				notDrilled = append(notDrilled, clip(fmt.Sprintf("request %s group %d position(s) %s", clip(rv.ID), g.ID, ranges.Format(missing))))
			}
		}
	}
	if len(order) == 0 && len(quiet) == 0 && len(notDrilled) == 0 {
		return nil
	}
	budget := htmlHeatCells
	for _, key := range order {
		p := patterns[key]
		first := p.places[0]
		cells := len(first.heat.Bytes)
		if len(s.Maps) >= htmlMaxHeatmaps || cells > budget {
			s.Left++
			if len(s.LeftWhere) < htmlMaxWhere {
				s.LeftWhere = append(s.LeftWhere, first.String())
			}
			continue
		}
		budget -= cells
		s.Maps = append(s.Maps, drawHeat(p.places, p.most))
	}
	s.Quiet = capList(quiet, htmlMaxWhere)
	s.NotDrilled = capList(notDrilled, htmlMaxWhere)
	return s
}

// capList keeps the first n strings of v and says how many it left out.
func capList(v []string, n int) []string {
	if len(v) <= n {
		return v
	}
	return append(v[:n:n], fmt.Sprintf("and %d more", len(v)-n))
}

// drawHeat draws one pattern from its first place (the drill-down's
// details of that place name each differing cell's hint and tokens).
func drawHeat(places []heatPlace, most int) heatmap {
	first := places[0]
	h, rv := first.heat, first.rv
	m := heatmap{Max: most, ColName: "global head"}
	what := "global heads"
	if h.State {
		m.ColName, what = "state", "states"
	}
	m.Caption = fmt.Sprintf("group %d: %d layer(s) × %d %s", h.Group, len(h.Layers), h.Heads, what)
	if h.Replicas > 1 {
		m.Caption += fmt.Sprintf(" × %d replicas", h.Replicas)
	}
	for i, p := range places {
		if i >= htmlMaxWhere {
			m.WhereLeft = len(places) - i
			break
		}
		w := p.String()
		if g := groupOf(p.rv, p.heat.Group); g != nil && !p.heat.State {
			if t := tokensOf(p.heat.Position, g.BlockSize, p.rv.NumTokens); t != "" {
				w += " (" + t + ")"
			}
		}
		m.Where = append(m.Where, w)
	}
	for c := range h.Heads {
		m.Cols = append(m.Cols, strconv.Itoa(c))
	}
	type slice struct{ layer, col, repl int }
	details := map[slice]*drill.Detail{}
	for i := range rv.Details {
		d := &rv.Details[i]
		if d.Group != h.Group || (!h.State && d.Position != h.Position) {
			continue
		}
		// A detail folds the slices of Layers x Heads (drill.Detail):
		// each of its cells is shaded with it.
		layers, cols := detailSlices(d)
		for _, layer := range layers {
			for _, col := range cols {
				if k := (slice{layer, col, d.Replica}); details[k] == nil {
					details[k] = d
				}
			}
		}
	}
	m.Hints = heatHints(rv, h)
	for l, layer := range h.Layers {
		for r := range h.Replicas {
			row := heatRow{Label: "layer " + strconv.Itoa(layer), Tip: clip(h.LayerNames[l])}
			if h.Replicas > 1 {
				row.Label += " r" + strconv.Itoa(r)
				row.Tip += ", replica " + strconv.Itoa(r)
			}
			for c := range h.Heads {
				row.Cells = append(row.Cells, heatCellOf(h, l, c, r, most, details[slice{layer, c, r}]))
			}
			m.Rows = append(m.Rows, row)
		}
	}
	return m
}

// heatHints sums up the drill-down's details of a heat's place: each
// hint with where it is (one slice) or how many slices have it, at most
// four.
func heatHints(rv *verify.RequestVerdict, h *drill.Heat) []string {
	var order []string
	by := map[string][]*drill.Detail{}
	for i := range rv.Details {
		d := &rv.Details[i]
		if d.Group != h.Group || (!h.State && d.Position != h.Position) {
			continue
		}
		if by[d.Hint] == nil {
			order = append(order, d.Hint)
		}
		by[d.Hint] = append(by[d.Hint], d)
	}
	var out []string
	for _, hint := range order {
		ds := by[hint]
		n := 0
		for _, d := range ds {
			layers, cols := detailSlices(d)
			n += len(layers) * len(cols)
		}
		if n > 1 {
			out = append(out, fmt.Sprintf("%s in %d slices", clip(hint), n))
			continue
		}
		d := ds[0]
		at := fmt.Sprintf("layer %d, head %d", d.Layer, d.Head)
		if d.State {
			at = fmt.Sprintf("layer %d, state %d", d.Layer, d.StateIndex)
		}
		out = append(out, fmt.Sprintf("%s at %s (%s)", clip(hint), at, detailWhere(d)))
	}
	return capList(out, 4)
}

func groupOf(rv *verify.RequestVerdict, id int) *verify.GroupVerdict {
	for _, g := range rv.Groups {
		if g.ID == id {
			return g
		}
	}
	return nil
}

// heatCellOf draws one slice: its shade and symbol, and on hover and
// focus its layer, head, bytes and, where a detail names it, the hint
// and tokens (detailTip).
func heatCellOf(h *drill.Heat, l, c, r, most int, d *drill.Detail) heatCell {
	b := h.At(l, c, r)
	col := "head"
	if h.State {
		col = "state"
	}
	where := fmt.Sprintf("layer %d · %s %d", h.Layers[l], col, c)
	if h.Replicas > 1 {
		where += fmt.Sprintf(" · replica %d", r)
	}
	switch {
	case b == drill.HeatNone:
		return heatCell{Class: "none"}
	case b == drill.HeatNotDrilled:
		return heatCell{Class: "nd", Sym: "?", Tip: where + " · not drilled", Focus: true}
	case b == 0:
		return heatCell{}
	}
	kind, sym, tip := "k-x", "×", fmt.Sprintf("%s · %d byte(s) differ", where, b)
	if d != nil {
		kind, sym = hintMark(d.Hint)
		tip += " · " + detailTip(d)
	}
	return heatCell{Class: "l" + strconv.Itoa(heatLevel(b, most)) + " " + kind, Sym: sym, Tip: tip, Focus: true}
}

// detailSlices returns the layers and heatmap columns (global heads, or
// for a state group its state) of the slices a detail folds: every one of
// Layers x Heads, or its first layer and head where it names no others.
func detailSlices(d *drill.Detail) (layers, cols []int) {
	layers = d.Layers
	if len(layers) == 0 {
		layers = []int{d.Layer}
	}
	switch {
	case d.State:
		cols = []int{d.StateIndex}
	case len(d.Heads) > 0:
		cols = d.Heads
	default:
		cols = []int{d.Head}
	}
	return layers, cols
}

// detailTip is what a heatmap cell says of the drill-down's detail of its
// slice: the hint, tokens and bits, how many slices the detail folds,
// and where its first differing byte is on the consumer (rank, block id,
// file and offset).
func detailTip(d *drill.Detail) string {
	tip := clip(d.Hint) + " · " + detailWhere(d)
	if layers, cols := detailSlices(d); len(layers)*len(cols) > 1 {
		what := "heads"
		if d.State {
			what = "state"
		}
		tip += fmt.Sprintf(" · one of %d slices (layers %s, %s %s)", len(layers)*len(cols), ranges.Format(layers), what, ranges.Format(cols))
	}
	tip += fmt.Sprintf(" · rank %d:%d (pp:tp) · block %d", d.PPRank, d.TPRank, d.Block)
	if d.File != "" {
		tip += fmt.Sprintf(" · %s at offset %d", clip(d.File), d.Offset)
	}
	return tip
}

// detailWhere is a detail's tokens (or state rows) and bits.
func detailWhere(d *drill.Detail) string {
	var parts []string
	if d.State {
		parts = append(parts, fmt.Sprintf("rows %d-%d", d.Head, d.LastHead))
	} else if d.FirstToken == d.LastToken {
		parts = append(parts, fmt.Sprintf("token %d", d.FirstToken))
	} else {
		parts = append(parts, fmt.Sprintf("tokens %d-%d", d.FirstToken, d.LastToken))
	}
	parts = append(parts, fmt.Sprintf("%d bit(s)", d.Bits))
	return strings.Join(parts, " · ")
}
