package checksum

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/parallel"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
	"github.com/kvaudit/kvaudit/wire"
)

// Options control Compute and Records.
type Options struct {
	// Engine evaluates the definition; nil means Fast{}.
	Engine Engine
	// Requests restricts the work to these request ids; empty means all.
	// Compute fails for an id that no dump holds.
	Requests []string
	// Progress is passed to each plan (see ckplan.Plan.Progress).
	Progress func(bytes int64)
	// BlockValues asks for block-numbered values (wire.RecordRequestGroup.
	// ValuesBlock) from every engine. A slopeEngine gives them in the same
	// pass regardless; another engine then runs a block-numbered plan too.
	BlockValues bool
	// MixKey is the run key of the mix check (ckplan.Plan.MixKey): 0, the
	// published key, for records and payloads that are stored or sent; a
	// random one when the caller computes both sides it compares.
	MixKey uint64
}

func (o Options) engine() Engine {
	if o.Engine == nil {
		return Fast{}
	}
	return o.Engine
}

// NewPlan lays out the work of one rank for the selected requests (all
// when ids is empty) and the record its results fill. The output slots
// follow the record: its requests and their groups in order, each group's
// values position by position and, within a position, by replica key
// (RankRecord fills the record).
//
// The caches of a group that share a replica key read the same blocks
// into the same slots, so their tasks share one Rows slice: the plan
// holds one row per (group, replica key, block position read), whatever
// the number of layers. A block read at the same position with the same
// valid tokens by several requests (a shared prefix) adds the same values
// (request numbering depends only on the position), so it is read once:
// the later requests' slots are listed in ckplan.Plan.Copies instead of getting
// rows. A plan that would still read more than maxReadFactor times the
// cell bytes its caches hold is refused with a *parse.Error (parse.Dump) naming
// the dump (docs/spec.md §10).
func NewPlan(d *layout.Dump, ids []string) (*ckplan.Plan, *wire.Record, error) {
	m := d.Manifest
	rec := &wire.Record{
		Format: wire.RecordFormat, Source: d.Path, Model: m.Model.Name,
		TPRank: m.Parallel.TPRank, TPSize: m.Parallel.TPSize,
		PPRank: m.Parallel.PPRank, PPSize: m.Parallel.PPSize,
		SkippedGroups: map[string]string{},
	}
	for _, g := range d.Groups {
		fp, flat := Fingerprints(g)
		rec.Groups = append(rec.Groups, wire.RecordGroup{
			ID: g.Group.ID, Kind: g.Group.Kind, BlockSize: g.Group.BlockSize,
			Fingerprint: layout.Hex64(fp), FingerprintFlat: layout.Hex64(flat),
			Layers: len(g.Layers), SplitLess: splitLess(g),
		})
		if g.Skip != "" {
			rec.SkippedGroups[strconv.Itoa(g.Group.ID)] = g.Skip
		}
	}
	plan := &ckplan.Plan{Dump: d}
	groups := make([]*planGroup, len(d.Groups))
	for gi, g := range d.Groups {
		if g.Skip != "" || len(g.Caches) == 0 {
			continue
		}
		gr := &planGroup{first: make([]firstRead, m.NumBlocks)}
		for _, c := range g.Caches {
			if !slices.Contains(gr.keys, c.Key()) {
				gr.keys = append(gr.keys, c.Key())
			}
		}
		slices.SortFunc(gr.keys, func(a, b layout.ReplicaKey) int {
			return cmp.Or(cmp.Compare(a.Replicas, b.Replicas), cmp.Compare(a.Index, b.Index))
		})
		gr.rows = make([][]ckplan.Row, len(gr.keys))
		groups[gi] = gr
	}
	n := len(m.Requests)
	if len(ids) > 0 {
		n = len(ids)
	}
	rec.Requests = make([]wire.RecordRequest, 0, n)
	for ri := range m.Requests {
		r := &m.Requests[ri]
		if len(ids) > 0 && !slices.Contains(ids, r.ID) {
			continue
		}
		rr := wire.RecordRequest{ID: r.ID, ProducerID: r.ProducerID, NumTokens: r.NumTokens, NumLocalComputedTokens: r.NumLocalComputedTokens,
			Groups: make([]wire.RecordRequestGroup, 0, len(d.Groups))}
		for gi, g := range d.Groups {
			gr := groups[gi]
			if gr == nil {
				continue
			}
			span, status, err := blockspan.Of(r, g.Group)
			if err != nil {
				return nil, nil, &parse.Error{Format: parse.Dump, File: d.Path, Field: fmt.Sprintf("requests[%d]", ri), Err: err}
			}
			if status != blockspan.OK {
				continue
			}
			K := len(gr.keys)
			rg := wire.RecordRequestGroup{ID: g.Group.ID, Start: span.Start, ReplicaKeys: make([][2]int, K)}
			for k, key := range gr.keys {
				rg.ReplicaKeys[k] = [2]int{key.Replicas, key.Index}
			}
			// Output slot of (position i, key k): base + i*K + k.
			base := plan.Outputs
			plan.Outputs += len(span.Blocks) * K
			rg.Values = wire.NewValues(len(span.Blocks), K)
			S := g.Group.BlockSize
			for i, b := range span.Blocks {
				pos := span.Start + i
				valid := blockspan.ValidTokens(r.NumTokens, pos, S)
				if g.Group.Kind == layout.KindMamba {
					valid = 1 // a state row is one "token": its whole state
				}
				if valid == 0 {
					continue
				}
				slot := base + i*K
				if first, ok := gr.read(b, pos, valid, slot); ok {
					plan.Copies = append(plan.Copies, ckplan.SlotCopy{Dst: slot, Src: first, N: K})
					continue
				}
				for k := range K {
					gr.rows[k] = append(gr.rows[k], ckplan.Row{Block: b, FirstToken: int64(pos) * int64(S), Valid: valid, Out: slot + k})
				}
			}
			rr.Groups = append(rr.Groups, rg)
		}
		rec.Requests = append(rec.Requests, rr)
	}
	for gi, g := range d.Groups {
		gr := groups[gi]
		if gr == nil {
			continue
		}
		for _, c := range g.Caches {
			rows := gr.rows[slices.Index(gr.keys, c.Key())]
			if len(rows) > 0 {
				plan.Tasks = append(plan.Tasks, ckplan.Task{Cache: c, Rows: rows})
			}
		}
	}
	if err := checkReads(plan); err != nil {
		return nil, nil, err
	}
	return plan, rec, nil
}

// planGroup is what NewPlan gathers for one group of a rank: its replica
// keys (sorted), the rows of each key (shared by the key's caches) and
// the first slot of each (position, block, valid tokens) read.
type planGroup struct {
	keys []layout.ReplicaKey
	rows [][]ckplan.Row
	// first[b] is block b's first read; its reads at other positions or
	// token counts are in more.
	first []firstRead
	more  map[[3]int]int
}

// firstRead is a block's first read: its position, valid tokens and
// output slot plus one (0: none yet).
type firstRead struct{ pos, valid, slot int32 }

// read returns the first slot of an earlier read of block b at position
// pos with valid tokens, or records slot as that read's and returns
// false.
func (g *planGroup) read(b, pos, valid, slot int) (int, bool) {
	f := &g.first[b]
	switch {
	case f.slot == 0:
		*f = firstRead{int32(pos), int32(valid), int32(slot + 1)}
		return 0, false
	case int(f.pos) == pos && int(f.valid) == valid:
		return int(f.slot) - 1, true
	}
	k := [3]int{pos, b, valid}
	if first, ok := g.more[k]; ok {
		return first, true
	}
	if g.more == nil {
		g.more = map[[3]int]int{}
	}
	g.more[k] = slot
	return 0, false
}

// maxReadFactor caps the work one manifest can ask for (docs/spec.md
// §10): a rank's plan may read at most this many times the cell bytes of
// its checksummed caches (num_blocks blocks each), once shared prefix
// blocks are read once. A block read at the same position by any number
// of requests counts once; only a block read at many different positions
// (or with many different token counts) can reach the cap, which no
// prefix cache does.
const maxReadFactor = 4

// readCapError is a manifest whose block tables would make kvaudit read
// more than maxReadFactor times the cells its caches hold (NewPlan wraps
// it in a *parse.Error (parse.Dump) naming the manifest's file and its
// "requests").
type readCapError struct {
	// Read is the cell bytes the plan would read; Held the cell bytes of
	// the caches.
	Read, Held int64
}

func (e *readCapError) Error() string {
	return fmt.Sprintf("the block tables ask kvaudit to read %d bytes of cells, more than %d times the %d bytes its caches hold: blocks read at many different positions (the cap of docs/spec.md §10)", e.Read, maxReadFactor, e.Held)
}

// manifestFile names the file holding a dump's manifest: the
// .safetensors file, or the directory's manifest.json.
func manifestFile(d *layout.Dump) string {
	if strings.HasSuffix(d.Path, ".safetensors") {
		return d.Path
	}
	return filepath.Join(d.Path, "manifest.json")
}

// checkReads refuses a plan that reads more than maxReadFactor times the
// cell bytes of its caches.
func checkReads(p *ckplan.Plan) error {
	var held int64
	for _, t := range p.Tasks {
		held += int64(p.Dump.Manifest.NumBlocks) * t.Cache.Cells.BlockBytes()
	}
	if read := p.Bytes(); read > maxReadFactor*held {
		return &parse.Error{Format: parse.Dump, File: manifestFile(p.Dump), Field: "requests", Err: &readCapError{Read: read, Held: held}}
	}
	return nil
}

// splitLess says whether a group is a state group whose layers have no TP
// split.
func splitLess(g *layout.GroupView) bool {
	for _, l := range g.Layers {
		if l.States != nil && l.Layer.States[0].Split == nil {
			return true
		}
	}
	return false
}

// fillRecord copies an engine's output into the record NewPlan returned.
func fillRecord(rec *wire.Record, out []uint64) {
	slot := 0
	for ri := range rec.Requests {
		for gi := range rec.Requests[ri].Groups {
			for _, vals := range rec.Requests[ri].Groups[gi].Values.All() {
				for k := range vals {
					vals[k] = out[slot]
					slot++
				}
			}
		}
	}
}

// RankRecord computes one rank's record.
func RankRecord(ctx context.Context, d *layout.Dump, opts Options) (*wire.Record, error) {
	plan, rec, err := NewPlan(d, opts.Requests)
	if err != nil {
		return nil, err
	}
	plan.Progress = opts.Progress
	eng := opts.engine()
	// One pass gives both numberings (docs/spec.md §1) and the mix check
	// (§14), from the engines that can.
	plan.Slopes = engineSlopes(eng)
	plan.Mix = EngineMixes(eng)
	plan.MixKey = opts.MixKey
	out := make([]uint64, plan.Outputs)
	if plan.Slopes || plan.Mix {
		out = make([]uint64, 3*plan.Outputs)
	}
	if err := eng.Run(ctx, plan, out); err != nil {
		return nil, err
	}
	plan.Spread(out)
	fillAll(rec, plan, out)
	if !plan.Slopes && opts.BlockValues {
		bp := blockRows(plan)
		bout := make([]uint64, bp.Outputs)
		if err := eng.Run(ctx, bp, bout); err != nil {
			return nil, err
		}
		bp.Spread(bout)
		fillValues(rec, func(g *wire.RecordRequestGroup) *wire.Values { return &g.ValuesBlock }, func(slot int, _ int64) uint64 { return bout[slot] })
	}
	return rec, nil
}

// fillAll fills the record NewPlan returned from the output of a run of
// its plan (spread applied): the values, the mix check with p.Mix and the
// block-numbered values with p.Slopes.
func fillAll(rec *wire.Record, p *ckplan.Plan, out []uint64) {
	fillRecord(rec, out[:p.Outputs])
	if p.Mix {
		fillValues(rec, func(g *wire.RecordRequestGroup) *wire.Values { return &g.Mix }, func(slot int, _ int64) uint64 {
			return out[2*p.Outputs+slot]
		})
	}
	if p.Slopes {
		fillValues(rec, func(g *wire.RecordRequestGroup) *wire.Values { return &g.ValuesBlock }, func(slot int, first int64) uint64 {
			return blockNumbered(out[slot], out[p.Outputs+slot], first)
		})
	}
}

// fillValues sets every group's list field(g) (ValuesBlock, Mix), slot by
// slot in fillRecord's order, from value(slot, first token of the slot's
// block position).
func fillValues(rec *wire.Record, field func(g *wire.RecordRequestGroup) *wire.Values, value func(slot int, first int64) uint64) {
	sizes := map[int]int{}
	for _, g := range rec.Groups {
		sizes[g.ID] = g.BlockSize
	}
	slot := 0
	for ri := range rec.Requests {
		for gi := range rec.Requests[ri].Groups {
			g := &rec.Requests[ri].Groups[gi]
			f := field(g)
			*f = wire.NewValues(g.Values.Len(), g.Values.Keys())
			for i, vals := range f.All() {
				first := int64(g.Start+i) * int64(sizes[g.ID])
				for k := range vals {
					vals[k] = value(slot, first)
					slot++
				}
			}
		}
	}
}

// Records computes the record of every dump. With the cpu engine (Fast)
// the ranks are checksummed in one pass, their chunks shared among the
// threads.
func Records(ctx context.Context, dumps []*layout.Dump, opts Options) ([]*wire.Record, error) {
	if f, ok := opts.engine().(Fast); ok && len(dumps) > 1 {
		return f.records(ctx, dumps, opts)
	}
	recs := make([]*wire.Record, 0, len(dumps))
	for _, d := range dumps {
		rec, err := RankRecord(ctx, d, opts)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// records is Records for the cpu engine: every rank's plan in one run.
// The ranks' plans are laid out, and their records filled, on up to
// GOMAXPROCS goroutines (each is its own work: a TP 8 side has eight).
func (f Fast) records(ctx context.Context, dumps []*layout.Dump, opts Options) ([]*wire.Record, error) {
	plans := make([]*ckplan.Plan, len(dumps))
	recs := make([]*wire.Record, len(dumps))
	outs := make([][]uint64, len(dumps))
	err := parallel.Each(len(dumps), func(i int) error {
		var err error
		if plans[i], recs[i], err = NewPlan(dumps[i], opts.Requests); err != nil {
			return err
		}
		plans[i].Progress, plans[i].Slopes, plans[i].Mix, plans[i].MixKey = opts.Progress, f.Slopes(), f.Mixes(), opts.MixKey
		outs[i] = make([]uint64, 3*plans[i].Outputs)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := f.runPlans(ctx, plans, outs); err != nil {
		return nil, err
	}
	parallel.Each(len(plans), func(i int) error {
		plans[i].Spread(outs[i])
		fillAll(recs[i], plans[i], outs[i])
		return nil
	})
	return recs, nil
}
