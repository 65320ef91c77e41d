package drill

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/kvaudit/kvaudit/internal/ranges"
)

// foldKey is what the slices folded into one detail share: the position,
// the consumer rank (dump), file, block and replica copy, and the cause
// (for flipped bits, only that: they add up); for a state group, the
// state and its rows.
type foldKey struct {
	group, pos, dump, replica, block int
	file                             string
	cause                            cause
	state                            bool
	stateIndex, head, lastHead       int
}

// cause is a hint as a fold compares it: the two heads or layers of a
// swap in order, a state group's hint as text.
type cause struct {
	kind   hintKind
	side   uint8
	a, b   int32
	text   string
	isFlip bool
}

// causeOf is the cause of a slice of head head in layer layer.
func causeOf(h hint, head, layer int) cause {
	c := cause{kind: h.kind, side: h.side, a: h.arg}
	switch h.kind {
	case hintHeads:
		c.a, c.b = int32(min(head, int(h.arg))), int32(max(head, int(h.arg)))
	case hintLayers:
		c.a, c.b = int32(min(layer, int(h.arg))), int32(max(layer, int(h.arg)))
	case hintFlips:
		c.isFlip = true
	}
	return c
}

// fold gathers the slices of one foldKey by layer.
type fold struct {
	key    foldKey
	layers []*foldLayer // in the order first seen
	tp, pp int
	text   string // the hint (flipped bits: recounted per detail)
}

// layer returns the fold's layer L, nil when it has none.
func (f *fold) layer(L int) *foldLayer {
	for i := len(f.layers) - 1; i >= 0; i-- { // the latest is the likeliest
		if f.layers[i].L == L {
			return f.layers[i]
		}
	}
	return nil
}

// foldLayer is what a fold holds of layer L.
type foldLayer struct {
	L           int
	name        string
	heads       []int
	slices      int
	first, last int
	bytes, bits int64
	off         int64
	done        bool // details took it
}

func (l *foldLayer) add(head, first, last int, bytes, bits, off int64) {
	if head >= 0 {
		l.heads = append(l.heads, head)
	}
	if l.slices == 0 || first < l.first {
		l.first = first
	}
	if l.slices == 0 || off < l.off {
		l.off = off
	}
	l.last = max(l.last, last)
	l.slices++
	l.bytes += bytes
	l.bits += bits
}

// explanation folds the request's differing slices into details, sorts
// them, applies the cap (maxDetails < 0: none) and adds the notes.
func (rs *reqState) explanation(maxDetails int, e *explainer) Explanation {
	folds := map[foldKey]*fold{}
	var order []foldKey
	var heads []int // where the layers' heads are carved from
	layer := func(k foldKey, dump int, text func() string, L int, name string, n int) *foldLayer {
		f := folds[k]
		if f == nil {
			m := e.c.Dumps[dump].Manifest.Parallel
			f = &fold{key: k, tp: m.TPRank, pp: m.PPRank, text: text()}
			folds[k] = f
			order = append(order, k)
		}
		l := f.layer(L)
		if l == nil {
			l = &foldLayer{L: L, name: name, heads: carve(&heads, n)}
			f.layers = append(f.layers, l)
		}
		return l
	}
	var last foldKey
	var lastLayer *foldLayer
	for _, u := range rs.units {
		c := u.cg.caches[u.ci]
		v := c.View
		for i := range u.diffs {
			s := &u.diffs[i]
			k := foldKey{group: u.group, pos: u.pos, dump: c.Dump, replica: v.ReplicaIndex, block: u.block, file: v.Cells.File, cause: causeOf(s.hint, int(s.head), v.Number)}
			l := lastLayer
			if l == nil || k != last {
				// the slices of a unit mostly share one cause
				l = layer(k, c.Dump, func() string { return e.text(s.hint, int(s.head), v.Number, s.bits) }, v.Number, v.Layer.Name, len(u.diffs)-i)
				last, lastLayer = k, l
			}
			l.add(int(s.head), int(s.first), int(s.last), s.bytes, s.bits, s.off)
		}
		lastLayer = nil // the next unit is another layer
	}
	for _, sp := range rs.stateParts {
		cg := e.c.group(sp.group)
		for _, p := range sp.parts {
			c := cg.caches[p.ci]
			v := c.View
			k := foldKey{group: sp.group, dump: c.Dump, replica: v.ReplicaIndex, block: p.block, file: v.Cells.File,
				cause: cause{text: p.hint, isFlip: isFlip(p.hint)}, state: true, stateIndex: v.StateIndex, head: p.first, lastHead: p.last}
			l := layer(k, c.Dump, func() string { return p.hint }, v.Number, v.Layer.Name, 0)
			l.add(-1, 0, 0, int64(p.bytes), int64(p.bits), p.off)
		}
	}
	var details []Detail
	for _, k := range order {
		details = append(details, folds[k].details()...)
	}
	slices.SortStableFunc(details, func(a, b Detail) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Position, b.Position),
			cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Head, b.Head), cmp.Compare(a.Replica, b.Replica),
			cmp.Compare(a.PPRank, b.PPRank), cmp.Compare(a.TPRank, b.TPRank))
	})
	x := Explanation{Notes: rs.notes, Heat: append(e.heats(rs), rs.stateHeat...)}
	slices.SortStableFunc(x.Heat, func(a, b Heat) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Position, b.Position))
	})
	skipped := 0
	for i, d := range details {
		firstOfPosition := i == 0 || d.Group != details[i-1].Group || d.Position != details[i-1].Position
		if firstOfPosition || maxDetails < 0 || len(x.Details) < maxDetails {
			x.Details = append(x.Details, d)
		} else {
			skipped++
		}
	}
	for _, g := range rs.req.Groups {
		if q := rs.quiet[g.ID]; len(q) > 0 && !rs.found[g.ID] {
			// With larger producer blocks a mismatch names every consumer
			// position of the chunk, including unchanged ones: only when
			// no position differs is the producer's dump itself suspect.
			x.Notes = append(x.Notes, fmt.Sprintf("group %d positions %s: no differing cell found (the producer's dumps do not hold what it checksummed)", g.ID, ranges.Format(q)))
		}
	}
	if skipped > 0 {
		x.Notes = append(x.Notes, fmt.Sprintf("%d more details not shown: the cap is %d details per request, and each mismatching position keeps its first", skipped, maxDetails))
	}
	x.Notes = slices.Compact(x.Notes)
	return x
}

// details turns a fold into details: the layers with the same heads make
// one detail (so that each covers its Layers x Heads exactly).
func (f *fold) details() []Detail {
	layers := f.layers
	slices.SortFunc(layers, func(a, b *foldLayer) int { return cmp.Compare(a.L, b.L) })
	for _, l := range layers {
		slices.Sort(l.heads)
		l.heads = slices.Compact(l.heads)
	}
	var out []Detail
	for _, first := range layers {
		if first.done {
			continue
		}
		heads := first.heads
		d := Detail{
			Group: f.key.group, Position: f.key.pos, Layer: first.L, LayerName: first.name,
			Replica: f.key.replica, Hint: f.text, FirstToken: -1, Offset: -1,
			TPRank: f.tp, PPRank: f.pp, File: f.key.file, Block: f.key.block,
		}
		var bits int64
		for _, l := range layers {
			if l.done || !slices.Equal(l.heads, heads) {
				continue
			}
			l.done = true
			d.Layers = append(d.Layers, l.L)
			d.Slices += l.slices
			d.Bytes += int(l.bytes)
			bits += l.bits
			if d.Offset < 0 || l.off < d.Offset {
				d.Offset = l.off
			}
			if d.FirstToken < 0 || l.first < d.FirstToken {
				d.FirstToken = l.first
			}
			d.LastToken = max(d.LastToken, l.last)
		}
		d.Bits, d.LastLayer = int(bits), d.Layers[len(d.Layers)-1]
		if f.key.state {
			d.State, d.StateIndex, d.Head, d.LastHead = true, f.key.stateIndex, f.key.head, f.key.lastHead
			d.FirstToken, d.LastToken = 0, 0
		} else {
			d.Heads, d.Head, d.LastHead = slices.Clone(heads), heads[0], heads[len(heads)-1]
		}
		if f.key.cause.isFlip {
			d.Hint = bitsHint(d.Bits)
		}
		out = append(out, d)
	}
	return out
}

func isFlip(hint string) bool {
	_, ok := flipBitsOf(hint)
	return ok
}
