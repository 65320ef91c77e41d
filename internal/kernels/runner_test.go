package kernels_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/kerneltest"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/internal/testlong"
	"github.com/kvaudit/kvaudit/layout"
)

// fakeEnv selects what this test binary does when it is started as a
// runner.
const fakeEnv = "KVAUDIT_FAKE_RUNNER"

// TestMain turns the test binary into a runner when fakeEnv is set: "model"
// serves the protocol with the Go model; the others misbehave as a broken
// runner would.
func TestMain(m *testing.M) {
	switch os.Getenv(fakeEnv) {
	case "":
		os.Exit(testlong.Main(m))
	case "model":
		if err := kernels.Serve(context.Background(), os.Stdin, os.Stdout, kernels.ModelDevice{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "nodevice":
		// What gorgonia.org/cu's init does without a GPU.
		fmt.Printf("Error in initialization, please refer to %q for details on: NoDevice\n", "https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html")
		os.Exit(1)
	case "protocol2":
		fmt.Println(`{"kvaudit_cuda":2,"runner":"kvaudit-cuda","device":"future"}`)
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "silent":
		time.Sleep(30 * time.Second)
		os.Exit(0)
	case "crash":
		fmt.Println(`{"kvaudit_cuda":1,"runner":"kvaudit-cuda","device":"flaky"}`)
		bufio.NewReader(os.Stdin).ReadBytes('\n')
		fmt.Println(`{"id":1,"progress":5}`)
		fmt.Fprintln(os.Stderr, "CUDA_ERROR_ILLEGAL_ADDRESS: boom")
		os.Exit(2)
	case "garbage":
		fmt.Println(`{"kvaudit_cuda":1,"runner":"kvaudit-cuda","device":"chatty"}`)
		bufio.NewReader(os.Stdin).ReadBytes('\n')
		fmt.Println("hello there")
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	if hostileRunner(os.Getenv(fakeEnv)) {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "unknown %s\n", fakeEnv)
	os.Exit(3)
}

func startFake(t *testing.T, mode string) (*kernels.Runner, error) {
	t.Helper()
	return kernels.StartRunner(context.Background(), kernels.RunnerOptions{
		Path: os.Args[0], Env: append(os.Environ(), fakeEnv+"="+mode), StartTimeout: 20 * time.Second,
	})
}

// TestRunnerMatchesReference sends plans of synth dumps through the
// protocol to a runner serving the model, and compares with the reference;
// the progress it reports adds up to the plan's bytes.
func TestRunnerMatchesReference(t *testing.T) {
	r, err := startFake(t, "model")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if h := r.Hello(); h.Protocol != kernels.ProtocolVersion || h.Runner != "kvaudit-model" {
		t.Fatalf("hello %+v", h)
	}
	for i, cfg := range kerneltest.SynthConfigs() {
		if i%4 != 0 {
			continue
		}
		t.Run(kerneltest.Name(cfg), func(t *testing.T) {
			paths, err := synth.Write(t.TempDir(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				d, err := layout.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				plan, _, err := checksum.NewPlan(d, nil)
				if err != nil {
					t.Fatal(err)
				}
				var done int64
				plan.Progress = func(n int64) { done += n }
				got := run(t, r, plan)
				if want := run(t, checksum.Reference{}, &ckplan.Plan{Dump: plan.Dump, Tasks: plan.Tasks, Outputs: plan.Outputs}); !slices.Equal(got, want) {
					t.Errorf("%s:\n got %x\nwant %x", p, got, want)
				}
				if done != plan.Bytes() {
					t.Errorf("%s: progress %d bytes, plan %d", p, done, plan.Bytes())
				}
			}
		})
	}
}

// TestRunnerAddsToOut: like every engine, the runner adds to out.
func TestRunnerAddsToOut(t *testing.T) {
	r, err := startFake(t, "model")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	plan := synthPlan(t, synth.Config{Preset: "tiny"})
	want := run(t, checksum.Reference{}, plan)
	out := make([]uint64, plan.Outputs)
	for i := range out {
		out[i] = 1
	}
	if err := r.Run(context.Background(), plan, out); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if out[i] != want[i]+1 {
			t.Fatalf("out[%d] = %#x, want %#x + 1", i, out[i], want[i])
		}
	}
}

func synthPlan(t *testing.T, cfg synth.Config) *ckplan.Plan {
	t.Helper()
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := layout.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	plan, _, err := checksum.NewPlan(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestRunnerStartFailures: a runner that dies at start, speaks another
// protocol, says nothing, or is missing is an error naming why.
func TestRunnerStartFailures(t *testing.T) {
	for _, c := range []struct{ mode, want string }{
		{"nodevice", "Error in initialization"},
		{"protocol2", "protocol 2"},
	} {
		_, err := startFake(t, c.mode)
		var se *kernels.StartError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a StartError saying %q", c.mode, err, c.want)
		}
	}
	_, err := startFake(t, "nodevice")
	if err == nil || !strings.Contains(err.Error(), "NoDevice") || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("nodevice: %v", err)
	}
	_, err = kernels.StartRunner(context.Background(), kernels.RunnerOptions{
		Path: os.Args[0], Env: append(os.Environ(), fakeEnv+"=silent"), StartTimeout: 300 * time.Millisecond,
	})
	if err == nil || !strings.Contains(err.Error(), "no handshake") {
		t.Errorf("silent: %v", err)
	}
	_, err = kernels.StartRunner(context.Background(), kernels.RunnerOptions{Path: filepath.Join(t.TempDir(), "kvaudit-cuda")})
	if err == nil {
		t.Error("a missing runner started")
	}
}

// TestRunnerCrash: a runner that dies during a request fails it with what
// it said, and every later call.
func TestRunnerCrash(t *testing.T) {
	r, err := startFake(t, "crash")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	plan := synthPlan(t, synth.Config{Preset: "tiny"})
	err = r.Run(context.Background(), plan, make([]uint64, plan.Outputs))
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "exit status 2") {
		t.Fatalf("got %v", err)
	}
	if err2 := r.Run(context.Background(), plan, make([]uint64, plan.Outputs)); err2 == nil {
		t.Fatal("a dead runner ran a plan")
	}
}

// TestRunnerGarbage: a line that is not the protocol breaks the runner.
func TestRunnerGarbage(t *testing.T) {
	r, err := startFake(t, "garbage")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	plan := synthPlan(t, synth.Config{Preset: "tiny"})
	err = r.Run(context.Background(), plan, make([]uint64, plan.Outputs))
	if err == nil || !strings.Contains(err.Error(), "hello there") {
		t.Fatalf("got %v", err)
	}
}

// TestRunnerBench runs the benchmark's code paths on the model.
func TestRunnerBench(t *testing.T) {
	r, err := startFake(t, "model")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res, err := r.Bench(context.Background(), kernels.BenchRequest{Bytes: 1 << 20, Reps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.VerifiedRows != 4 || res.Bytes != 1<<20 || res.ChecksumSeconds <= 0 {
		t.Fatalf("%+v", res)
	}
	var b bytes.Buffer
	if err := res.WriteText(&b); err != nil || !strings.Contains(b.String(), "checksum kernel") {
		t.Fatalf("%v\n%s", err, b.String())
	}
}

// TestServeRejectsBadRequests: a request the runner cannot honour is
// answered with an error naming why, and the runner goes on.
func TestServeRejectsBadRequests(t *testing.T) {
	plan := synthPlan(t, synth.Config{Preset: "llama"})
	dump, _ := filepath.Abs(plan.Dump.Path)
	c := plan.Tasks[0].Cache
	good := kernels.TaskMessage{Group: 0, Cache: 0, Layer: c.Layer.Name, Geometry: kernels.Signature(c), Rows: [][4]int64{{0, 0, 16, 0}}}
	mod := func(f func(*kernels.Request)) kernels.Request {
		r := kernels.Request{Op: kernels.OpChecksum, Dump: dump, Outputs: 1, Tasks: []kernels.TaskMessage{good}}
		r.Tasks[0].Rows = slices.Clone(good.Rows)
		f(&r)
		return r
	}
	cases := []struct {
		req  kernels.Request
		want string
	}{
		{mod(func(r *kernels.Request) {}), ""},
		{mod(func(r *kernels.Request) { r.Tasks[0].Geometry = "other" }), "same release"},
		{mod(func(r *kernels.Request) { r.Tasks[0].Group = 7 }), "no group 7"},
		{mod(func(r *kernels.Request) { r.Tasks[0].Layer = "nope" }), `no cache "nope" at index 0`},
		{mod(func(r *kernels.Request) { r.Tasks[0].Cache = 9 }), `at index 9`},
		{mod(func(r *kernels.Request) { r.Tasks[0].Rows[0][0] = 1 << 20 }), "want [block <"},
		{mod(func(r *kernels.Request) { r.Tasks[0].Rows[0][2] = 17 }), "valid tokens 1..16"},
		{mod(func(r *kernels.Request) { r.Tasks[0].Rows[0][3] = 1 }), "output slot < 1"},
		{mod(func(r *kernels.Request) { r.Dump = "rel/path" }), "not absolute"},
		{mod(func(r *kernels.Request) { r.Dump = dump + ".missing" }), "no such file"},
		{mod(func(r *kernels.Request) { r.Op = "dance" }), `unknown op "dance"`},
		{mod(func(r *kernels.Request) {}), ""},
	}
	var in bytes.Buffer
	for i, c := range cases {
		c.req.ID = int64(i + 1)
		b, _ := json.Marshal(c.req)
		in.Write(append(b, '\n'))
	}
	in.WriteString("not json\n")
	var out bytes.Buffer
	if err := kernels.Serve(context.Background(), &in, &out, kernels.ModelDevice{}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.Contains(l, `"progress"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != len(cases)+2 {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	want := run(t, checksum.Reference{}, &ckplan.Plan{Dump: plan.Dump, Outputs: 1,
		Tasks: []ckplan.Task{{Cache: c, Rows: []ckplan.Row{{Block: 0, FirstToken: 0, Valid: 16, Out: 0}}}}})
	for i, c := range cases {
		var resp kernels.Response
		if err := json.Unmarshal([]byte(lines[i+1]), &resp); err != nil {
			t.Fatal(err)
		}
		if resp.ID != int64(i+1) || !resp.Done {
			t.Errorf("case %d: %s", i, lines[i+1])
		}
		switch {
		case c.want == "" && (resp.Error != "" || len(resp.Out) != 1 || uint64(resp.Out[0]) != want[0]):
			t.Errorf("case %d: %s, want out %#x", i, lines[i+1], want[0])
		case c.want != "" && !strings.Contains(resp.Error, c.want):
			t.Errorf("case %d: error %q, want %q", i, resp.Error, c.want)
		}
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "bad request") {
		t.Errorf("garbage line answered %s", last)
	}
}

// TestFindRunner: $KVAUDIT_CUDA_RUNNER wins and must name an executable;
// without it and without kvaudit-cuda anywhere, ErrNoRunner.
func TestFindRunner(t *testing.T) {
	t.Setenv(kernels.RunnerEnv, os.Args[0])
	if p, found, err := kernels.FindRunner(); err != nil || p != os.Args[0] || found != kernels.FoundEnv {
		t.Errorf("got %q, %v", p, err)
	}
	t.Setenv(kernels.RunnerEnv, filepath.Join(t.TempDir(), "nothing"))
	if _, _, err := kernels.FindRunner(); err == nil {
		t.Error("a missing $KVAUDIT_CUDA_RUNNER was accepted")
	}
	t.Setenv(kernels.RunnerEnv, "")
	t.Setenv("PATH", t.TempDir())
	if _, _, err := kernels.FindRunner(); !errors.Is(err, kernels.ErrNoRunner) {
		t.Errorf("got %v, want ErrNoRunner", err)
	}
}
