// Package ckplan is the work of one rank that a checksum engine runs: every
// (cache, block) to checksum and where its sum goes (checksum.NewPlan
// builds it; the engines of checksum, internal/kernels and kvaudit-cuda
// run it). It is internal: an auditing program calls checksum.Records.
package ckplan

import "github.com/kvaudit/kvaudit/layout"

// Row is one block that a cache contributes to: block id Block holds the
// request's tokens FirstToken .. FirstToken+Valid-1 (Valid > 0), and the
// cache's part of the block checksum is added to output slot Out.
type Row struct {
	Block      int
	FirstToken int64
	Valid      int
	Out        int
}

// Task is the rows one cache contributes to.
type Task struct {
	Cache *layout.LayerView
	Rows  []Row
}

// Plan is the work of one rank: every (cache, block) to checksum and where
// its sum goes.
type Plan struct {
	Dump    *layout.Dump
	Tasks   []Task
	Outputs int
	// Slopes asks a slopeEngine for each output slot's slope D = sum over
	// the slot's slices of m*P*A (A the slice's plain piece sum) in
	// out[Outputs+slot], in the same pass: c_block = c_request - 2*f*D for
	// the block's first token f (docs/spec.md §1). out then holds
	// 2*Outputs values.
	Slopes bool
	// Mix asks a mixEngine for each output slot's mix check (docs/spec.md
	// §14) in out[2*Outputs+slot], in the same pass. out then holds
	// 3*Outputs values (the slopes' third unused without Slopes).
	Mix bool
	// MixKey is the run key of the mix check (docs/spec.md §14; 0, the
	// published key, for what is stored or sent): every engine that fills
	// Mix keys each slice's words with checksum.MixKeyOf(MixKey, s, j).
	MixKey uint64
	// Progress, when set, is called with the cell bytes done since its
	// last call. It may be called from several goroutines at once.
	Progress func(bytes int64)
	// Copies are output slots that no row fills: a block that several
	// requests read at the same position is read once (checksum.NewPlan),
	// and Spread copies its values to the other requests' slots once an
	// engine has run.
	Copies []SlotCopy
}

// SlotCopy copies the N output slots from Src to the N from Dst.
type SlotCopy struct{ Dst, Src, N int }

// Spread applies p.Copies to an engine's output, and to the slopes in
// out[p.Outputs:] and the mix checks in out[2*p.Outputs:] when out holds
// them: a shared block's mix check is copied as its values are (both
// depend only on the block's bytes, position and valid tokens).
func (p *Plan) Spread(out []uint64) {
	for part := range 3 {
		base := part * p.Outputs
		if base+p.Outputs > len(out) {
			break
		}
		for _, c := range p.Copies {
			copy(out[base+c.Dst:base+c.Dst+c.N], out[base+c.Src:base+c.Src+c.N])
		}
	}
}

// Bytes returns the cell bytes the plan reads (a measure of work).
func (p *Plan) Bytes() int64 {
	var n int64
	for _, t := range p.Tasks {
		for _, r := range t.Rows {
			n += int64(r.Valid*t.Cache.Cells.Heads) * int64(t.Cache.Cells.CellBytes)
		}
	}
	return n
}
