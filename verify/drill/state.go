package drill

import (
	"fmt"

	"github.com/kvaudit/kvaudit/layout"
)

// statePart is what differs in one consumer view (a (state, segment) copy)
// of a state layer: its differing global rows.
type statePart struct {
	ci          int
	first, last int // first and last differing global rows
	bytes, bits int
	off         int64
	block       int
	hint        string
}

// stateGroups compares, for each mismatching state group of a request,
// every consumer copy of every state row with the producer's row (the
// same global row of the same layer, any copy), in place, and gives each
// consumer view with differing rows a hint.
func (e *explainer) stateGroups(rs *reqState) error {
	if rs.pri < 0 {
		return nil
	}
	for _, g := range rs.req.Groups {
		cg := e.c.group(g.ID)
		if len(cg.caches) == 0 || cg.caches[0].Group.Kind != layout.KindMamba {
			continue
		}
		var parts []statePart
		var heat Heat
		err := e.parallel(1, func(w *worker, _ int) { parts, heat = w.stateRows(rs, g.ID) })
		if err != nil {
			return err
		}
		rs.stateHeat = append(rs.stateHeat, heat)
		if len(parts) == 0 {
			rs.notes = append(rs.notes, fmt.Sprintf("group %d: no differing state row found (the producer's dumps do not hold what it checksummed)", g.ID))
		}
		rs.stateParts = append(rs.stateParts, stateParts{group: g.ID, parts: parts})
	}
	return nil
}

// stateParts are a state group's differing views.
type stateParts struct {
	group int
	parts []statePart
}

// stateRows compares the rows of every consumer view of state group
// group, and returns the views that differ and the group's heat (a
// view's differing bytes in its (layer, state, replica) slice; not
// drilled where the view is in device memory or the producer lacks one
// of its rows).
func (w *worker) stateRows(rs *reqState, group int) ([]statePart, Heat) {
	e := w.e
	cg, pg := e.c.group(group), e.p.group(group)
	cid, pid := rs.req.ID, rs.req.ProducerID
	axes := newHeatAxes(cg.caches)
	heat := axes.heat(group, 0)
	var unread []int // heat slots of views not compared
	var parts []statePart
	var d cellDiff
	for ci, c := range cg.caches {
		cv := &c.View.Cells
		if cv.Data == nil {
			rs.notes = append(rs.notes, fmt.Sprintf("group %d: some state layers are in device memory and were not compared", group))
			unread = append(unread, axes.slot(c.View, 0))
			continue
		}
		b, ok := e.c.Block(c.Dump, cid, c.Group, 0)
		if !ok {
			heat.add(axes.slot(c.View, 0), 0)
			continue
		}
		part := statePart{ci: ci, first: -1, block: b}
		zero := true
		var rows []int
		for lh := range c.View.Heads {
			row := c.View.HeadBase + lh
			pci, ok := pg.find(c.View.Layer.Name, row, -1)
			if !ok {
				unread = append(unread, axes.slot(c.View, 0))
				continue
			}
			pc := pg.caches[pci]
			pv := &pc.View.Cells
			pb, ok := e.p.Block(pc.Dump, pid, pc.Group, 0)
			if !ok || pv.Data == nil {
				continue
			}
			x, y := cv.CellAddr(b, 0, lh), pv.CellAddr(pb, 0, row-pc.View.HeadBase)
			if !diffCells(cv.Data, x, pv.Data, y, w.segs.get(cv, pv), &d) {
				continue
			}
			if part.first < 0 {
				part.first, part.off = row, fileOffset(cv, x, d.first)
			}
			part.last = row
			part.bytes += d.bytes
			part.bits += d.bits
			zero = zero && !d.nonzero
			rows = append(rows, row)
		}
		heat.add(axes.slot(c.View, 0), part.bytes)
		if part.first < 0 {
			continue
		}
		switch {
		case zero:
			part.hint = "zeroed"
		default:
			part.hint = w.staleState(rs, group, ci, b, rows)
		}
		if part.hint == "" && part.bits <= FlipBits {
			part.hint = bitsHint(part.bits)
		} else if part.hint == "" {
			part.hint = "random bytes"
		}
		parts = append(parts, part)
	}
	for _, i := range unread {
		heat.Bytes[i] = HeatNotDrilled
	}
	return parts, heat
}

// staleState returns "holds the state of request ID" when every differing
// row of consumer view ci (block b) equals that row of another request
// on either side (a stale read of a reused state block), else "".
func (w *worker) staleState(rs *reqState, group, ci, b int, rows []int) string {
	e := w.e
	c := e.c.group(group).caches[ci]
	cv := &c.View.Cells
	for _, sd := range []*side{e.p, e.c} {
		sg := sd.group(group)
		for _, id := range sd.ids {
			if id == rs.req.ProducerID || id == rs.req.ID {
				continue
			}
			same := true
			for _, row := range rows {
				if !rs.spend() {
					same = false
					break
				}
				si, ok := sg.find(c.View.Layer.Name, row, -1)
				if !ok {
					same = false
					break
				}
				src := sg.caches[si]
				sb, ok := sd.Block(src.Dump, id, src.Group, 0)
				sv := &src.View.Cells
				if !ok || sv.Data == nil {
					same = false
					break
				}
				x, y := cv.CellAddr(b, 0, row-c.View.HeadBase), sv.CellAddr(sb, 0, row-src.View.HeadBase)
				if !equalCells(cv.Data, x, sv.Data, y, w.segs.get(cv, sv)) {
					same = false
					break
				}
			}
			if same {
				return "holds the state of request " + id
			}
		}
	}
	return ""
}
