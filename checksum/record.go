package checksum

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

// Options control Compute and Records.
type Options struct {
	// Engine evaluates the definition; nil means Fast{}.
	Engine Engine
	// Requests restricts the work to these request ids; empty means all.
	// Compute fails for an id that no dump holds.
	Requests []string
	// Progress is passed to each plan (see Plan.Progress).
	Progress func(bytes int64)
	// BlockValues asks for block-numbered values (wire.RecordRequestGroup.
	// ValuesBlock) from every engine. A SlopeEngine gives them in the same
	// pass regardless; another engine then runs a block-numbered plan too.
	BlockValues bool
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
func NewPlan(d *layout.Dump, ids []string) (*Plan, *wire.Record, error) {
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
	plan := &Plan{Dump: d}
	taskOf := map[*layout.LayerView]int{}
	for ri := range m.Requests {
		r := &m.Requests[ri]
		if len(ids) > 0 && !slices.Contains(ids, r.ID) {
			continue
		}
		rr := wire.RecordRequest{ID: r.ID, ProducerID: r.ProducerID, NumTokens: r.NumTokens, NumLocalComputedTokens: r.NumLocalComputedTokens}
		for _, g := range d.Groups {
			if g.Skip != "" || len(g.Caches) == 0 {
				continue
			}
			span, status, err := layout.RequestSpan(r, g.Group)
			if err != nil {
				return nil, nil, &layout.DumpError{File: d.Path, Field: fmt.Sprintf("requests[%d]", ri), Err: err}
			}
			if status != layout.SpanOK {
				continue
			}
			var keys []layout.ReplicaKey
			for _, c := range g.Caches {
				if !slices.Contains(keys, c.Key()) {
					keys = append(keys, c.Key())
				}
			}
			slices.SortFunc(keys, func(a, b layout.ReplicaKey) int {
				return cmp.Or(cmp.Compare(a.Replicas, b.Replicas), cmp.Compare(a.Index, b.Index))
			})
			rg := wire.RecordRequestGroup{ID: g.Group.ID, Start: span.Start}
			for _, k := range keys {
				rg.ReplicaKeys = append(rg.ReplicaKeys, [2]int{k.Replicas, k.Index})
			}
			// Output slot of (position i, key k): base + i*len(keys) + k.
			base := plan.Outputs
			plan.Outputs += len(span.Blocks) * len(keys)
			rg.Values = wire.NewValues(len(span.Blocks), len(keys))
			S := g.Group.BlockSize
			for _, c := range g.Caches {
				k := slices.Index(keys, c.Key())
				ti, ok := taskOf[c]
				if !ok {
					ti = len(plan.Tasks)
					taskOf[c] = ti
					plan.Tasks = append(plan.Tasks, Task{Cache: c})
				}
				for i, b := range span.Blocks {
					pos := span.Start + i
					valid := layout.ValidTokens(r.NumTokens, pos, S)
					if c.State {
						valid = 1 // a state row is one "token": its whole state
					}
					if valid == 0 {
						continue
					}
					plan.Tasks[ti].Rows = append(plan.Tasks[ti].Rows, Row{
						Block: b, FirstToken: int64(pos) * int64(S), Valid: valid,
						Out: base + i*len(keys) + k,
					})
				}
			}
			rr.Groups = append(rr.Groups, rg)
		}
		rec.Requests = append(rec.Requests, rr)
	}
	return plan, rec, nil
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
	out := make([]uint64, plan.Outputs)
	if plan.Slopes || plan.Mix {
		out = make([]uint64, 3*plan.Outputs)
	}
	if err := eng.Run(ctx, plan, out); err != nil {
		return nil, err
	}
	fillRecord(rec, out[:plan.Outputs])
	if plan.Mix {
		fillValues(rec, func(g *wire.RecordRequestGroup) *wire.Values { return &g.Mix }, func(slot int, _ int64) uint64 {
			return out[2*plan.Outputs+slot]
		})
	}
	if plan.Slopes {
		fillValues(rec, func(g *wire.RecordRequestGroup) *wire.Values { return &g.ValuesBlock }, func(slot int, first int64) uint64 {
			return BlockNumbered(out[slot], out[plan.Outputs+slot], first)
		})
		return rec, nil
	}
	if opts.BlockValues {
		bp := plan.BlockRows()
		bout := make([]uint64, bp.Outputs)
		if err := eng.Run(ctx, bp, bout); err != nil {
			return nil, err
		}
		fillValues(rec, func(g *wire.RecordRequestGroup) *wire.Values { return &g.ValuesBlock }, func(slot int, _ int64) uint64 { return bout[slot] })
	}
	return rec, nil
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

// Records computes the record of every dump.
func Records(ctx context.Context, dumps []*layout.Dump, opts Options) ([]*wire.Record, error) {
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
