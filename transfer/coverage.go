package transfer

// This file draws what each consumer request's transfers delivered, per
// layer and token (Result.Coverage): the picture the HTML report draws.

import (
	"cmp"
	"slices"
	"sort"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/picture"
	"github.com/kvaudit/kvaudit/layout"
)

// MaxCoverage bounds the requests an audit draws (Result.Coverage):
// past it, a request with findings takes the place of one without.
const MaxCoverage = 32

// MaxColumns bounds a picture's columns: a longer request's columns hold
// several tokens each (a power of two).
const MaxColumns = 64

// Descriptor faults (auditor.flagged), as a picture shows them.
const (
	flagIntrude uint8 = 1 << iota
	flagForeign
	flagMisaligned
)

// flag marks the current transfer's descriptor i with a fault.
func (a *auditor) flag(i int, f uint8) {
	if a.flagged == nil {
		a.flagged = map[uint64]uint8{}
	}
	a.flagged[uint64(len(a.xfers)-1)<<32|uint64(i)] |= f
}

// seg is a part of a rank's consumer memory that one delivery (the
// first, of those in address order) covers.
type seg struct {
	lo, hi uint64
	d      int
}

// segments cuts deliveries (sorted by lo) into disjoint segments.
func segments(ds []delivery) []seg {
	var out []seg
	var end uint64
	for i, d := range ds {
		if lo := max(d.lo, end); d.hi > lo {
			out = append(out, seg{lo, d.hi, i})
		}
		end = max(end, d.hi)
	}
	return out
}

// rankCover is what a rank's pictures read: its deliveries that reached
// DONE and those that did not, as segments, and the bytes written twice.
type rankCover struct {
	rk           *rank
	done, undone []delivery
	segs, usegs  []seg
	twice        []ival
}

// overlaps says whether [lo, hi) meets an interval of iv (sorted,
// disjoint).
func overlaps(iv []ival, lo, hi uint64) bool {
	i := sort.Search(len(iv), func(i int) bool { return iv[i].hi > lo })
	return i < len(iv) && iv[i].lo < hi
}

// token classes of a request's block slots.
const (
	classLocal = iota
	classPull
	classRecomputed
	classPad
)

// mapRequest draws a request's picture on a rank, within MaxCoverage.
func (a *auditor) mapRequest(rc *rankCover, r *request, served bool) {
	if rc.rk.am == nil {
		// No transfer into the rank was resolved (its address map
		// is not read, or could not be): nothing to draw from.
		return
	}
	n := a.counts[reqKey{rc.rk.r, r.req.ID}]
	res := a.res
	if len(res.Coverage) >= MaxCoverage {
		res.CoverageLeft++
		j := -1
		for i := len(res.Coverage) - 1; i >= 0 && n > 0; i-- {
			if res.Coverage[i].Findings == 0 {
				j = i
				break
			}
		}
		if j < 0 {
			return
		}
		res.Coverage = append(res.Coverage[:j], res.Coverage[j+1:]...)
	}
	res.Coverage = append(res.Coverage, a.coverage(rc, r, served, n))
}

// coverage draws one request's picture.
func (a *auditor) coverage(rc *rankCover, r *request, served bool, findings int) picture.Coverage {
	rk := rc.rk
	m := r.req
	c := picture.Coverage{Request: m.ID, Rank: rk.r, NumTokens: m.NumTokens, Local: m.NumLocalComputedTokens, Pulled: r.pullEnd(a), Served: served, Findings: findings}
	type span struct {
		gv *layout.GroupView
		sp blockspan.Span
	}
	var spans []span
	end := 0
	for _, gv := range rk.dump.Groups {
		if gv.Skip != "" {
			continue
		}
		sp, st, err := blockspan.Of(m, gv.Group)
		if err != nil || st != blockspan.OK {
			continue
		}
		spans = append(spans, span{gv, sp})
		if gv.Group.Kind != layout.KindMamba {
			end = max(end, (sp.Start+len(sp.Blocks))*gv.Group.BlockSize)
		}
	}
	c.Per = 1
	for end > c.Per*MaxColumns {
		c.Per *= 2
	}
	c.Columns = (end + c.Per - 1) / c.Per
	rows := map[[2]int]int{}
	for _, s := range spans {
		gv := s.gv
		for _, reg := range rk.am.Regions {
			if reg.Group != gv {
				continue
			}
			key := [2]int{gv.Group.ID, reg.Views[0].Number}
			ri, ok := rows[key]
			if !ok {
				ri = len(c.Rows)
				rows[key] = ri
				row := picture.CoverageRow{Group: gv.Group.ID, Layer: reg.Views[0].Number, LayerName: reg.Layer.Name, State: reg.State}
				n := c.Columns
				if reg.State {
					n = 1
				}
				row.Cells = make([]picture.Cell, n)
				for i := range row.Cells {
					row.Cells[i] = picture.Cell{Transfer: NoTransfer, Descriptor: -1}
				}
				c.Rows = append(c.Rows, row)
			}
			cells := c.Rows[ri].Cells
			if reg.State {
				for _, blk := range s.sp.Blocks {
					a.cell(rc, reg, &cells[0], classPull, served, func(fn func(lo, hi uint64)) {
						if lo, hi, ok := reg.StateInterval(blk); ok {
							fn(lo, hi)
						}
					})
				}
				continue
			}
			S := gv.Group.BlockSize
			table := m.BlockTable[strconv.Itoa(gv.Group.ID)]
			bounds := [...]int{c.Local, c.Pulled, c.NumTokens}
			for pos := 0; pos < s.sp.Start+len(s.sp.Blocks); pos++ {
				blk, inSpan := layout.NoBlock, pos >= s.sp.Start
				switch {
				case inSpan:
					blk = s.sp.Blocks[pos-s.sp.Start]
				case pos < len(table):
					blk = table[pos]
				}
				b0 := pos * S
				if !inSpan && b0 >= c.Local {
					continue // a sliding window's dropped block
				}
				for col := b0 / c.Per; col*c.Per < b0+S; col++ {
					t0, t1 := max(b0, col*c.Per), min(b0+S, (col+1)*c.Per)
					// Cut the column's tokens by class.
					for t0 < t1 {
						class, cut := classPad, t1
						for k, bd := range bounds {
							if t0 < bd {
								class, cut = k, min(t1, bd)
								break
							}
						}
						lo, hi := t0-b0, cut-b0
						// A prefix hit's block (not loaded) is the
						// consumer's own: only a write into it counts.
						a.cell(rc, reg, &cells[col], class, served && inSpan, func(fn func(lo, hi uint64)) {
							if blk == layout.NoBlock {
								return
							}
							KT := reg.KernelTokens
							for k := lo / KT; k < reg.KernelBlocks && k*KT < hi; k++ {
								a0, a1 := max(lo, k*KT), min(hi, (k+1)*KT)
								reg.Intervals(blk, k, [2]int{a0 - k*KT, a1 - k*KT}, fn)
							}
						})
						t0 = cut
					}
				}
			}
		}
	}
	// Regions come in address order: rows go by group, then layer.
	slices.SortStableFunc(c.Rows, func(p, q picture.CoverageRow) int {
		return cmp.Or(cmp.Compare(p.Group, q.Group), cmp.Compare(p.Layer, q.Layer))
	})
	return c
}

// cell folds what the bytes intervals gives (of tokens of one class)
// hold into a cell.
func (a *auditor) cell(rc *rankCover, reg *addrmap.Region, c *picture.Cell, class int, check bool, intervals func(func(lo, hi uint64))) {
	var got picture.Cell
	got.Transfer, got.Descriptor = NoTransfer, -1
	var gap, nonZero bool
	var fail *seg
	put := func(st picture.CellState, d *delivery, lo, hi uint64) {
		if st < got.State {
			return
		}
		if st > got.State || got.Transfer == NoTransfer {
			got.State = st
			got.Transfer, got.Descriptor, got.Log, got.Bytes, got.More = NoTransfer, -1, "", [2]uint64{}, 0
			if d != nil {
				x := a.xfers[d.x]
				got.Transfer, got.Descriptor, got.Log, got.Bytes = x.id, int(d.desc), x.log.path, [2]uint64{lo, hi}
			}
			return
		}
		if d != nil {
			if x := a.xfers[d.x]; x.id != got.Transfer || int(d.desc) != got.Descriptor || x.log.path != got.Log {
				got.More++
			}
		}
	}
	none := true
	intervals(func(lo, hi uint64) {
		none = false
		segs := rc.segs
		i := sort.Search(len(segs), func(i int) bool { return segs[i].hi > lo })
		at := lo
		hole := func(l, h uint64) {
			gap = true
			if fail == nil {
				us := rc.usegs
				j := sort.Search(len(us), func(j int) bool { return us[j].hi > l })
				if j < len(us) && us[j].lo < h {
					fail = &us[j]
				}
			}
			if check && (class == classLocal || class == classPad) && !nonZero {
				if n, _ := reg.NonZero(l, h); n > 0 {
					nonZero = true
				}
			}
		}
		for ; i < len(segs) && segs[i].lo < hi; i++ {
			s := &segs[i]
			if s.lo > at {
				hole(at, s.lo)
			}
			l, h := max(at, s.lo), min(hi, s.hi)
			d := &rc.done[s.d]
			st := picture.CellDelivered
			x := a.xfers[d.x]
			f := a.flagged[uint64(d.x)<<32|uint64(d.desc)]
			switch {
			case f&flagForeign != 0:
				st = picture.CellForeign
			case f&flagMisaligned != 0:
				st = picture.CellMisaligned
			case overlaps(rc.twice, l, h):
				st = picture.CellTwice
			case f&flagIntrude != 0:
				st = picture.CellIntruded
			case x.late:
				st = picture.CellLate
			}
			if st == picture.CellDelivered && class == classRecomputed {
				st = picture.CellRecomputed // delivered, but not required
			}
			put(st, d, l, h)
			at = h
		}
		if at < hi {
			hole(at, hi)
		}
	})
	if gap || none {
		var st picture.CellState
		switch class {
		case classPull:
			st = picture.CellHole
			if fail != nil {
				st = picture.CellFailed
			}
		case classLocal:
			st = picture.CellLocal
			if nonZero {
				st = picture.CellNotZeroed
			}
		case classRecomputed:
			st = picture.CellRecomputed
		case classPad:
			switch {
			case !check:
				st = picture.CellNone
			case nonZero:
				st = picture.CellNotZeroed
			default:
				st = picture.CellZeroed
			}
		}
		var d *delivery
		var lo, hi uint64
		if st == picture.CellFailed {
			d = &rc.undone[fail.d]
			lo, hi = fail.lo, fail.hi
		}
		put(st, d, lo, hi)
	}
	// Fold into the cell.
	switch {
	case got.State > c.State:
		*c = got
	case got.State == c.State && c.Transfer == NoTransfer:
		more := c.More
		*c = got
		c.More += more
	case got.State == c.State && got.Transfer != NoTransfer && (got.Transfer != c.Transfer || got.Descriptor != c.Descriptor || got.Log != c.Log):
		c.More += 1 + got.More
	case got.State == c.State:
		c.More += got.More
	}
}
