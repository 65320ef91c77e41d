//go:build cuda

package main

// These tests run the real kernel: they need a CUDA device. Without one,
// gorgonia.org/cu's init ends the test binary before any test runs, so CI
// only compiles them (go test -c -tags cuda); internal/kernels/gpucheck.sh runs
// them on a GPU machine.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"gorgonia.org/cu"
	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/kerneltest"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

var testGPU *gpu

// tb is what *testing.T and *rapid.T offer.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func TestMain(m *testing.M) {
	runtime.LockOSThread()
	g, err := newGPU(defaultDevice(), 8<<20)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvaudit-cuda tests:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "kvaudit-cuda tests on %s\n", g.Hello())
	testGPU = g
	code := m.Run()
	g.close()
	os.Exit(code)
}

// use makes the GPU's context current on the test's goroutine's thread.
func use(t testing.TB) *gpu {
	t.Helper()
	runtime.LockOSThread()
	if err := cu.SetCurrentContext(testGPU.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runtime.UnlockOSThread)
	return testGPU
}

// variant is one way of running a plan on the GPU.
type variant struct {
	name      string
	mode      kernels.Mode
	inPlace   bool  // the caches' bytes are copied to device memory first and read there, as cuda_ipc tensors
	slotBytes int64 // bounds the batches; 0 keeps the default
}

var variants = []variant{
	{name: "staged"},
	{name: "staged-scalar", mode: kernels.ModeScalar},
	{name: "staged-gather", mode: kernels.ModeGather},
	{name: "staged-small-batches", slotBytes: 1 << 20},
	{name: "in-place", inPlace: true},
	{name: "in-place-gather", inPlace: true, mode: kernels.ModeGather},
}

// runOn runs plan on the GPU as v says and returns the outputs.
func runOn(t tb, g *gpu, v variant, plan *ckplan.Plan) []uint64 {
	t.Helper()
	defer func(mode kernels.Mode, slot int64) { g.mode, g.slotBytes = mode, slot }(g.mode, g.slotBytes)
	g.mode = v.mode
	if v.slotBytes > 0 {
		g.slotBytes = v.slotBytes
	}
	if v.inPlace {
		for _, task := range plan.Tasks {
			restore := toDevice(t, g, task.Cache)
			defer restore()
		}
	}
	out := make([]uint64, plan.Outputs)
	if err := g.Run(context.Background(), plan, out); err != nil {
		t.Fatalf("%s: %v", v.name, err)
	}
	return out
}

// toDevice copies a cache's mapped bytes to device memory and makes it a
// device tensor there, registered as if opened from an IPC handle; the
// returned function undoes it.
func toDevice(t tb, g *gpu, c *layout.LayerView) func() {
	t.Helper()
	if c.Cells.Device != nil {
		return func() {}
	}
	data := c.Cells.Data
	p, err := cu.MemAlloc(int64(len(data)) + 16)
	if err != nil {
		t.Fatal(err)
	}
	// Keep the host copy's alignment modulo 16 (FileOffset), so the
	// in-place variant meets misaligned tensors too.
	off := c.Cells.FileOffset % 16
	if err := cu.MemcpyHtoD(p+cu.DevicePtr(off), unsafe.Pointer(&data[0]), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	handle := fmt.Sprintf("test:%x", uintptr(p))
	g.ipc[handle] = mapping{ptr: p, size: int64(len(data)) + 16}
	c.Cells.Device = &layout.DeviceTensor{IPCHandle: handle, Offset: off, Dtype: layout.Dtype{Name: "U8", Bits: 8},
		Shape: []int64{int64(len(data))}, Strides: []int64{1}}
	c.Cells.Data = nil
	return func() {
		c.Cells.Device, c.Cells.Data = nil, data
		delete(g.ipc, handle)
		cu.MemFree(p)
	}
}

// TestDeviceSynth: the GPU equals the reference engine on every rank of
// every synth configuration (presets, layouts, TP, PP, kernel-block
// splits, formats), in every variant.
func TestDeviceSynth(t *testing.T) {
	g := use(t)
	for _, cfg := range kerneltest.SynthConfigs() {
		paths, err := synth.Write(t.TempDir(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			d, err := layout.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			plan, _, err := checksum.NewPlan(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]uint64, plan.Outputs)
			if err := (checksum.Reference{}).Run(context.Background(), plan, want); err != nil {
				t.Fatal(err)
			}
			for _, v := range variants {
				if got := runOn(t, g, v, plan); !slices.Equal(got, want) {
					t.Errorf("%s %s %s:\n got %x\nwant %x", kerneltest.Name(cfg), p, v.name, got, want)
				}
			}
			d.Close()
		}
	}
}

// TestDeviceOddCases: the hand-built geometries, every variant.
func TestDeviceOddCases(t *testing.T) {
	g := use(t)
	for _, c := range kerneltest.OddCases() {
		want := c.Reference()
		for _, v := range variants {
			if got := runOn(t, g, v, c.Plan()); !slices.Equal(got, want) {
				t.Errorf("%s %s:\n got %x\nwant %x", c.Name, v.name, got, want)
			}
		}
	}
}

// TestDeviceRandomGeometry: random geometries, rows and variants.
func TestDeviceRandomGeometry(t *testing.T) {
	g := use(t)
	rapid.Check(t, func(rt *rapid.T) {
		c := kerneltest.Random(rt)
		v := variants[rapid.IntRange(0, len(variants)-1).Draw(rt, "variant")]
		if got, want := runOn(rt, g, v, c.Plan()), c.Reference(); !slices.Equal(got, want) {
			rt.Fatalf("%s:\n got %x\nwant %x", v.name, got, want)
		}
	})
}

// TestDeviceModelAgree: the GPU and the Go model of its decomposition give
// the same outputs (the model is what the kernel's index arithmetic was
// proven on).
func TestDeviceModelAgree(t *testing.T) {
	g := use(t)
	for _, c := range kerneltest.OddCases() {
		want := make([]uint64, c.Outputs)
		if err := (kernels.Model{}).Run(context.Background(), c.Plan(), want); err != nil {
			t.Fatal(err)
		}
		if got := runOn(t, g, variants[0], c.Plan()); !slices.Equal(got, want) {
			t.Errorf("%s:\n gpu   %x\n model %x", c.Name, got, want)
		}
	}
}

// TestDeviceBench runs a small benchmark, which checks sampled blocks on
// the host.
func TestDeviceBench(t *testing.T) {
	g := use(t)
	res, err := g.Bench(context.Background(), kernels.BenchRequest{Bytes: 64 << 20, Reps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.VerifiedRows != 4 {
		t.Fatalf("%+v", res)
	}
	var b bytes.Buffer
	res.WriteText(&b)
	t.Log("\n" + b.String())
}

// TestDeviceServe speaks the protocol with the GPU behind it.
func TestDeviceServe(t *testing.T) {
	g := use(t)
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layout: "hnd", TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	d, err := layout.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	plan, _, err := checksum.NewPlan(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]uint64, plan.Outputs)
	if err := (checksum.Reference{}).Run(context.Background(), plan, want); err != nil {
		t.Fatal(err)
	}
	req := kernels.Request{ID: 1, Op: kernels.OpChecksum, Dump: paths[0], Outputs: plan.Outputs}
	for i, task := range plan.Tasks {
		tm := kernels.TaskMessage{Group: 0, Cache: i, Layer: task.Cache.Layer.Name, Geometry: kernels.Signature(task.Cache)}
		for _, r := range task.Rows {
			tm.Rows = append(tm.Rows, [4]int64{int64(r.Block), r.FirstToken, int64(r.Valid), int64(r.Out)})
		}
		req.Tasks = append(req.Tasks, tm)
	}
	line, _ := json.Marshal(req)
	var out bytes.Buffer
	if err := kernels.Serve(context.Background(), bytes.NewReader(append(line, '\n')), &out, g); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var resp kernels.Response
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &resp); err != nil || resp.Error != "" || len(resp.Out) != len(want) {
		t.Fatalf("%v: %s", err, lines[len(lines)-1])
	}
	for i := range want {
		if uint64(resp.Out[i]) != want[i] {
			t.Fatalf("out[%d] = %v, want %#x", i, resp.Out[i], want[i])
		}
	}
}
