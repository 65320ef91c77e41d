package layout

import (
	"fmt"
	"math/bits"

	"github.com/kvaudit/kvaudit/internal/strided"
)

// Reasons a state group is not checksummed, beside those of docs/spec.md §4.
const (
	reasonStateWidth = "state elements are not 2 or 4 bytes"
)

// StateShape is a covered state as a fingerprint sees it (docs/spec.md §7):
// its dtype and its shape, with a split the split axis first at its global
// size and the other axes in order, without a split the local shape.
type StateShape struct {
	Dtype string
	Shape []int64
}

// validateStates checks a state layer's states against the manifest
// (shapes, splits, segment sums); tp is the TP size.
func validateStates(l *Layer, lf string, tp int, bad func(string, string, ...any) error) error {
	split := 0
	for i, s := range l.States {
		sf := fmt.Sprintf("%s.states[%d]", lf, i)
		if _, err := TorchDtype(s.Dtype); err != nil {
			return bad(sf+".dtype", "%v", err)
		}
		if len(s.Shape) == 0 || len(s.Shape) > 8 {
			return bad(sf+".shape", "want 1 to 8 dimensions, got %d", len(s.Shape))
		}
		for j, d := range s.Shape {
			if d < 1 || d > 1<<32 {
				return bad(fmt.Sprintf("%s.shape[%d]", sf, j), "%d is not in 1..2^32", d)
			}
		}
		if s.Split == nil {
			continue
		}
		split++
		sp := s.Split
		if sp.Axis < 0 || sp.Axis >= len(s.Shape) {
			return bad(sf+".split.axis", "axis %d of a %d-dimensional state", sp.Axis, len(s.Shape))
		}
		if len(sp.Segments) == 0 {
			return bad(sf+".split.segments", "empty")
		}
		var sum int64
		for k, seg := range sp.Segments {
			kf := fmt.Sprintf("%s.split.segments[%d]", sf, k)
			if seg[0] < 1 {
				return bad(kf, "local size %d is less than 1", seg[0])
			}
			if seg[1] < 1 || tp%seg[1] != 0 {
				return bad(kf, "%d replicas do not divide tp_size %d", seg[1], tp)
			}
			sum += int64(seg[0])
		}
		if sum != s.Shape[sp.Axis] {
			return bad(sf+".split.segments", "local sizes sum to %d, the split axis %d has %d", sum, sp.Axis, s.Shape[sp.Axis])
		}
	}
	if split != 0 && split != len(l.States) {
		return bad(lf+".states", "either every state has a split or none does (%d of %d have one)", split, len(l.States))
	}
	return nil
}

// Bytes returns the bytes of a state (validated, so no overflow beyond
// int64 for shapes up to 2^32 per axis is checked here).
func (s State) Bytes() (int64, bool) {
	dt, _ := TorchDtype(s.Dtype)
	n := uint64(dt.Size())
	for _, d := range s.Shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<50 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// stateShapes returns a state layer's covered states for its fingerprint.
func stateShapes(l *Layer, tp int) []StateShape {
	var out []StateShape
	for _, s := range l.States {
		shape := append([]int64(nil), s.Shape...)
		if sp := s.Split; sp != nil {
			var global int64
			for _, seg := range sp.Segments {
				global += int64(seg[0]) * int64(tp/seg[1])
			}
			shape = []int64{global}
			for i, d := range s.Shape {
				if i != sp.Axis {
					shape = append(shape, d)
				}
			}
		}
		out = append(out, StateShape{Dtype: s.Dtype, Shape: shape})
	}
	return out
}

// stateViews resolves a state layer into cell views (docs/spec.md §6). With
// a split, each (state, segment) is one view whose "heads" are the rank's
// rows of the segment and whose pieces are the row's elements at their own
// width; firstRows gives each view's first global row, states its state's
// index, and rows counts the layer's global rows. Without a split, one view covers all the states'
// bytes as 8-byte pieces, as head tp_rank. t is the [block, page] tensor.
func stateViews(m *Manifest, l *Layer, t strided.Tensor) (views []CellView, keys []ReplicaKey, firstRows, states []int, rows int, reason string, err error) {
	if len(t.Shape) != 2 || l.Layout[0] != "block" || l.Layout[1] != "page" {
		return nil, nil, nil, nil, 0, "", fmt.Errorf("a state layer's tensor is [block, page], got shape %v", t.Shape)
	}
	if t.Dtype.Bits != 8 {
		return nil, nil, nil, nil, 0, "", fmt.Errorf("a state layer's tensor is bytes (U8 or I8), got %s", t.Dtype.Name)
	}
	if t.Size >= 0 {
		end, ok := strided.End(t)
		if !ok || end > t.Size {
			return nil, nil, nil, nil, 0, "", fmt.Errorf("tensor of shape %v and strides %v (bytes) needs %d bytes, %d available", t.Shape, t.Strides, end, t.Size)
		}
	}
	if t.Shape[0] != int64(m.NumBlocks) {
		return nil, nil, nil, nil, 0, reasonNumBlocks, nil
	}
	page := t.Shape[1]
	var offsets []int64
	var total int64
	for i, s := range l.States {
		n, ok := s.Bytes()
		if !ok {
			return nil, nil, nil, nil, 0, "", fmt.Errorf("states[%d] is too large", i)
		}
		offsets = append(offsets, total)
		total += n
	}
	if total > page {
		return nil, nil, nil, nil, 0, "", fmt.Errorf("states take %d bytes, the page holds %d", total, page)
	}
	if t.Strides[1] != 1 {
		return nil, nil, nil, nil, 0, "", fmt.Errorf("the page axis must be contiguous bytes, its stride is %d", t.Strides[1])
	}
	base := CellView{KernelBlocks: 1, KernelTokens: 1, RowStride: t.Strides[0]}
	tp, rank := m.Parallel.TPSize, m.Parallel.TPRank
	if l.States[0].Split == nil {
		v := base
		v.Heads, v.CellBytes = 1, int(total)
		v.Runs = []CellRun{{Offset: 0, Len: int(total)}}
		if total == 0 || total%8 != 0 {
			return nil, nil, nil, nil, 0, reasonPieces, nil
		}
		return []CellView{v}, []ReplicaKey{{1, 0}}, []int{rank}, []int{0}, tp, "", nil
	}
	for i, s := range l.States {
		dt, _ := TorchDtype(s.Dtype)
		w := dt.Size()
		if w != 2 && w != 4 {
			return nil, nil, nil, nil, 0, reasonStateWidth, nil
		}
		// Row-major element strides of the local state.
		st := make([]int64, len(s.Shape))
		acc := int64(1)
		for k := len(s.Shape) - 1; k >= 0; k-- {
			st[k] = acc
			acc *= s.Shape[k]
		}
		ax := s.Split.Axis
		// The row's elements: the other axes in row-major order.
		var runs []CellRun
		var walk func(k int, off int64)
		walk = func(k int, off int64) {
			if k == len(s.Shape) {
				if n := len(runs); n > 0 && runs[n-1].Offset+int64(runs[n-1].Len) == off {
					runs[n-1].Len += w
				} else {
					runs = append(runs, CellRun{Offset: off, Len: w})
				}
				return
			}
			if k == ax {
				walk(k+1, off)
				return
			}
			for idx := int64(0); idx < s.Shape[k]; idx++ {
				walk(k+1, off+idx*st[k]*int64(w))
			}
		}
		walk(0, offsets[i])
		elems := int64(1)
		for k, d := range s.Shape {
			if k != ax {
				elems *= d
			}
		}
		var lo int64 // local row of the segment's first row
		for _, seg := range s.Split.Segments {
			local, r := seg[0], seg[1]
			v := base
			v.Heads, v.HeadStride, v.PieceBytes = local, st[ax]*int64(w), w
			v.CellBytes = int(elems) * w
			v.Runs = make([]CellRun, len(runs))
			for j, run := range runs {
				v.Runs[j] = CellRun{Offset: run.Offset + lo*st[ax]*int64(w), Len: run.Len}
			}
			views = append(views, v)
			keys = append(keys, ReplicaKey{r, rank % r})
			firstRows = append(firstRows, rows+(rank/r)*local)
			states = append(states, i)
			rows += local * (tp / r)
			lo += int64(local)
		}
	}
	return views, keys, firstRows, states, rows, "", nil
}
