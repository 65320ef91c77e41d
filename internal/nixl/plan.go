package nixl

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/layout"
)

// This file plans the logs of a correct pull: for each consumer rank, the
// calls vLLM's NIXL connector makes to load its requests' blocks from the
// producer, written as the recorder writes them. It follows
// vllm-project/vllm's NIXL connector, read at
// vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py
// 00bd51312724 (register_kv_caches: one registration per cache tensor;
// _build_fa_local / _build_fa_remote: one descriptor per (region, kernel
// block), a region being a layer's K or V when they lie apart, the block's
// page otherwise; add_remote_agent: a remote list per remote rank, a head
// slice of each page at a rank offset when the consumer holds fewer heads;
// _build_local_splits_from_plan: the consumer's pages cut in head chunks
// when it reads several remote ranks; replicated (MLA) pages read whole
// from one rank; register_local_xfer_handler: with a smaller remote block,
// a local list of the page cut in remote-block chunks, which the receive
// path then permutes; _build_mamba_local/_remote: per state, per block,
// the rows of each sub-projection; _compute_desc_ids: region-major ids,
// state descriptors after the attention ones) and pull_worker.py
// 0316d25ab528 (_read_blocks: one READ per remote rank, notif
// "request:consumers", ids of kernel blocks, the transfer trimmed to the
// kernel blocks both sides hold).
//
// Two planners pair the blocks. PlannerVLLM pairs them as vLLM's
// connector does at vllm-project/vllm 9aaf83ef5
// (vllm/distributed/kv_transfer/kv_connector/v1/nixl/worker.py
// _read_blocks and _apply_prefix_caching; the same rules in base_worker.py
// 00bd51312724 and pull_worker.py 0316d25ab528, after #49612): the
// consumer's blocks not computed locally and the producer's blocks of the
// request, both as kernel blocks, the consumer's cut in producer-block
// chunks where its kernel block is larger (then its list clipped to the
// producer's length), and, in a model without state groups, the
// producer's list end-trimmed to the consumer's length; in a hybrid model
// both lists front-trimmed to the shorter. Pair i is the two lists' i-th
// blocks, whatever tokens they hold, so where the end-trim drops other
// blocks than the ones computed locally every pair shifts by whole blocks
// (docs/transfers.md names those geometries). PlannerExact pairs by token,
// as the invariants of docs/spec.md §13 require.

// NotPlannableError is a pair of sides whose pull vLLM's connector does not
// make (and kvaudit cannot plan): a producer kernel block larger than the
// consumer's, heads not outermost in a page that is read in part, a
// conversion and a head split at once, caches the other side lacks.
type NotPlannableError struct{ Msg string }

func (e *NotPlannableError) Error() string { return "cannot plan a pull: " + e.Msg }

func notPlannable(format string, args ...any) error {
	return &NotPlannableError{Msg: fmt.Sprintf(format, args...)}
}

// Planners, how a planned pull pairs blocks (PlanOptions.Planner).
const (
	PlannerVLLM  = "vllm"
	PlannerExact = "exact"
)

// Planners lists the planner names, the default first.
var Planners = []string{PlannerVLLM, PlannerExact}

// PlanOptions control Plan.
type PlanOptions struct {
	// Planner is PlannerVLLM ("" too) or PlannerExact.
	Planner string
	// Lookahead is the consumer's num_prefill_lookahead_tokens
	// (PullTokens).
	Lookahead int
}

// VLLMLease is the producer's lease on a request's blocks at the vLLM
// commit the planner follows (kv_lease_duration's default, in seconds),
// written as the planned logs' lease_s.
const VLLMLease = 30

// planClock is the planned logs' clock: a record every millisecond from
// 2026-01-01 00:00 UTC (t_wall_ns) and from 1 s (t_mono_ns).
type planClock struct{ n int64 }

func (c *planClock) tick() Stamp {
	c.n++
	return Stamp{Mono: 1e9 + c.n*1e6, Wall: 1767225600e9 + c.n*1e6, Ok: true}
}

// PlannedLog is one consumer rank's log of a correct pull.
type PlannedLog struct {
	Header  Header
	Records []Record
}

// Write writes the log as the recorder does.
func (p *PlannedLog) Write(w io.Writer) error {
	lw := NewWriter(w, p.Header)
	for i := range p.Records {
		lw.Write(&p.Records[i])
	}
	return lw.Flush()
}

// WritePlan plans the pull (Plan) and writes each consumer rank's log as
// dir/AGENT.jsonl (complete files or none); it returns their paths.
func WritePlan(dir string, producer, consumer []*layout.Dump, force bool, opts PlanOptions) ([]string, error) {
	logs, err := Plan(producer, consumer, opts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, l := range logs {
		p := filepath.Join(dir, l.Header.Agent+LogExt)
		if err := safeio.Write(p, force, l.Write); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Plan returns each consumer rank's log of the pull of every request's
// loaded tokens (PullTokens) from the producer request it pairs with
// (producer_id, or its id), paired as opts.Planner says. Both sides need
// addresses and agent names.
func Plan(producer, consumer []*layout.Dump, opts PlanOptions) ([]*PlannedLog, error) {
	switch opts.Planner {
	case "", PlannerVLLM, PlannerExact:
	default:
		return nil, fmt.Errorf("planner %q: want %s", opts.Planner, strings.Join(Planners, " or "))
	}
	var prods []*planRank
	for _, d := range producer {
		pr, err := newPlanRank(d)
		if err != nil {
			return nil, err
		}
		prods = append(prods, pr)
	}
	var out []*PlannedLog
	for _, d := range consumer {
		cr, err := newPlanRank(d)
		if err != nil {
			return nil, err
		}
		l, err := planRankLog(cr, prods, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// planRank is a rank's dump with its address map and descriptor units.
type planRank struct {
	dump  *layout.Dump
	agent string
	am    *addrmap.Map
	units []unit
}

// unit is a page kind of a region: a descriptor per kernel row.
type unit struct {
	region *addrmap.Region
	page   addrmap.Page
	// heads (rows) the page holds: global [h0, h1).
	h0, h1 int
	rows   int
}

func newPlanRank(d *layout.Dump) (*planRank, error) {
	if d.Manifest.Parallel.Agent == nil {
		return nil, notPlannable("dump %q has no agent name (parallel.agent)", d.Path)
	}
	am, err := addrmap.New(d)
	if err != nil {
		return nil, err
	}
	pr := &planRank{dump: d, agent: *d.Manifest.Parallel.Agent, am: am}
	// Attention units first, then state units (vLLM's [attention | state]
	// descriptor ids); by group and layer within each.
	regions := slices.Clone(am.Regions)
	slices.SortStableFunc(regions, func(a, b *addrmap.Region) int {
		switch {
		case a.State != b.State && a.State:
			return 1
		case a.State != b.State:
			return -1
		}
		return 0
	})
	for _, r := range regions {
		pages := r.Pages()
		if len(pages) == 0 {
			return nil, notPlannable("layer %q of %q: its layout has no per-block pages", r.Layer.Name, d.Path)
		}
		for _, p := range pages {
			u := unit{region: r, page: p, rows: r.EngineBlocks() * r.KernelBlocks}
			v := p.View
			if v == nil {
				v = r.Views[0]
			}
			u.h0, u.h1 = v.HeadBase, v.HeadBase+v.Heads
			if r.State && p.View == nil {
				u.h0, u.h1 = -1, -1 // the whole state, split along another axis
			}
			pr.units = append(pr.units, u)
		}
	}
	return pr, nil
}

// source is where one consumer unit's bytes come from on one producer
// rank: the producer unit, and the head (row) sub-range both take.
type source struct {
	cu, pu   int
	prank    int
	lh0, lh1 int // local heads [lh0, lh1), relative to the unit's
	rh0, rh1 int // remote heads, relative to the producer unit's
}

// sources finds, for each consumer unit, the producer ranks and units its
// heads (state rows) come from: the producer rank at the consumer's place
// in the TP split first (vLLM reads a replicated cache from it), then the
// others in rank order, each for the heads not yet found.
func sources(cr *planRank, prods []*planRank) ([][]source, error) {
	out := make([][]source, len(cr.units))
	var order []int
	for pi, pr := range prods {
		if preferred(cr, pr) {
			order = append(order, pi)
		}
	}
	for pi, pr := range prods {
		if !preferred(cr, pr) {
			order = append(order, pi)
		}
	}
	cp := cr.dump.Manifest.Parallel
	for ci, cu := range cr.units {
		whole := cu.h0 < 0
		n := max(cu.h1-cu.h0, 1)
		have := make([]bool, n)
		left := n
		for _, pi := range order {
			pp := prods[pi].dump.Manifest.Parallel
			for ui, pu := range prods[pi].units {
				if left == 0 || pu.region.Layer.Name != cu.region.Layer.Name || pu.page.Part != cu.page.Part ||
					pu.page.State != cu.page.State || (pu.h0 < 0) != whole {
					continue
				}
				if whole {
					// A state split along another axis than its first: whole,
					// from the same place of an equal TP split.
					if pp.TPSize == cp.TPSize && pp.TPRank == cp.TPRank && pu.page.Len == cu.page.Len {
						out[ci] = append(out[ci], source{cu: ci, pu: ui, prank: pi, lh0: 0, lh1: 1, rh0: 0, rh1: 1})
						left = 0
					}
					continue
				}
				lo, hi := max(cu.h0, pu.h0), min(cu.h1, pu.h1)
				for h := lo; h < hi; {
					if have[h-cu.h0] {
						h++
						continue
					}
					e := h
					for e < hi && !have[e-cu.h0] {
						have[e-cu.h0] = true
						e++
					}
					left -= e - h
					out[ci] = append(out[ci], source{cu: ci, pu: ui, prank: pi, lh0: h - cu.h0, lh1: e - cu.h0, rh0: h - pu.h0, rh1: e - pu.h0})
					h = e
				}
			}
		}
		if left > 0 {
			return nil, notPlannable("layer %q of %q: the producer's dumps do not hold all of its heads (state rows) at the same place", cu.region.Layer.Name, cr.dump.Path)
		}
	}
	return out, nil
}

// preferred says whether producer rank pr is at consumer rank cr's place
// in the TP split.
func preferred(cr, pr *planRank) bool {
	c, p := cr.dump.Manifest.Parallel, pr.dump.Manifest.Parallel
	return p.TPRank == c.TPRank*p.TPSize/c.TPSize
}

// sub is the byte range of heads [h0, h1) of a unit's page (n heads): the
// whole page, or a slice of it where its heads are outermost.
func sub(u unit, h0, h1 int) (off, n uint64, err error) {
	heads := u.h1 - u.h0
	if u.h0 < 0 || (h0 == 0 && h1 == heads) || (heads <= 1 && h1-h0 == 1) {
		return 0, u.page.Len, nil
	}
	if !u.page.HeadsOuter {
		return 0, 0, notPlannable("layer %q: a page read in part needs its heads outermost (vLLM: HND layout), layout %q", u.region.Layer.Name, u.region.Layer.Layout)
	}
	return uint64(h0) * u.page.HeadBytes, uint64(h1-h0) * u.page.HeadBytes, nil
}

// planRankLog plans one consumer rank's log.
func planRankLog(cr *planRank, prods []*planRank, opts PlanOptions) (*PlannedLog, error) {
	m := cr.dump.Manifest
	var clock planClock
	l := &PlannedLog{Header: Header{Agent: cr.agent, TPRank: m.Parallel.TPRank, PPRank: m.Parallel.PPRank,
		LeaseS: VLLMLease, HasLease: true, Time: clock.tick()}}
	hybrid := Hybrid(cr.dump)
	reg := Record{Op: OpRegister, Mem: "VRAM", Time: clock.tick()}
	for _, r := range cr.am.Regions {
		reg.Descs = append(reg.Descs, Desc{Addr: r.Start, Len: r.End - r.Start})
	}
	l.Records = append(l.Records, reg)
	srcs, err := sources(cr, prods)
	if err != nil {
		return nil, err
	}
	// The producer ranks read, in rank order; a local and a remote list
	// for each.
	var ranks []int
	for _, ss := range srcs {
		for _, s := range ss {
			if !slices.Contains(ranks, s.prank) {
				ranks = append(ranks, s.prank)
			}
		}
	}
	slices.Sort(ranks)
	type lists struct {
		local, remote int
		ratio         []int // per consumer unit: chunks per page
		base, pbase   []int // first descriptor id of each unit in the lists
		src           map[int]source
	}
	byRank := map[int]*lists{}
	handle := 0
	for _, pi := range ranks {
		pr := prods[pi]
		ls := &lists{src: map[int]source{}, ratio: make([]int, len(cr.units)), base: make([]int, len(cr.units))}
		for ci, ss := range srcs {
			for _, s := range ss {
				if s.prank == pi {
					ls.src[ci] = s
				}
			}
		}
		local := Record{Op: OpDList, Agent: LocalAgent}
		for ci, cu := range cr.units {
			r := 1
			off, n := uint64(0), cu.page.Len
			if s, ok := ls.src[ci]; ok {
				pu := pr.units[s.pu]
				if cu.region.KernelTokens%pu.region.KernelTokens != 0 && !cu.region.State {
					return nil, notPlannable("layer %q: the producer's kernel block (%d tokens) is not a divisor of the consumer's (%d): vLLM's connector reads a consumer block in whole producer blocks; split the producer's blocks (--kernel-block-size)", cu.region.Layer.Name, pu.region.KernelTokens, cu.region.KernelTokens)
				}
				if !cu.region.State {
					r = cu.region.KernelTokens / pu.region.KernelTokens
				}
				if off, n, err = sub(cu, s.lh0, s.lh1); err != nil {
					return nil, err
				}
				if r > 1 && n != cu.page.Len {
					return nil, notPlannable("layer %q: a head split and another block size at once (vLLM rejects it at handshake)", cu.region.Layer.Name)
				}
				if r == 1 && !cu.region.State && Converted(cu.region, pu.region) {
					// Pages of another order, converted on receive
					// (vLLM's HND to NHD permute): whole pages only.
					if n != cu.page.Len {
						return nil, notPlannable("layer %q: a head split between layouts %q and %q", cu.region.Layer.Name, pu.region.Layer.Layout, cu.region.Layer.Layout)
					}
				}
			}
			ls.ratio[ci] = r
			ls.base[ci] = len(local.Descs)
			for row := range cu.rows {
				base := cu.page.Base + uint64(row)*cu.page.Stride + off
				for j := range r {
					local.Descs = append(local.Descs, Desc{Addr: base + uint64(j)*(n/uint64(r)), Len: n / uint64(r)})
				}
			}
		}
		handle++
		local.Handle, ls.local = handle, handle
		local.Time = clock.tick()
		l.Records = append(l.Records, local)
		remote := Record{Op: OpDList, Agent: pr.agent}
		for ui, pu := range pr.units {
			off, n := uint64(0), pu.page.Len
			for _, s := range ls.src {
				if s.pu == ui {
					if off, n, err = sub(pu, s.rh0, s.rh1); err != nil {
						return nil, err
					}
					break
				}
			}
			ls.pbase = append(ls.pbase, len(remote.Descs))
			for row := range pu.rows {
				remote.Descs = append(remote.Descs, Desc{Addr: pu.page.Base + uint64(row)*pu.page.Stride + off, Len: n})
			}
		}
		handle++
		remote.Handle, ls.remote = handle, handle
		remote.Time = clock.tick()
		l.Records = append(l.Records, remote)
		byRank[pi] = ls
	}
	// One READ per (request, producer rank), pairs unit-major then by
	// kernel row, as _compute_desc_ids orders them.
	id := 0
	for ri := range m.Requests {
		r := &m.Requests[ri]
		pairID := r.PairID()
		end := PullTokens(r.NumTokens, hybrid, opts.Lookahead)
		// A heartbeat to each producer rank read, as the consumer sends
		// while the request waits (vLLM: "HB:" and the producer's ids).
		for _, pi := range ranks {
			l.Records = append(l.Records, Record{Op: OpNotif, Agent: prods[pi].agent, Msg: "HB:" + pairID, Time: clock.tick()})
		}
		for _, pi := range ranks {
			pr, ls := prods[pi], byRank[pi]
			preq := pr.dump.Manifest.Request(pairID)
			if preq == nil {
				return nil, notPlannable("the producer's dump %q holds no request %q (request %q of %q)", pr.dump.Path, pairID, r.ID, cr.dump.Path)
			}
			notif := fmt.Sprintf("%s:%d", pairID, max(1, m.Parallel.TPSize/pr.dump.Manifest.Parallel.TPSize))
			x := Record{Op: OpXfer, Kind: Read, Prepped: true, Local: ls.local, Remote: ls.remote,
				Notif: notif, Request: r.ID, HasRequest: true}
			for ci, cu := range cr.units {
				s, ok := ls.src[ci]
				if !ok {
					continue
				}
				var err error
				if opts.Planner == PlannerExact {
					err = pairRows(&x, r, preq, cu, pr.units[s.pu], ls.base[ci], ls.pbase[s.pu], ls.ratio[ci], end)
				} else {
					err = pairVLLM(&x, r, preq, cu, pr.units[s.pu], ls.base[ci], ls.pbase[s.pu], ls.ratio[ci], end, hybrid)
				}
				if err != nil {
					return nil, err
				}
			}
			if len(x.LocalIDs) == 0 {
				// Nothing to read (a full prefix hit): vLLM only tells the
				// producer it may free the blocks.
				l.Records = append(l.Records, Record{Op: OpNotif, Agent: pr.agent, Msg: notif, Time: clock.tick()})
				continue
			}
			id++
			x.ID = id
			x.Time = clock.tick()
			l.Records = append(l.Records, x, Record{Op: OpPost, ID: id, Notif: notif, Time: clock.tick()},
				Record{Op: OpState, ID: id, State: Done, Time: clock.tick()})
		}
	}
	return l, nil
}

// pairRows adds a unit's descriptor pairs for a request: each loaded
// kernel row (each chunk, when the consumer's page holds several of the
// producer's) that holds a token before num_tokens, with the producer
// row of the same tokens.
func pairRows(x *Record, r, preq *layout.Request, cu, pu unit, lbase, pbase, ratio, end int) error {
	cg, pg := cu.region.Group.Group, pu.region.Group.Group
	if cg.Kind == layout.KindMamba {
		cb, ok := r.StateBlock[fmt.Sprint(cg.ID)]
		pb, pok := preq.StateBlock[fmt.Sprint(pg.ID)]
		if !ok || !pok {
			return nil
		}
		x.LocalIDs = append(x.LocalIDs, lbase+cu.region.EngineBlockOf(cb))
		x.RemoteIDs = append(x.RemoteIDs, pbase+pu.region.EngineBlockOf(pb))
		return nil
	}
	span, st, err := blockspan.Of(r, cg)
	if err != nil || st != blockspan.OK {
		return err
	}
	ptable := preq.BlockTable[fmt.Sprint(pg.ID)]
	KTc, KTp := cu.region.KernelTokens, pu.region.KernelTokens
	for i, b := range span.Blocks {
		pos := span.Start + i
		for k := range cu.region.KernelBlocks {
			for j := range ratio {
				t := pos*cg.BlockSize + k*KTc + j*KTp
				if t >= end || t < r.NumLocalComputedTokens {
					continue
				}
				ppos := t / pg.BlockSize
				if ppos >= len(ptable) || ptable[ppos] == layout.NoBlock {
					return notPlannable("request %q: token %d has no block in the producer's table", r.ID, t)
				}
				pk := (t % pg.BlockSize) / KTp
				row := cu.region.EngineBlockOf(b)*cu.region.KernelBlocks + k
				prow := pu.region.EngineBlockOf(ptable[ppos])*pu.region.KernelBlocks + pk
				x.LocalIDs = append(x.LocalIDs, lbase+row*ratio+j)
				x.RemoteIDs = append(x.RemoteIDs, pbase+prow)
			}
		}
	}
	return nil
}

// pairVLLM adds a unit's descriptor pairs for a request as vLLM's
// connector pairs them (vllm-project/vllm 9aaf83ef5, worker.py
// _read_blocks_for_req, _read_blocks, get_mapped_blocks and
// _apply_prefix_caching): the consumer's kernel blocks of the positions
// it pulls into, the producer's kernel blocks of the request, pair i the
// i-th of each after the trims.
func pairVLLM(x *Record, r, preq *layout.Request, cu, pu unit, lbase, pbase, ratio, end int, hybrid bool) error {
	cg, pg := cu.region.Group.Group, pu.region.Group.Group
	if cg.Kind == layout.KindMamba {
		// A state block is read whole, one to one.
		return pairRows(x, r, preq, cu, pu, lbase, pbase, ratio, end)
	}
	// The consumer's blocks: those of the positions holding a token it
	// pulls, less its prefix hit and a sliding window's dropped blocks
	// (get_unhashed_block_ids, get_sw_clipped_blocks).
	span, st, err := blockspan.Of(r, cg)
	if err != nil || st != blockspan.OK {
		return err
	}
	var local []int
	stop := (end + cg.BlockSize - 1) / cg.BlockSize
	if end <= r.NumLocalComputedTokens {
		stop = 0
	}
	for i, b := range span.Blocks {
		if span.Start+i >= stop {
			break
		}
		for k := range cu.region.KernelBlocks {
			row := cu.region.EngineBlockOf(b)*cu.region.KernelBlocks + k
			// A kernel block larger than the producer's is read in
			// producer-block chunks (get_mapped_blocks).
			for j := range ratio {
				local = append(local, row*ratio+j)
			}
		}
	}
	if len(local) == 0 {
		return nil
	}
	// The producer's blocks of the request (its remote_block_ids): those
	// covering its tokens, a sliding window's last ones.
	table := preq.BlockTable[fmt.Sprint(pg.ID)]
	n := min(len(table), (preq.NumTokens+pg.BlockSize-1)/pg.BlockSize)
	blocks := table[:n]
	for len(blocks) > 0 && blocks[0] == layout.NoBlock {
		blocks = blocks[1:]
	}
	if pg.Kind == layout.KindSlidingWindow {
		if keep := (pg.SlidingWindow+pg.BlockSize-1)/pg.BlockSize + 1; len(blocks) > keep {
			blocks = blocks[len(blocks)-keep:]
		}
	}
	var remote []int
	for _, b := range blocks {
		if b == layout.NoBlock {
			return notPlannable("request %q: the producer's table has a null block inside its window", preq.ID)
		}
		for k := range pu.region.KernelBlocks {
			remote = append(remote, pu.region.EngineBlockOf(b)*pu.region.KernelBlocks+k)
		}
	}
	if ratio > 1 && len(local) > len(remote) {
		local = local[:len(remote)]
	}
	cppl, pppl := cu.region.KernelBlocks, pu.region.KernelBlocks
	switch {
	case !hybrid && len(local) > len(remote):
		return notPlannable("request %q layer %q: the consumer reads %d kernel blocks and the producer holds %d: vLLM's connector asserts that the consumer's list is not longer (_apply_prefix_caching)", r.ID, cu.region.Layer.Name, len(local), len(remote))
	case !hybrid:
		// End-trim: the producer's blocks past a local prefix hit.
		remote = remote[len(remote)-len(local):]
	default:
		if d := len(local) - len(remote); max(d, -d) >= max(cppl, pppl) {
			return notPlannable("request %q layer %q: the consumer reads %d kernel blocks and the producer holds %d, %d or more apart: vLLM's connector asserts they differ by less than the larger kernel blocks per block (_apply_prefix_caching)", r.ID, cu.region.Layer.Name, len(local), len(remote), max(cppl, pppl))
		}
		k := min(len(local), len(remote))
		local, remote = local[:k], remote[:k]
	}
	for i := range local {
		x.LocalIDs = append(x.LocalIDs, lbase+local[i])
		x.RemoteIDs = append(x.RemoteIDs, pbase+remote[i])
	}
	return nil
}
