package kernels

import (
	"fmt"

	"github.com/kvaudit/kvaudit/internal/termtext"

	"github.com/kvaudit/kvaudit/layout"
)

// The runner protocol, version 1.
//
// kvaudit starts `kvaudit-cuda serve` and talks to it over the runner's
// stdin and stdout: one JSON object per line ('\n'-terminated; kvaudit
// cuts a runner's line at 1 MiB plus 64 bytes per output slot of the
// request), uint64 values as "0x"-prefixed 16-digit hex strings
// (docs/spec.md §8). Each request must be answered within kvaudit's
// deadline (RunnerOptions.RequestTimeout), and kvaudit checks a sample of
// every answer with the cpu engine. The runner writes nothing else to stdout; its stderr is for
// people (kvaudit shows its end when the runner fails).
//
//  1. Handshake. Once it holds a CUDA context on its device and has loaded
//     the kernels, the runner writes its Hello:
//
//     {"kvaudit_cuda":1,"runner":"kvaudit-cuda","version":"...",
//     "device":"NVIDIA H200","device_index":0,"compute_capability":"9.0",
//     "multiprocessors":132,"memory_bytes":150754820096,
//     "driver_version":12080}
//
//     kvaudit_cuda is the protocol version: kvaudit refuses any other.
//     Another first line, or an exit before the Hello, means the runner
//     failed to start: gorgonia.org/cu writes `Error in initialization
//     ... NoDevice` to stdout and exits 1 on a machine without a driver
//     or a GPU. kvaudit reports those lines and the runner's stderr.
//
//  2. Requests, one at a time, each with an id the answers repeat:
//
//     {"id":1,"op":"checksum","dump":"/abs/out/producer/rank-0-0.safetensors",
//     "outputs":12,"tasks":[{"group":0,"cache":0,
//     "layer":"model.layers.0.self_attn.attn","geometry":"...",
//     "rows":[[3,0,16,0],[1,16,16,1]]}]}
//
//     The runner opens the dump itself (layout.Open: mapped files, or the
//     device memory of cuda_ipc sources, which it opens with
//     cuIpcOpenMemHandle) and keeps it open for later requests. It finds
//     each task's cache by group id and index in the group's caches
//     (layout.GroupView.Caches; a state layer has several), checks its
//     layer name, and refuses one whose geometry (Signature) differs from
//     the one kvaudit computed: a kvaudit and a kvaudit-cuda of different
//     releases. A row is [block id, request
//     position of the block's first token, valid tokens, output slot]
//     (ckplan.Row). The runner answers with zero or more progress lines,
//     {"id":1,"progress":1048576} (cell bytes done since the last one),
//     then one final line: {"id":1,"done":true,"out":["0x...", ...]}
//     (outputs values: out[k] is the sum of the rows whose slot is k), or
//     {"id":1,"done":true,"error":"..."}.
//
//     {"id":2,"op":"bench","bench":{"bytes":4294967296,"reps":5}} times the
//     kernel on a cache the runner allocates and fills on the device,
//     beside a plain read and a device-to-device copy of the same bytes:
//     {"id":2,"done":true,"bench":{...BenchResult...}}.
//
//  3. kvaudit closes the runner's stdin; the runner releases the device
//     and exits 0.

// ProtocolVersion is the version of the runner protocol.
const ProtocolVersion = 1

// Hello is the runner's first line.
type Hello struct {
	Protocol          int    `json:"kvaudit_cuda"`
	Runner            string `json:"runner"`
	Version           string `json:"version"`
	Device            string `json:"device"`
	DeviceIndex       int    `json:"device_index"`
	ComputeCapability string `json:"compute_capability,omitempty"`
	Multiprocessors   int    `json:"multiprocessors,omitempty"`
	MemoryBytes       int64  `json:"memory_bytes,omitempty"`
	// DriverVersion is the CUDA driver API version (cuDriverGetVersion:
	// 12080 is 12.8).
	DriverVersion int `json:"driver_version,omitempty"`
}

// escaped returns h with every string the runner sent escaped
// (internal/termtext): a hostile runner's hello cannot move the cursor,
// clear the screen or rewrite a line where kvaudit shows it.
func (h Hello) escaped() Hello {
	for _, f := range []*string{&h.Runner, &h.Version, &h.Device, &h.ComputeCapability} {
		*f = termtext.Escape(*f)
	}
	return h
}

// String describes the device in one line.
func (h Hello) String() string {
	s := fmt.Sprintf("%s (device %d", h.Device, h.DeviceIndex)
	if h.ComputeCapability != "" {
		s += ", compute capability " + h.ComputeCapability
	}
	if h.DriverVersion > 0 {
		s += fmt.Sprintf(", CUDA driver %d.%d", h.DriverVersion/1000, h.DriverVersion%1000/10)
	}
	return s + ")"
}

// Request is a line kvaudit sends.
type Request struct {
	ID      int64         `json:"id"`
	Op      string        `json:"op"`
	Dump    string        `json:"dump,omitempty"`
	Outputs int           `json:"outputs,omitempty"`
	Tasks   []TaskMessage `json:"tasks,omitempty"`
	Bench   *BenchRequest `json:"bench,omitempty"`
}

// Ops of requests.
const (
	OpChecksum = "checksum"
	OpBench    = "bench"
)

// TaskMessage is one cache's rows.
type TaskMessage struct {
	Group    int        `json:"group"`
	Cache    int        `json:"cache"`
	Layer    string     `json:"layer"`
	Geometry string     `json:"geometry"`
	Rows     [][4]int64 `json:"rows"`
}

// Response is a line the runner sends.
type Response struct {
	ID       int64          `json:"id"`
	Progress int64          `json:"progress,omitempty"`
	Done     bool           `json:"done,omitempty"`
	Out      []layout.Hex64 `json:"out,omitempty"`
	Bench    *BenchResult   `json:"bench,omitempty"`
	Error    string         `json:"error,omitempty"`
}

// maxOutputs bounds the output slots of one request.
const maxOutputs = 1 << 28

// Signature describes what the checksum of a cache depends on: its layer
// number, heads, factors, cells and strides. kvaudit and the runner compute
// it from their own views of a dump and must agree.
func Signature(c *layout.LayerView) string {
	v := &c.Cells
	var m0, m1 uint64
	if c.Heads > 0 {
		m0, m1 = c.Factor(c.HeadBase), c.Factor(c.HeadBase+c.Heads-1)
	}
	return fmt.Sprintf("layer %d heads %d+%d factors %#x..%#x pieces %dx%d cell %d rows %dx%d strides %d/%d/%d runs %v",
		c.Number, c.HeadBase, c.Heads, m0, m1, c.Pieces, v.Width(), v.CellBytes,
		v.KernelBlocks, v.KernelTokens, v.RowStride, v.TokenStride, v.HeadStride, v.Runs)
}
