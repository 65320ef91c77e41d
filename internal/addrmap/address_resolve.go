package addrmap

import (
	"cmp"
	"slices"

	"github.com/kvaudit/kvaudit/layout"
)

// Find returns the region holding address a, or nil.
func (m *Map) Find(a uint64) *Region {
	i, _ := slices.BinarySearchFunc(m.Regions, a, func(r *Region, a uint64) int {
		switch {
		case r.End <= a:
			return -1
		case r.Start > a:
			return 1
		}
		return 0
	})
	if i < len(m.Regions) && m.Regions[i].Start <= a && a < m.Regions[i].End {
		return m.Regions[i]
	}
	return nil
}

// Resolve calls fn with the cells the bytes [a, a+n) hold, in address
// order, one box per block. It returns the bytes that fall in no cache
// (outside every region) and those inside a region that hold no cell
// (padding, the uncovered end of a state page); a non-nil error is fn's.
func (m *Map) Resolve(a, n uint64, fn func(Cells) error) (outside, padding uint64, err error) {
	for n > 0 {
		r := m.Find(a)
		if r == nil {
			// Skip to the next region, if it starts within the range.
			i, _ := slices.BinarySearchFunc(m.Regions, a, func(r *Region, a uint64) int { return cmp.Compare(r.Start, a) })
			skip := n
			if i < len(m.Regions) && m.Regions[i].Start-a < n {
				skip = m.Regions[i].Start - a
			}
			outside += skip
			a, n = a+skip, n-skip
			continue
		}
		k := min(n, r.End-a)
		covered, err := r.resolve(int64(a-r.Start), int64(k), fn)
		if err != nil {
			return outside, padding, err
		}
		padding += uint64(k) - covered
		a, n = a+k, n-k
	}
	return outside, padding, nil
}

// box is a product of index ranges of a region's axes (idx, cnt per axis
// of r.axes), and, inside one element, a byte range [pb0, pb1) (pb1 0: the
// whole element).
type box struct {
	idx, cnt []int64
	pb0, pb1 int64
}

// resolve calls fn with the cells of bytes [lo, lo+n) of the region (in
// range) and returns the bytes that hold cells.
func (r *Region) resolve(lo, n int64, fn func(Cells) error) (uint64, error) {
	var covered uint64
	var ferr error
	idx := make([]int64, len(r.axes))
	cnt := make([]int64, len(r.axes))
	emit := func(b box) {
		if ferr != nil {
			return
		}
		covered += r.boxBytes(b)
		ferr = r.cells(b, fn)
	}
	var rec func(k int, lo, hi int64)
	rec = func(k int, lo, hi int64) {
		if k == len(r.axes) {
			b := box{idx: idx, cnt: cnt}
			if lo > 0 || hi < r.elem {
				b.pb0, b.pb1 = lo, hi
			}
			emit(b)
			return
		}
		ext := extent(r.axes[k:], r.elem)
		if lo >= ext {
			return // padding after the sub-box
		}
		hi = min(hi, ext)
		if lo == 0 && hi == ext {
			for j := k; j < len(r.axes); j++ {
				idx[j], cnt[j] = 0, r.axes[j].n
			}
			emit(box{idx: idx, cnt: cnt})
			return
		}
		a := r.axes[k]
		innerExt := extent(r.axes[k+1:], r.elem)
		i0 := lo / a.stride
		i1 := min((hi-1)/a.stride, a.n-1)
		set := func(i, c int64) { idx[k], cnt[k] = i, c }
		if i0 == i1 {
			set(i0, 1)
			rec(k+1, lo-i0*a.stride, hi-i0*a.stride)
			return
		}
		first := i0
		if lo-i0*a.stride > 0 {
			set(i0, 1)
			rec(k+1, lo-i0*a.stride, innerExt)
			first++
		}
		last := i1
		tail := hi - i1*a.stride
		if tail < innerExt {
			last--
		}
		if first <= last {
			set(first, last-first+1)
			for j := k + 1; j < len(r.axes); j++ {
				idx[j], cnt[j] = 0, r.axes[j].n
			}
			emit(box{idx: idx, cnt: cnt})
		}
		if tail < innerExt {
			set(i1, 1)
			rec(k+1, 0, tail)
		}
	}
	rec(0, lo, lo+n)
	return covered, ferr
}

// boxBytes is the bytes of elements a box covers.
func (r *Region) boxBytes(b box) uint64 {
	n := uint64(1)
	for _, c := range b.cnt {
		n *= uint64(c)
	}
	if b.pb1 > 0 {
		return n * uint64(b.pb1-b.pb0)
	}
	return n * uint64(r.elem)
}

// cells turns a box into Cells, one per block (and, for a state layer,
// per state and row run), and calls fn with each.
func (r *Region) cells(b box, fn func(Cells) error) error {
	bi := slices.IndexFunc(r.axes, func(a axis) bool { return a.name == "block" })
	rows := [2]int64{0, 1}
	if bi >= 0 {
		rows = [2]int64{b.idx[bi], b.idx[bi] + b.cnt[bi]}
	}
	hasToken := slices.ContainsFunc(r.axes, func(a axis) bool { return a.name == "token" })
	hasHead := slices.ContainsFunc(r.axes, func(a axis) bool { return a.name == "head" })
	kb := int64(r.KernelBlocks)
	for blk := rows[0] / kb; blk*kb < rows[1]; blk++ {
		k0, k1 := max(rows[0], blk*kb)-blk*kb, min(rows[1], (blk+1)*kb)-blk*kb
		c := Cells{Region: r, EngineBlock: int(blk), Block: r.DumpBlock(int(blk)), Kernels: [2]int{int(k0), int(k1)}}
		var off int64
		if bi >= 0 {
			off = (blk*kb + k0) * r.axes[bi].stride
		}
		if r.State {
			if err := r.stateCells(c, b, off, fn); err != nil {
				return err
			}
			continue
		}
		c.View = r.Views[0]
		c.Tokens, c.Heads, c.Bytes = [2]int{0, 1}, [2]int{0, 1}, [2]int{0, 0}
		var bytes0, bytes1 int64 = 0, 1
		var dims []Dim
		for j, a := range r.axes {
			i0, n := b.idx[j], b.cnt[j]
			if j == bi {
				i0, n = k0, k1-k0
			} else {
				off += i0 * a.stride
			}
			switch a.name {
			case "token":
				c.Tokens = [2]int{int(i0), int(i0 + n)}
			case "head":
				c.Heads = [2]int{int(i0), int(i0 + n)}
			}
			if a.kind == DimByte {
				bytes0 += i0 * a.step
				bytes1 += (i0 + n - 1) * a.step
			}
			if n > 1 {
				dims = append(dims, Dim{Kind: a.kind, Count: int(n), Step: int(a.step)})
			}
		}
		// The element's bytes are the innermost axis.
		if b.pb1 > 0 {
			bytes0 += b.pb0
			bytes1 += b.pb1 - 1
			off += b.pb0
			dims = append(dims, Dim{Kind: DimByte, Count: int(b.pb1 - b.pb0), Step: 1})
		} else {
			bytes1 += r.elem - 1
			dims = append(dims, Dim{Kind: DimByte, Count: int(r.elem), Step: 1})
		}
		if !hasToken {
			c.Tokens = [2]int{0, r.KernelTokens}
		}
		if !hasHead {
			c.Heads = [2]int{0, r.heads}
		}
		c.Bytes = [2]int{int(bytes0), int(bytes1)}
		c.Addr = r.Start + uint64(off)
		c.dims = mergeDims(dims)
		c.Len = dimsLen(c.dims)
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// stateCells splits the page bytes of a state box into states, and a
// state's bytes into its (state, segment) views' rows: without a split,
// the layer's one view, whose one "row" is every covered state's bytes;
// with a split along the first axis, rows of each segment's view; along
// another axis, the state's bytes (View nil).
func (r *Region) stateCells(c Cells, b box, off int64, fn func(Cells) error) error {
	pi := len(r.axes) - 1 // the page axis
	p0, p1 := b.idx[pi], b.idx[pi]+b.cnt[pi]
	for si, so := range r.stateOffsets {
		lo, hi := max(p0, so), min(p1, so+r.stateSizes[si])
		if lo >= hi {
			continue
		}
		st := r.Layer.States[si]
		emit := func(v *layout.LayerView, rows, bytes [2]int, dims []Dim, at int64) error {
			x := c
			x.View, x.State, x.Heads, x.Bytes, x.Tokens = v, si, rows, bytes, [2]int{0, 1}
			x.Addr = r.Start + uint64(off+at)
			x.dims = mergeDims(dims)
			x.Len = dimsLen(x.dims)
			return fn(x)
		}
		whole := []Dim{{Kind: DimByte, Count: int(hi - lo), Step: 1}}
		switch {
		case st.Split == nil:
			if err := emit(r.Views[0], [2]int{0, 1}, [2]int{int(lo), int(hi)}, whole, lo); err != nil {
				return err
			}
			continue
		case st.Split.Axis != 0:
			if err := emit(nil, [2]int{0, 1}, [2]int{int(lo - so), int(hi - so)}, whole, lo); err != nil {
				return err
			}
			continue
		}
		rowBytes := r.stateSizes[si] / st.Shape[0]
		var segLo int64
		for k, seg := range st.Split.Segments {
			segHi := segLo + int64(seg[0])
			v := r.viewOf(si, k)
			a, z := max(lo-so, segLo*rowBytes), min(hi-so, segHi*rowBytes)
			for a < z {
				row := a / rowBytes
				rb := a - row*rowBytes
				lr := int(row - segLo)
				if rb > 0 || z-a < rowBytes {
					e := min(z, (row+1)*rowBytes)
					if err := emit(v, [2]int{lr, lr + 1}, [2]int{int(rb), int(rb + e - a)},
						[]Dim{{Kind: DimByte, Count: int(e - a), Step: 1}}, so+a); err != nil {
						return err
					}
					a = e
					continue
				}
				nrows := (z - a) / rowBytes
				dims := []Dim{{Kind: DimHead, Count: int(nrows), Step: 1}, {Kind: DimByte, Count: int(rowBytes), Step: 1}}
				if err := emit(v, [2]int{lr, lr + int(nrows)}, [2]int{0, int(rowBytes)}, dims, so+a); err != nil {
					return err
				}
				a += nrows * rowBytes
			}
			segLo = segHi
		}
	}
	return nil
}

func dimsLen(dims []Dim) uint64 {
	n := uint64(1)
	for _, d := range dims {
		n *= uint64(d.Count)
	}
	return n
}

// mergeDims drops axes of one index and merges an axis into the one
// inside it where it continues it (same kind, step = inner count x inner
// step).
func mergeDims(dims []Dim) []Dim {
	out := make([]Dim, 0, len(dims))
	for _, d := range dims {
		if d.Count <= 1 {
			continue
		}
		out = append(out, d)
	}
	for i := len(out) - 2; i >= 0; i-- {
		o, in := out[i], out[i+1]
		if o.Kind == in.Kind && o.Step == in.Count*in.Step {
			out[i] = Dim{Kind: o.Kind, Count: o.Count * in.Count, Step: in.Step}
			out = slices.Delete(out, i+1, i+2)
		}
	}
	return out
}
