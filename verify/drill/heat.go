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
