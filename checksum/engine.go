package checksum

import (
	"context"
	"fmt"

	"github.com/kvaudit/kvaudit/internal/ckplan"
)

// Engine evaluates the definition of docs/spec.md §1.
type Engine interface {
	// Name is the engine's name ("cpu", "ref", "cuda").
	Name() string
	// Run adds, for every task and row, the cache's contribution to the
	// block checksum, sum over its heads of m*s, to out[row.Out] (mod
	// 2^64). len(out) >= p.Outputs (2*p.Outputs with p.Slopes, see
	// slopeEngine; 3*p.Outputs with p.Mix, see mixEngine). A fault on mapped memory (a file
	// truncated while mapped) is an error, not a crash.
	Run(ctx context.Context, p *ckplan.Plan, out []uint64) error
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
func deviceCheck(engine string, p *ckplan.Plan) error {
	for _, t := range p.Tasks {
		if t.Cache.Cells.Device != nil {
			return &DeviceMemoryError{Layer: t.Cache.Layer.Name, Dump: p.Dump.Path, Engine: engine}
		}
	}
	return nil
}
