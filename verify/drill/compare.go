package drill

import (
	"bytes"
	"math/bits"

	"github.com/kvaudit/kvaudit/layout"
)

// seg is a stretch of n logical bytes of a cell that is contiguous in
// both of two views: at a from one cell's address, at b from the
// other's, logical offset q.
type seg struct {
	a, b int64
	q, n int
}

// segments cuts the logical bytes of a cell of view a and of view b
// (K then V) into stretches contiguous in both, up to the shorter cell.
func segments(a, b *layout.CellView) []seg {
	var out []seg
	ia, ib := 0, 0
	oa, ob := 0, 0 // bytes of runs a[ia], b[ib] already covered
	q := 0
	for ia < len(a.Runs) && ib < len(b.Runs) {
		ra, rb := a.Runs[ia], b.Runs[ib]
		n := min(ra.Len-oa, rb.Len-ob)
		s := seg{a: ra.Offset + int64(oa), b: rb.Offset + int64(ob), q: q, n: n}
		if k := len(out) - 1; k >= 0 && out[k].a+int64(out[k].n) == s.a && out[k].b+int64(out[k].n) == s.b {
			out[k].n += n
		} else {
			out = append(out, s)
		}
		q += n
		oa += n
		ob += n
		if oa == ra.Len {
			ia, oa = ia+1, 0
		}
		if ob == rb.Len {
			ib, ob = ib+1, 0
		}
	}
	return out
}

// segList is the segments of a pair of views; simd says that each is a
// whole number of 32-byte steps at a logical offset that is a whole
// number of words, for diffSegsSIMD.
type segList struct {
	segs []seg
	simd bool
}

// segCache is one goroutine's segments by pair of views.
type segCache map[[2]*layout.CellView]segList

func (m segCache) get(a, b *layout.CellView) segList {
	k := [2]*layout.CellView{a, b}
	s, ok := m[k]
	if !ok {
		s = segList{segs: segments(a, b), simd: useSIMD}
		for _, x := range s.segs {
			s.simd = s.simd && x.q%8 == 0 && x.n%32 == 0 && x.n > 0 && x.n <= maxTokenRun
		}
		m[k] = s
	}
	return s
}

// equalCells says whether the cell at address x of data a equals the
// cell at address y of data b, cut by segs.
func equalCells(a []byte, x int64, b []byte, y int64, segs segList) bool {
	for _, s := range segs.segs {
		if !bytes.Equal(a[x+s.a:x+s.a+int64(s.n)], b[y+s.b:y+s.b+int64(s.n)]) {
			return false
		}
	}
	return true
}

// cellDiff is what differs between a consumer cell and a producer cell.
type cellDiff struct {
	bytes, bits int
	// nonzero: the consumer cell has a non-zero byte; sumC and sumP add
	// the cells' logical bytes in 8-byte words (a sum the order of the
	// cells does not change); first is the logical offset of the first
	// differing byte (-1 when none).
	nonzero    bool
	sumC, sumP uint64
	first      int
}

// diffCells compares the consumer cell at x of a with the producer cell
// at y of b, and reports whether they differ (d then says how).
func diffCells(a []byte, x int64, b []byte, y int64, segs segList, d *cellDiff) bool {
	if segs.simd {
		w := wordDiff{first: -1}
		diffSegsSIMD(a, x, b, y, segs.segs, &w)
		*d = cellDiff{bytes: w.bytes, bits: w.bits, nonzero: w.or != 0, sumC: w.sumA, sumP: w.sumB, first: w.first}
		return d.bytes > 0
	}
	*d = cellDiff{first: -1}
	var or uint64
	for _, s := range segs.segs {
		p := a[x+s.a : x+s.a+int64(s.n)]
		r := b[y+s.b : y+s.b+int64(s.n)]
		r = r[:len(p)]
		q := s.q
		if q%8 == 0 {
			n := len(p) &^ 7
			w := wordDiff{first: -1}
			diffWords(p[:n], r[:n], &w)
			d.bits += w.bits
			d.bytes += w.bytes
			or |= w.or
			d.sumC += w.sumA
			d.sumP += w.sumB
			if d.first < 0 && w.first >= 0 {
				d.first = q + w.first
			}
			p, r = p[n:], r[n:]
			q += n
		}
		for i := range p {
			u, v := uint64(p[i]), uint64(r[i])
			if x := p[i] ^ r[i]; x != 0 {
				d.bits += bits.OnesCount8(x)
				d.bytes++
				if d.first < 0 {
					d.first = q + i
				}
			}
			or |= u
			sh := 8 * uint((q+i)%8)
			d.sumC += u << sh
			d.sumP += v << sh
		}
	}
	d.nonzero = or != 0
	return d.bytes > 0
}

// fileOffset returns the offset in the file of logical byte q of the cell
// at address x of a view.
func fileOffset(v *layout.CellView, x int64, q int) int64 {
	for _, r := range v.Runs {
		if q < r.Len {
			return v.FileOffset + x + r.Offset + int64(q)
		}
		q -= r.Len
	}
	return v.FileOffset + x
}
