package kernels_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// liar serves the protocol with the model, then changes its answer.
type liar struct {
	kernels.ModelDevice
	lie func(out []uint64)
}

func (d liar) Run(ctx context.Context, p *ckplan.Plan, out []uint64) error {
	if err := d.ModelDevice.Run(ctx, p, out); err != nil {
		return err
	}
	d.lie(out)
	return nil
}

// longLine is the length of the line the "longline" runner sends: more
// than the 256 MB at which lines used to be cut, after being buffered.
const longLine = 600 << 20

// hostileRunner serves the runner modes of a hostile or broken runner:
// "zero" answers every checksum with 0, "plusone" adds 1 to every value,
// "onezero" answers 0 for one output only; "flood" answers a request
// with progress lines forever, "deaf" never reads it, "longline" answers
// with one line of longLine bytes. It reports whether mode was one.
func hostileRunner(mode string) bool {
	lies := map[string]func([]uint64){
		"zero": func(out []uint64) { clear(out) },
		"plusone": func(out []uint64) {
			for i := range out {
				out[i]++
			}
		},
		"onezero": func(out []uint64) { out[len(out)/2] = 0 },
		"slot0":   func(out []uint64) { out[0]++ },
	}
	hello := `{"kvaudit_cuda":1,"runner":"kvaudit-cuda","device":"hostile"}`
	switch mode {
	case "zero", "plusone", "onezero", "slot0":
		if err := kernels.Serve(context.Background(), os.Stdin, os.Stdout, liar{lie: lies[mode]}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "flood":
		fmt.Println(hello)
		bufio.NewReader(os.Stdin).ReadBytes('\n')
		w := bufio.NewWriter(os.Stdout)
		for {
			if _, err := w.WriteString("{\"id\":1,\"progress\":1}\n"); err != nil {
				os.Exit(1)
			}
		}
	case "eschello":
		// A hello of terminal controls: clear the screen, move the cursor
		// home, a carriage return over the line.
		fmt.Println(`{"kvaudit_cuda":1,"runner":"kvaudit-cuda\u001b]0;pwned\u0007","version":"1\r\u001b[1A","device":"GPU\u001b[2J\u001b[H\rfake","compute_capability":"9.0\u202e"}`)
		io.Copy(io.Discard, os.Stdin)
	case "deaf":
		fmt.Println(hello)
		time.Sleep(time.Minute)
	case "longline":
		fmt.Println(hello)
		bufio.NewReader(os.Stdin).ReadBytes('\n')
		chunk := []byte(`{"id":1,"done":true,"out":["` + strings.Repeat("0", 1<<20-29))
		for n := 0; n < longLine; n += len(chunk) {
			if _, err := os.Stdout.Write(chunk); err != nil {
				os.Exit(1)
			}
		}
		os.Stdout.WriteString("\"]}\n")
		bufio.NewReader(os.Stdin).ReadBytes('\n')
	default:
		return false
	}
	return true
}

// TestRunnerLiesAreCaught: a runner whose answers differ from the cpu
// engine's, whether it answers all zeros (both sides of a comparison
// would then agree), shifts every value (the random sample sees it) or
// zeroes one output of hundreds (every zero output is recomputed), fails
// the plan with an internal error naming it, and every later call; an
// honest runner passes the same check (TestRunnerMatchesReference).
func TestRunnerLiesAreCaught(t *testing.T) {
	plan := synthPlan(t, synth.Config{Preset: "llama", Requests: 8, Tokens: 600})
	if plan.Outputs <= 4*32 {
		t.Fatalf("a plan of %d outputs: want many more than the sample", plan.Outputs)
	}
	for _, mode := range []string{"zero", "plusone", "onezero"} {
		t.Run(mode, func(t *testing.T) {
			r, err := startFake(t, mode)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			err = r.Run(context.Background(), plan, make([]uint64, plan.Outputs))
			var ie *checksum.InternalError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), r.Path()) || !strings.Contains(err.Error(), "cannot be trusted") {
				t.Fatalf("got %v, want an internal error naming %s", err, r.Path())
			}
			if err2 := r.Run(context.Background(), plan, make([]uint64, plan.Outputs)); err2 == nil {
				t.Fatal("a runner caught lying ran another plan")
			}
		})
	}
}

// TestRunnerDeadline: a runner that answers a request with progress lines
// forever, or never reads it, is stopped at the request's deadline with
// a *TimeoutError that names the runner and the setting.
func TestRunnerDeadline(t *testing.T) {
	plan := synthPlan(t, synth.Config{Preset: "tiny"})
	for _, mode := range []string{"flood", "deaf"} {
		t.Run(mode, func(t *testing.T) {
			r, err := kernels.StartRunner(context.Background(), kernels.RunnerOptions{
				Path: os.Args[0], Env: append(os.Environ(), fakeEnv+"="+mode),
				RequestTimeout: 300 * time.Millisecond, TimeoutSetting: "--cuda-timeout",
			})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			done := make(chan error, 1)
			go func() { done <- r.Run(context.Background(), plan, make([]uint64, plan.Outputs)) }()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the request outlived its deadline by 30 s")
			}
			var te *kernels.TimeoutError
			if !errors.As(err, &te) || te.Timeout != 300*time.Millisecond || !strings.Contains(err.Error(), "--cuda-timeout") || !strings.Contains(err.Error(), r.Path()) {
				t.Fatalf("got %v, want a TimeoutError", err)
			}
		})
	}
}

// TestRunnerLongLine: a runner that answers with one line of 600 MB costs
// kvaudit a line's cap (a few MB for this plan), not the line: it is cut
// as it is read.
func TestRunnerLongLine(t *testing.T) {
	r, err := startFake(t, "longline")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	plan := synthPlan(t, synth.Config{Preset: "tiny"})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = r.Run(context.Background(), plan, make([]uint64, plan.Outputs))
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "broke the protocol") {
		t.Fatalf("got %v", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
		t.Fatalf("a %d MB line cost %d MB of allocations; want a few MB", longLine>>20, n>>20)
	}
}

// deviceLayer marks the first cache of the plan's dump as living in device
// memory (cuda_ipc) in kvaudit's view of it; the fake runner still reads
// its bytes from the file.
func deviceLayer(t *testing.T, p *ckplan.Plan) {
	t.Helper()
	c := p.Dump.Groups[0].Caches[0]
	c.Cells.Device = &layout.DeviceTensor{}
	t.Cleanup(func() { c.Cells.Device = nil })
}

// TestRunnerCheckDeviceLayer (issue 33, attack 5): one layer of a dump in
// device memory no longer exempts the slots it adds to: their
// host-resident rows are summed apart and recomputed, so a runner wrong
// in one slot's host rows is caught; the device rows' parts are counted
// as unchecked.
func TestRunnerCheckDeviceLayer(t *testing.T) {
	plan := synthPlan(t, synth.Config{Preset: "llama"})
	want := make([]uint64, plan.Outputs)
	if err := (checksum.Reference{}).Run(context.Background(), plan, want); err != nil {
		t.Fatal(err)
	}
	deviceLayer(t, plan)
	honest, err := startFake(t, "model")
	if err != nil {
		t.Fatal(err)
	}
	defer honest.Close()
	got := make([]uint64, plan.Outputs)
	if err := honest.Run(context.Background(), plan, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("host and device parts summed: %x, want %x", got, want)
	}
	c := honest.Checked()
	if c.Requests != 1 || c.HostSlots != plan.Outputs || c.Checked != plan.Outputs || c.DeviceSlots != plan.Outputs || c.CatchProbability != 1 || c.Trusted || c.Sample != "default" {
		t.Errorf("checked %+v; want every one of %d host slots recomputed, %d device parts unchecked", c, plan.Outputs, plan.Outputs)
	}
	liar, err := startFake(t, "slot0")
	if err != nil {
		t.Fatal(err)
	}
	defer liar.Close()
	err = liar.Run(context.Background(), plan, make([]uint64, plan.Outputs))
	var ie *checksum.InternalError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "cannot be trusted") {
		t.Fatalf("a runner wrong in slot 0's host rows: %v, want an internal error", err)
	}
}

// TestRunnerCheckSample: the default sample of a request of many slots is
// DefaultSampleMin slots or 1/DefaultSampleFraction of them, and says the
// probability it catches a single wrong slot; --runner-check all
// (CheckAll) recomputes every slot, and catches a runner wrong in one
// slot of hundreds every time; a number recomputes that many.
func TestRunnerCheckSample(t *testing.T) {
	// 1,008 slots, as many as 16 requests of 1,000 tokens in 16-token
	// blocks, but of one layer in 2-token blocks: the sample counts slots,
	// not bytes, and this plan is 1/32 of the bytes to write and hash.
	plan := synthPlan(t, synth.Config{Preset: "llama", Layers: 1, BlockSize: 2, Requests: 16, Tokens: 126})
	n := plan.Outputs
	if n < 8*kernels.DefaultSampleMin {
		t.Fatalf("a plan of %d outputs: want more than %d", n, 8*kernels.DefaultSampleMin)
	}
	start := func(mode string, check int) *kernels.Runner {
		t.Helper()
		r, err := kernels.StartRunner(context.Background(), kernels.RunnerOptions{
			Path: os.Args[0], Env: append(os.Environ(), fakeEnv+"="+mode), StartTimeout: 20 * time.Second, Check: check,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	wantSample := (n + kernels.DefaultSampleFraction - 1) / kernels.DefaultSampleFraction
	for _, c := range []struct {
		check   int
		sample  string
		checked int
	}{
		{0, "default", wantSample},
		{kernels.CheckAll, "all", n},
		{100, "100", 100},
	} {
		r := start("model", c.check)
		if err := r.Run(context.Background(), plan, make([]uint64, n)); err != nil {
			t.Fatal(err)
		}
		got := r.Checked()
		if got.Sample != c.sample || got.HostSlots != n || got.Checked != c.checked || got.DeviceSlots != 0 ||
			math.Abs(got.CatchProbability-float64(c.checked)/float64(n)) > 1e-12 {
			t.Errorf("check %d: %+v; want %d of %d slots recomputed, catching one wrong slot with probability %.4f", c.check, got, c.checked, n, float64(c.checked)/float64(n))
		}
	}
	for range 3 {
		err := start("slot0", kernels.CheckAll).Run(context.Background(), plan, make([]uint64, n))
		if err == nil || !strings.Contains(err.Error(), "cannot be trusted") {
			t.Fatalf("--runner-check all: a runner wrong in 1 slot of %d passed: %v", n, err)
		}
	}
}

// TestRunnerHelloEscaped: the strings of a runner's hello reach kvaudit's
// output escaped: no escape sequence, carriage return, bell or bidi mark.
func TestRunnerHelloEscaped(t *testing.T) {
	r, err := startFake(t, "eschello")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := r.Hello()
	for _, s := range []string{h.String(), h.Runner, h.Version, h.Device, h.ComputeCapability} {
		if strings.ContainsAny(s, "\x1b\r\a\u202e") {
			t.Errorf("hello string %q holds controls", s)
		}
	}
	if !strings.Contains(h.Device, "GPU") || !strings.Contains(h.Device, "fake") {
		t.Errorf("device %q: the text is kept, escaped", h.Device)
	}
}
