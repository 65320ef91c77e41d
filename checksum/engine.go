package checksum

import (
	"context"
	"fmt"

	"github.com/kvaudit/kvaudit/layout"
)

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
	// Mix keys each slice's words with MixKeyOf(MixKey, s, j).
	MixKey uint64
	// Progress, when set, is called with the cell bytes done since its
	// last call. It may be called from several goroutines at once.
	Progress func(bytes int64)
	// Copies are output slots that no row fills: a block that several
	// requests read at the same position is read once (NewPlan), and
	// spread copies its values to the other requests' slots once an
	// engine has run.
	Copies []SlotCopy
}

// SlotCopy copies the N output slots from Src to the N from Dst.
type SlotCopy struct{ Dst, Src, N int }

// spread applies p.Copies to an engine's output, and to the slopes in
// out[p.Outputs:] and the mix checks in out[2*p.Outputs:] when out holds
// them: a shared block's mix check is copied as its values are (both
// depend only on the block's bytes, position and valid tokens).
func (p *Plan) spread(out []uint64) {
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

// Engine evaluates the definition of docs/spec.md §1.
type Engine interface {
	// Name is the engine's name ("cpu", "ref", "cuda").
	Name() string
	// Run adds, for every task and row, the cache's contribution to the
	// block checksum, sum over its heads of m*s, to out[row.Out] (mod
	// 2^64). len(out) >= p.Outputs (2*p.Outputs with p.Slopes, see
	// slopeEngine; 3*p.Outputs with p.Mix, see mixEngine). A fault on mapped memory (a file
	// truncated while mapped) is an error, not a crash.
	Run(ctx context.Context, p *Plan, out []uint64) error
}

// EngineCheck says what of an untrusted engine's results (the cuda
// runner's) the cpu engine recomputed, over every request it answered.
type EngineCheck struct {
	// Engine is the engine's name.
	Engine string
	// Requests are the requests (one plan of one rank each) it answered.
	Requests int
	// HostSlots are the output slots of rows in host memory it computed
	// (a slot's host-resident rows are summed apart from its rows in
	// device memory, so every one can be recomputed), and Checked those
	// the cpu engine recomputed: a sample of each request's (Sample), and
	// every slot it answered 0 for.
	HostSlots, Checked int
	// Sample is the slots sampled per request: "all", or a number, or
	// "default" (DefaultSample).
	Sample string
	// CatchProbability is, over the requests, the least probability that
	// a single wrong host slot was among those recomputed (1 with "all").
	CatchProbability float64
	// DeviceSlots are the parts of output slots summed from rows in device
	// memory (cuda_ipc), which only the engine can read: unchecked, unless
	// Trusted (--trust-runner) accepts them.
	DeviceSlots int
	Trusted     bool
}

// A CheckedEngine reports what of its results was checked.
type CheckedEngine interface {
	Engine
	Checked() EngineCheck
}

// DeviceMemoryError is a layer in device memory given to an engine that
// reads host memory only; the cuda engine reads it.
type DeviceMemoryError struct {
	Layer, Dump, Engine string
}

func (e *DeviceMemoryError) Error() string {
	return fmt.Sprintf("layer %q of %q lives in device memory (cuda_ipc): the %s engine cannot read it, the cuda engine can", e.Layer, e.Dump, e.Engine)
}

// deviceCheck fails for a plan that reads device memory, which only the
// CUDA engine can.
func deviceCheck(engine string, p *Plan) error {
	for _, t := range p.Tasks {
		if t.Cache.Cells.Device != nil {
			return &DeviceMemoryError{Layer: t.Cache.Layer.Name, Dump: p.Dump.Path, Engine: engine}
		}
	}
	return nil
}
