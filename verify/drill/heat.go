package drill

import (
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
)

// Heat values that are not byte counts.
const (
	// HeatNotDrilled marks a slice the drill-down did not compare (its
	// cells are in device memory, or the producer holds no such slice).
	HeatNotDrilled = -1
	// HeatNone marks a (head, replica) the layer does not have.
	HeatNone = -2
)

// Heat is what a heatmap of one mismatching (group, consumer block
// position) draws: the differing bytes of every (layer, global head,
// replica) slice the consumer's caches hold, counted whether or not a
// Detail reports the slice (Options.MaxDetails caps details, not heat).
// For a state group (State) the position is 0 and a "head" is one of the
// layer's states: a cell sums the differing bytes of that state's rows
// over its segments and ranks.
type Heat struct {
	Group, Position int
	State           bool
	// Layers are the rows, the group's layer numbers ascending, and
	// LayerNames the consumer's names of each (its caches' names, comma
	// separated: a layer's indexer cache beside its attention); Heads and
	// Replicas count the columns (global head indices, or states) and
	// replica copies. A group's heats share these slices.
	Layers     []int
	LayerNames []string
	Heads      int
	Replicas   int
	// Bytes[(l*Heads+h)*Replicas+r] is the differing bytes of layer
	// Layers[l], global head (state) h, replica r: 0 where it was
	// compared equal, HeatNotDrilled where it was not compared, HeatNone
	// where the layer has no such head or replica.
	Bytes []int
}

// At returns the bytes of the slice of row l (in Layers), global head
// (state) h and replica r.
func (h *Heat) At(l, head, r int) int { return h.Bytes[(l*h.Heads+head)*h.Replicas+r] }

// heatAxes are the axes of a group's heats, from the consumer's caches:
// a row per layer number, a column per global head index a cache covers
// (a layer's caches share the head indices of its factors, docs/spec.md
// §3: an indexer's cache takes the index after the attention heads), a
// replica per replica index.
type heatAxes struct {
	state           bool
	layers          []int
	names           []string
	heads, replicas int
	present         []bool // slices a cache covers, by heat index
}

func newHeatAxes(caches []cache) *heatAxes {
	a := &heatAxes{replicas: 1}
	for _, c := range caches {
		v := c.View
		a.state = a.state || v.State
		if !slices.Contains(a.layers, v.Number) {
			a.layers = append(a.layers, v.Number)
		}
		_, hi := a.span(v)
		a.heads = max(a.heads, hi)
		a.replicas = max(a.replicas, v.ReplicaIndex+1)
	}
	slices.Sort(a.layers)
	names := make([][]string, len(a.layers))
	for _, c := range caches {
		l := slices.Index(a.layers, c.View.Number)
		if !slices.Contains(names[l], c.View.Layer.Name) {
			names[l] = append(names[l], c.View.Layer.Name)
		}
	}
	for _, n := range names {
		a.names = append(a.names, strings.Join(n, ", "))
	}
	a.present = make([]bool, len(a.layers)*a.heads*a.replicas)
	for _, c := range caches {
		lo, hi := a.span(c.View)
		for h := lo; h < hi; h++ {
			a.present[a.slot(c.View, h)] = true
		}
	}
	return a
}

// span is the head columns [lo, hi) a view covers: its heads, or for a
// state view its state.
func (a *heatAxes) span(v *layout.LayerView) (lo, hi int) {
	if v.State {
		return v.StateIndex, v.StateIndex + 1
	}
	return v.HeadBase, v.HeadBase + v.Heads
}

func (a *heatAxes) index(l, h, r int) int { return (l*a.heads+h)*a.replicas + r }

// slot returns the heat index of a view's head (a state view's state) and
// replica.
func (a *heatAxes) slot(v *layout.LayerView, head int) int {
	if v.State {
		head = v.StateIndex
	}
	return a.index(slices.Index(a.layers, v.Number), head, v.ReplicaIndex)
}

// heat starts a position's heat: every slice a cache covers not drilled,
// the others none.
func (a *heatAxes) heat(group, pos int) Heat {
	b := make([]int, len(a.present))
	for i, p := range a.present {
		b[i] = HeatNone
		if p {
			b[i] = HeatNotDrilled
		}
	}
	return Heat{Group: group, Position: pos, State: a.state, Layers: a.layers, LayerNames: a.names,
		Heads: a.heads, Replicas: a.replicas, Bytes: b}
}

// add records n differing bytes at heat index i (n < 0: not compared,
// which leaves the slice not drilled).
func (h *Heat) add(i, n int) {
	if n < 0 {
		return
	}
	h.Bytes[i] = max(h.Bytes[i], 0) + n
}

// heats returns the heat of every attention (group, position) that rs
// compares (rs.positions, in order): 0 for each slice whose producer
// slice the consumer's cache could be compared with, then its units'
// differing bytes added, past the details' cap too.
func (e *explainer) heats(rs *reqState) []Heat {
	if len(rs.positions) == 0 {
		return nil
	}
	type groupHeat struct {
		axes *heatAxes
		// compared[cg.flat(ci, lh)]: the consumer's local head lh of
		// cache ci is in mapped memory and the producer holds that slice
		// there too.
		compared []bool
	}
	groups := map[int]*groupHeat{}
	at := make(map[[2]int]int, len(rs.positions))
	out := make([]Heat, 0, len(rs.positions))
	for _, pp := range rs.positions {
		cg := e.c.group(pp[0])
		gh := groups[pp[0]]
		if gh == nil {
			pg := e.p.group(pp[0])
			gh = &groupHeat{axes: newHeatAxes(cg.caches), compared: make([]bool, cg.flat(len(cg.caches), 0))}
			for ci, c := range cg.caches {
				if c.View.Cells.Data == nil {
					continue
				}
				for lh := range c.View.Heads {
					pci, ok := pg.find(c.View.Layer.Name, c.View.HeadBase+lh, -1)
					gh.compared[cg.flat(ci, lh)] = ok && pg.caches[pci].View.Cells.Data != nil
				}
			}
			groups[pp[0]] = gh
		}
		h := gh.axes.heat(pp[0], pp[1])
		for ci, c := range cg.caches {
			for lh := range c.View.Heads {
				if gh.compared[cg.flat(ci, lh)] {
					h.add(gh.axes.slot(c.View, c.View.HeadBase+lh), 0)
				}
			}
		}
		at[pp] = len(out)
		out = append(out, h)
	}
	for _, u := range rs.units {
		i, ok := at[[2]int{u.group, u.pos}]
		if !ok {
			continue
		}
		v := u.cg.caches[u.ci].View
		axes := groups[u.group].axes
		for _, s := range u.diffs {
			out[i].add(axes.slot(v, int(s.head)), int(s.bytes))
		}
	}
	return out
}
