package addrmap

import (
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
)

// PageOrder names what a page holds, in memory order: its axes inside the
// block axis (K and V apart or together, heads, tokens, cell bytes). Two
// regions of one order and kernel block size hold a kernel row's cells in
// the same byte order, so a byte copy of a page moves whole cells.
func (r *Region) PageOrder() string {
	if r.pageOrder == "" {
		r.pageOrder = r.computePageOrder()
	}
	return r.pageOrder
}

func (r *Region) computePageOrder() string {
	var names []string
	seenBlock := false
	for _, a := range r.order {
		switch {
		case a.name == "block":
			seenBlock = true
			continue
		case a.name == "kv" && !seenBlock:
			names = append(names, "kv-apart")
			continue
		case a.name == "dim" || a.name == "cell":
			if len(names) > 0 && names[len(names)-1] == "cell" {
				continue
			}
			names = append(names, "cell")
			continue
		}
		names = append(names, a.name)
	}
	if r.State {
		return "state"
	}
	if len(r.pages) > 0 && r.pages[0].Part >= 0 && !slices.Contains(names, "kv-apart") {
		names = slices.DeleteFunc(names, func(s string) bool { return s == "kv" })
		names = append([]string{"kv-apart"}, names...)
	}
	return strings.Join(names, ",")
}

// EngineBlocks is the engine's block count of the cache.
func (r *Region) EngineBlocks() int { return r.engineBlocks }

// DumpBlock maps an engine block id to the dump's (NoBlock: not dumped).
func (r *Region) DumpBlock(engine int) int {
	if r.blockOf == nil {
		return engine
	}
	if b, ok := r.blockOf[engine]; ok {
		return b
	}
	return layout.NoBlock
}

// EngineBlockOf maps a dump block id to the engine's.
func (r *Region) EngineBlockOf(dump int) int {
	if r.engineOf == nil {
		return dump
	}
	return r.engineOf[dump]
}

// Intervals calls fn with the address ranges [lo, hi) that the cells of
// tokens [t0, t1) of kernel row k of dump block b occupy (every head, K
// and V), in address order, adjacent ranges merged. A block the engine
// does not hold (not in the dump) has none.
func (r *Region) Intervals(block, k int, tokens [2]int, fn func(lo, hi uint64)) {
	r.PartIntervals(block, k, tokens, -1, fn)
}

// PartIntervals is Intervals for one part of the cells (0 K, 1 V; -1
// both). A part is only apart from the other with a kv axis.
func (r *Region) PartIntervals(block, k int, tokens [2]int, part int, fn func(lo, hi uint64)) {
	eng := r.EngineBlockOf(block)
	if eng == layout.NoBlock || r.State || tokens[0] >= tokens[1] {
		return
	}
	idx := make([]int64, len(r.axes))
	cnt := make([]int64, len(r.axes))
	for j, a := range r.axes {
		idx[j], cnt[j] = 0, a.n
		switch a.name {
		case "block":
			idx[j], cnt[j] = int64(eng*r.KernelBlocks+k), 1
		case "token":
			idx[j], cnt[j] = int64(tokens[0]), int64(tokens[1]-tokens[0])
		case "kv":
			if part >= 0 {
				idx[j], cnt[j] = int64(part), 1
			}
		}
	}
	r.runs(idx, cnt, fn)
}

// StateInterval returns the address range of the covered states of dump
// block b's page, and false for a block the engine does not hold.
func (r *Region) StateInterval(block int) (lo, hi uint64, ok bool) {
	eng := r.EngineBlockOf(block)
	if eng == layout.NoBlock || !r.State {
		return 0, 0, false
	}
	base := r.Start
	if len(r.axes) > 1 {
		base += uint64(int64(eng) * r.axes[0].stride)
	}
	return base, base + uint64(r.Covered), true
}

// runs calls fn with the contiguous address ranges of the box (idx, cnt),
// merged where adjacent.
func (r *Region) runs(idx, cnt []int64, fn func(lo, hi uint64)) {
	var curLo, curHi uint64
	have := false
	out := func(lo, hi uint64) {
		if have && lo == curHi {
			curHi = hi
			return
		}
		if have {
			fn(curLo, curHi)
		}
		curLo, curHi, have = lo, hi, true
	}
	var rec func(j int, off int64)
	rec = func(j int, off int64) {
		if j == len(r.axes) {
			out(r.Start+uint64(off), r.Start+uint64(off+r.elem))
			return
		}
		if r.denseFrom(j) && allFull(r.axes[j:], idx[j:], cnt[j:]) {
			out(r.Start+uint64(off), r.Start+uint64(off+extent(r.axes[j:], r.elem)))
			return
		}
		a := r.axes[j]
		for i := idx[j]; i < idx[j]+cnt[j]; i++ {
			rec(j+1, off+i*a.stride)
		}
	}
	rec(0, 0)
	if have {
		fn(curLo, curHi)
	}
}

// denseFrom says whether the axes from j on hold their elements without
// gaps: each stride is the extent of the axes inside it.
func (r *Region) denseFrom(j int) bool {
	for m := j; m < len(r.axes); m++ {
		if r.axes[m].stride != extent(r.axes[m+1:], r.elem) {
			return false
		}
	}
	return true
}

func allFull(axes []axis, idx, cnt []int64) bool {
	for i, a := range axes {
		if idx[i] != 0 || cnt[i] != a.n {
			return false
		}
	}
	return true
}

// NonZero counts the non-zero bytes the dump holds in the cells of the
// address range [lo, hi) of the region, and returns the address of the
// first. Read it inside Guard: the data is mapped.
func (r *Region) NonZero(lo, hi uint64) (n, first uint64) {
	if hi <= lo {
		return 0, 0
	}
	count := func(at uint64, b []byte) {
		for i, x := range b {
			if x != 0 {
				if n == 0 {
					first = at + uint64(i)
				}
				n++
			}
		}
	}
	if r.identity {
		data := r.Views[0].Cells.Data
		if data == nil || hi-r.Start > uint64(len(data)) {
			return 0, 0
		}
		count(lo, data[lo-r.Start:hi-r.Start])
		return n, first
	}
	var cell []byte
	m := &Map{Regions: []*Region{r}}
	m.Resolve(lo, hi-lo, func(c Cells) error {
		if c.Block == layout.NoBlock || c.View == nil {
			return nil
		}
		v := &c.View.Cells
		if v.Data == nil {
			return nil
		}
		if r.State {
			base := int64(c.Block) * v.RowStride
			count(c.Addr, v.Data[base+int64(c.Addr-r.Start)%r.axes[0].stride:][:c.Len])
			return nil
		}
		for k := c.Kernels[0]; k < c.Kernels[1]; k++ {
			for t := c.Tokens[0]; t < c.Tokens[1]; t++ {
				for h := c.Heads[0]; h < c.Heads[1]; h++ {
					cell = v.ReadCell(cell[:0], c.Block, k*r.KernelTokens+t, h)
					count(c.Addr, cell[c.Bytes[0]:c.Bytes[1]])
				}
			}
		}
		return nil
	})
	return n, first
}
