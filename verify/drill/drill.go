// Package drill explains the mismatches a verdict found: when both sides
// of a comparison are dumps, it compares the logical cells (one token of
// one global KV head of one layer) of every mismatching block position, so
// the two sides may differ in layout, TP, PP and block size, and says
// which layers, heads, replicas and tokens differ and what the difference
// looks like (a flipped bit, zeroed cells, swapped heads, another block's
// or another request's KV, ...). It reads dumps and knows nothing of
// verdicts: package verify decides them and hands it the mismatches.
package drill

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/bits"
	"slices"

	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/layout"
)

// DefaultMaxDetails is the cap on details per request when
// Options.MaxDetails is 0.
const DefaultMaxDetails = 32

// FlipBits is the most differing bits a detail is called "N bits
// flipped" with; more are "random bytes" unless another hint fits.
const FlipBits = 16

// Options control Explain.
type Options struct {
	// MaxDetails caps the details of one request (0: DefaultMaxDetails,
	// negative: no cap). Differences past the cap are counted in a note,
	// not classified.
	MaxDetails int
}

// Request is a consumer request whose groups mismatch, as a verdict found
// it: ProducerID is the producer request it was compared with.
type Request struct {
	ID, ProducerID string
	Groups         []Group
}

// Group is a mismatching KV cache group of a request and its mismatching
// consumer block positions.
type Group struct {
	ID        int
	Positions []int
}

// Explanation is what the drill-down found for one Request: the cells that
// differ, and notes on what it left out (caps, unreadable data); Heat,
// one per drilled (group, position), counts the differing bytes of every
// slice, past the details' cap too.
type Explanation struct {
	Details []Detail
	Notes   []string
	Heat    []Heat
}

// Detail is one (group, consumer block position, layer, global head,
// replica) whose cells differ from the producer's.
type Detail struct {
	Group    int
	Position int
	// Layer is the layer number; LayerName the consumer's cache name.
	Layer     int
	LayerName string
	Head      int
	// Replica is the consumer copy (replica index) that differs.
	Replica int
	// FirstToken and LastToken are the request token positions of the
	// first and last differing cells.
	FirstToken, LastToken int
	// Bytes and Bits count the differing bytes and bits.
	Bytes, Bits int
	// Hint says what the difference looks like: "1 bit flipped",
	// "zeroed", "heads 1<->2 swapped", "holds the block of position 3",
	// "holds KV of request req-4", "random bytes", ...
	Hint string
	// State is set for a state group (docs/spec.md §6): Head and LastHead
	// are then the first and last differing global rows, StateIndex the
	// state (in the layer's states) they belong to, and there are no
	// tokens. For attention LastHead equals Head.
	State      bool
	StateIndex int
	LastHead   int
}

// Explain returns, for each request of reqs, the cells of its mismatching
// consumer block positions that differ from the producer's (explanation i
// is reqs[i]'s): for each layer (matched by name), global head, consumer
// replica copy and token. It reads only the cells of those positions (and,
// to classify a difference, single cells elsewhere), always inside
// layout.Guard, and never writes to a dump. Groups whose data is not in
// mapped files (device memory) get a note instead. State groups are
// compared row by row (docs/spec.md §6): each consumer copy of a (state,
// segment) with differing rows gives one detail naming the rows. It
// returns an error only for a fault while reading mapped data or a
// cancelled ctx.
func Explain(ctx context.Context, producer, consumer []*layout.Dump, reqs []Request, opts Options) ([]Explanation, error) {
	maxDetails := opts.MaxDetails
	if maxDetails == 0 {
		maxDetails = DefaultMaxDetails
	}
	p, c := newCellIndex(producer), newCellIndex(consumer)
	out := make([]Explanation, len(reqs))
	err := layout.Guard("dump data during the drill-down", func() error {
		for i := range reqs {
			e := &explainer{ctx: ctx, p: p, c: c, req: &reqs[i], x: &out[i], max: maxDetails, budget: searchBudget}
			if err := e.request(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// cellIndex is one side's dumps, indexed, with the drill-down's cell
// lookups.
type cellIndex struct{ *layout.DumpIndex }

func newCellIndex(dumps []*layout.Dump) *cellIndex {
	return &cellIndex{layout.NewDumpIndex(dumps)}
}

// cache is one distinct cache of a group on one rank.
type cache = layout.RankCache

// find returns the cache holding layer name (or an alias of it) and
// global head; replica < 0 prefers replica index 0, else any.
func (s *cellIndex) find(group int, name string, head, replica int) (cache, bool) {
	var best cache
	found := false
	for _, c := range s.Caches(group) {
		v := c.View
		if v.Layer.Name != name && !slices.Contains(v.Aliases, name) {
			continue
		}
		if head < v.HeadBase || head >= v.HeadBase+v.Heads {
			continue
		}
		switch {
		case replica >= 0 && v.ReplicaIndex == replica:
			return c, true
		case replica < 0 && v.ReplicaIndex == 0:
			return c, true
		case replica < 0 && !found:
			best, found = c, true
		}
	}
	return best, found
}

// cell appends the logical bytes of the cell of request id at token of
// global head in cache c to dst. ok is false where the side holds no
// such cell (no block there, a null block, device memory).
func (s *cellIndex) cell(dst []byte, c cache, id string, head, token int) ([]byte, bool) {
	if c.View.Cells.Data == nil || token < 0 {
		return dst, false
	}
	S := c.Group.BlockSize
	b, ok := s.Block(c.Dump, id, c.Group, token/S)
	if !ok {
		return dst, false
	}
	return c.View.Cells.ReadCell(dst, b, token%S, head-c.View.HeadBase), true
}

// explainer drills one request down.
type explainer struct {
	ctx     context.Context
	p, c    *cellIndex
	req     *Request
	x       *Explanation // what request adds to
	max     int
	skipped int // differences past the cap
	budget  int // cells classification may still read
}

func (e *explainer) request() error {
	pr, cr := e.p.Request(e.req.ProducerID), e.c.Request(e.req.ID)
	if pr == nil || cr == nil {
		e.x.Notes = append(e.x.Notes, "no drill-down: the request is not in both sides' dumps")
		return nil
	}
	for _, g := range e.req.Groups {
		caches := e.c.Caches(g.ID)
		if len(caches) > 0 && caches[0].Group.Kind == layout.KindMamba {
			if err := e.stateGroup(g.ID, caches); err != nil {
				return err
			}
			continue
		}
		if len(caches) == 0 {
			e.x.Notes = append(e.x.Notes, fmt.Sprintf("group %d: no drill-down: the consumer's dumps do not hold its caches", g.ID))
			continue
		}
		S := caches[0].Group.BlockSize
		axes := newHeatAxes(caches)
		var quiet []int // mismatching positions where no cell differs
		found := false
		for _, pos := range g.Positions {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			lo := pos * S
			hi := min((pos+1)*S, cr.NumTokens, pr.NumTokens)
			unreadable := false
			var layers, heads []int
			differ := 0
			heat := axes.heat(g.ID, pos)
			for _, c := range caches {
				if c.View.Cells.Data == nil {
					unreadable = true
					continue
				}
				for lh := range c.View.Heads {
					head := c.View.HeadBase + lh
					n := e.compare(g.ID, pos, S, c, head, lo, hi)
					heat.add(axes.slot(c.View, head), n)
					if n > 0 {
						differ++
						layers = appendUnique(layers, c.View.Number)
						heads = appendUnique(heads, head)
					}
				}
			}
			e.x.Heat = append(e.x.Heat, heat)
			switch {
			case unreadable:
				e.x.Notes = append(e.x.Notes, fmt.Sprintf("group %d position %d: some caches are in device memory and were not compared", g.ID, pos))
			case differ == 0:
				quiet = append(quiet, pos)
			case differ > 1:
				e.x.Notes = append(e.x.Notes, fmt.Sprintf("group %d position %d: %d (layer, head, replica) slices differ, in layers %s and heads %s", g.ID, pos, differ, ranges.Format(layers), ranges.Format(heads)))
			}
			found = found || differ > 0
		}
		// With larger producer blocks a mismatch names every consumer
		// position of the chunk, including unchanged ones: only when no
		// position differs is the producer's dump itself suspect.
		if len(quiet) > 0 && !found {
			e.x.Notes = append(e.x.Notes, fmt.Sprintf("group %d positions %s: no differing cell found (the producer's dumps do not hold what it checksummed)", g.ID, ranges.Format(quiet)))
		}
	}
	if e.skipped > 0 {
		e.x.Notes = append(e.x.Notes, fmt.Sprintf("%d more differing (layer, head, replica) cells not shown: the cap is %d details per request", e.skipped, e.max))
	}
	slices.SortStableFunc(e.x.Details, func(a, b Detail) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Position, b.Position),
			cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Head, b.Head), cmp.Compare(a.Replica, b.Replica))
	})
	return nil
}

// diffCell is one differing token of a (layer, head, replica).
type diffCell struct {
	token int
	got   []byte // consumer
	want  []byte // producer
}

// compare compares the consumer's cells of one cache and global head at
// tokens [lo, hi) with the producer's and adds a detail (or counts one past
// the cap) if they differ. It returns the differing bytes, or -1 when the
// producer holds no such slice (nothing was compared).
func (e *explainer) compare(group, pos, S int, c cache, head, lo, hi int) int {
	name := c.View.Layer.Name
	pc, ok := e.p.find(group, name, head, -1)
	if !ok {
		return -1
	}
	var diffs []diffCell
	nbytes, nbits := 0, 0
	for t := lo; t < hi; t++ {
		got, ok1 := e.c.cell(nil, c, e.req.ID, head, t)
		want, ok2 := e.p.cell(nil, pc, e.req.ProducerID, head, t)
		if !ok1 || !ok2 || bytes.Equal(got, want) {
			continue
		}
		for i := range min(len(got), len(want)) {
			if x := got[i] ^ want[i]; x != 0 {
				nbytes++
				nbits += bits.OnesCount8(x)
			}
		}
		diffs = append(diffs, diffCell{token: t, got: got, want: want})
	}
	if len(diffs) == 0 {
		return 0
	}
	if e.max >= 0 && len(e.x.Details) >= e.max {
		e.skipped++
		return nbytes
	}
	e.x.Details = append(e.x.Details, Detail{
		Group: group, Position: pos, Layer: c.View.Number, LayerName: name, Head: head,
		Replica: c.View.ReplicaIndex, FirstToken: diffs[0].token, LastToken: diffs[len(diffs)-1].token,
		Bytes: nbytes, Bits: nbits, Hint: e.classify(group, pos, S, c, pc, head, lo, hi, diffs, nbits),
		LastHead: head,
	})
	return nbytes
}

// row appends global row row of cache c's state block for request id.
func (s *cellIndex) row(dst []byte, c cache, id string, row int) ([]byte, bool) {
	b, ok := s.Block(c.Dump, id, c.Group, 0)
	if !ok || c.View.Cells.Data == nil {
		return dst, false
	}
	return c.View.Cells.ReadCell(dst, b, 0, row-c.View.HeadBase), true
}

// stateGroup compares every consumer copy of every state row of a
// mismatching state group with the producer's row (the same global row of
// the same layer, any copy) and adds one detail per consumer view (a
// (state, segment) copy) whose rows differ.
func (e *explainer) stateGroup(group int, caches []cache) error {
	pid, cid := e.req.ProducerID, e.req.ID
	differ := 0
	axes := newHeatAxes(caches)
	heat := axes.heat(group, 0)
	var unread []int // heat slots of views not compared
	defer func() {
		for _, i := range unread {
			heat.Bytes[i] = HeatNotDrilled
		}
		e.x.Heat = append(e.x.Heat, heat)
	}()
	for _, c := range caches {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		if c.View.Cells.Data == nil {
			e.x.Notes = append(e.x.Notes, fmt.Sprintf("group %d: some state layers are in device memory and were not compared", group))
			unread = append(unread, axes.slot(c.View, 0))
			continue
		}
		var rows []int
		var gots [][]byte
		nbytes, nbits := 0, 0
		missing := false // a row the producer does not hold
		for lr := range c.View.Heads {
			row := c.View.HeadBase + lr
			pc, ok := e.p.find(group, c.View.Layer.Name, row, -1)
			if !ok {
				missing = true
				continue
			}
			got, ok1 := e.c.row(nil, c, cid, row)
			want, ok2 := e.p.row(nil, pc, pid, row)
			if !ok1 || !ok2 || bytes.Equal(got, want) {
				continue
			}
			for i := range min(len(got), len(want)) {
				if x := got[i] ^ want[i]; x != 0 {
					nbytes++
					nbits += bits.OnesCount8(x)
				}
			}
			rows = append(rows, row)
			gots = append(gots, got)
		}
		heat.add(axes.slot(c.View, 0), nbytes)
		if missing {
			unread = append(unread, axes.slot(c.View, 0))
		}
		if len(rows) == 0 {
			continue
		}
		differ++
		if e.max >= 0 && len(e.x.Details) >= e.max {
			e.skipped++
			continue
		}
		e.x.Details = append(e.x.Details, Detail{
			Group: group, Layer: c.View.Number, LayerName: c.View.Layer.Name, Head: rows[0], LastHead: rows[len(rows)-1],
			Replica: c.View.ReplicaIndex, Bytes: nbytes, Bits: nbits, State: true, StateIndex: c.View.StateIndex,
			Hint: e.classifyState(group, c, rows, gots, nbits),
		})
	}
	if differ == 0 {
		e.x.Notes = append(e.x.Notes, fmt.Sprintf("group %d: no differing state row found (the producer's dumps do not hold what it checksummed)", group))
	}
	return nil
}

// classifyState says what differing state rows look like: zeroed, the
// state of another request (a stale read of a reused state block), a few
// flipped bits, or random bytes.
func (e *explainer) classifyState(group int, c cache, rows []int, gots [][]byte, nbits int) string {
	zero := true
	for _, g := range gots {
		if slices.ContainsFunc(g, func(b byte) bool { return b != 0 }) {
			zero = false
			break
		}
	}
	if zero {
		return "zeroed"
	}
	for _, sd := range []*cellIndex{e.p, e.c} {
		for _, id := range sd.RequestIDs() {
			if id == e.req.ProducerID || id == e.req.ID {
				continue
			}
			same := true
			for i, row := range rows {
				if e.budget <= 0 {
					same = false
					break
				}
				e.budget--
				src, ok := sd.find(group, c.View.Layer.Name, row, -1)
				if !ok {
					same = false
					break
				}
				b, ok := sd.row(nil, src, id, row)
				if !ok || !bytes.Equal(b, gots[i]) {
					same = false
					break
				}
			}
			if same {
				return "holds the state of request " + id
			}
		}
	}
	if nbits <= FlipBits {
		if nbits == 1 {
			return "1 bit flipped"
		}
		return fmt.Sprintf("%d bits flipped", nbits)
	}
	return "random bytes"
}

func appendUnique(v []int, x int) []int {
	if slices.Contains(v, x) {
		return v
	}
	return append(v, x)
}

// searchBudget bounds the cells one request's classification reads
// looking for where a differing cell came from.
const searchBudget = 1 << 20

// classify says what the differing cells look like. Exact explanations
// (every differing consumer cell equals a producer cell from elsewhere:
// another token, head, layer, position or request) come first, then
// zeroed cells, then a few flipped bits, else random bytes.
func (e *explainer) classify(group, pos, S int, c, pc cache, head, lo, hi int, diffs []diffCell, nbits int) string {
	// from reports whether every differing consumer cell equals the cell
	// src returns for its token. It reads one cell per candidate that
	// fails, from the first differing token.
	from := func(src func(t int) ([]byte, bool)) bool {
		for _, d := range diffs {
			if e.budget <= 0 {
				return false
			}
			e.budget--
			b, ok := src(d.token)
			if !ok || !bytes.Equal(b, d.got) {
				return false
			}
		}
		return true
	}
	zero := true
	for _, d := range diffs {
		if slices.ContainsFunc(d.got, func(b byte) bool { return b != 0 }) {
			zero = false
			break
		}
	}
	if zero {
		return "zeroed"
	}
	pid, cid := e.req.ProducerID, e.req.ID
	// Tokens swapped within the block: each differing cell is the
	// producer's cell of another token of the block.
	if len(diffs) >= 2 {
		swapped := true
		for _, d := range diffs {
			found := false
			for u := lo; u < hi && !found && e.budget > 0; u++ {
				e.budget--
				b, ok := e.p.cell(nil, pc, pid, head, u)
				found = u != d.token && ok && bytes.Equal(b, d.got)
			}
			if !found {
				swapped = false
				break
			}
		}
		if swapped {
			return "tokens swapped"
		}
	}
	// Heads swapped: the producer's cells of another head of the layer.
	tpRank := e.c.Dumps[c.Dump].Manifest.Parallel.TPRank
	first := c.View.HeadBase - (tpRank/c.View.Replicas)*c.View.Heads
	for other := first; other < first+c.View.GlobalHeads; other++ {
		if other == head {
			continue
		}
		oc, ok := e.p.find(group, c.View.Layer.Name, other, -1)
		if ok && from(func(t int) ([]byte, bool) { return e.p.cell(nil, oc, pid, other, t) }) {
			return fmt.Sprintf("heads %d<->%d swapped", min(head, other), max(head, other))
		}
	}
	// Layers swapped: the producer's cells of the same head in another
	// layer of the group.
	seen := map[string]bool{}
	for _, oc := range e.p.Caches(group) {
		name := oc.View.Layer.Name
		if seen[name] || oc.View.Number == c.View.Number {
			continue
		}
		seen[name] = true
		lc, ok := e.p.find(group, name, head, -1)
		if !ok || lc.View.Cells.CellBytes != c.View.Cells.CellBytes {
			continue
		}
		if from(func(t int) ([]byte, bool) { return e.p.cell(nil, lc, pid, head, t) }) {
			a, b := c.View.Number, lc.View.Number
			return fmt.Sprintf("layers %d<->%d swapped", min(a, b), max(a, b))
		}
	}
	// The block of another position of the request, on the producer.
	for x := range ceilDiv(e.p.Request(pid).NumTokens, S) {
		shift := (x - pos) * S
		if x != pos && from(func(t int) ([]byte, bool) { return e.p.cell(nil, pc, pid, head, t+shift) }) {
			return fmt.Sprintf("holds the block of position %d", x)
		}
	}
	// KV of another request: the producer's, or the consumer's own
	// co-resident request (a stale read of a reused block).
	for _, sd := range []struct {
		index *cellIndex
		c     cache
	}{{e.p, pc}, {e.c, c}} {
		for _, id := range sd.index.RequestIDs() {
			if id == pid || id == cid {
				continue
			}
			for x := range ceilDiv(sd.index.Request(id).NumTokens, S) {
				shift := (x - pos) * S
				if from(func(t int) ([]byte, bool) { return sd.index.cell(nil, sd.c, id, head, t+shift) }) {
					return "holds KV of request " + id
				}
			}
		}
	}
	if nbits <= FlipBits {
		if nbits == 1 {
			return "1 bit flipped"
		}
		return fmt.Sprintf("%d bits flipped", nbits)
	}
	return "random bytes"
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
