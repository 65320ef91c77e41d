//go:build cuda

package kernels_test

// With -tags cuda, the Runner is also tested against a real kvaudit-cuda:
// KVAUDIT_CUDA_RUNNER names it (kernels/gpucheck.sh sets it on a GPU
// machine). Without it the tests skip, unless KVAUDIT_REQUIRE_GPU=1, when
// they fail.

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/kerneltest"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

func startGPU(t *testing.T) *kernels.Runner {
	t.Helper()
	if os.Getenv(kernels.RunnerEnv) == "" {
		if os.Getenv("KVAUDIT_REQUIRE_GPU") == "1" {
			t.Fatalf("KVAUDIT_REQUIRE_GPU=1 but %s is not set", kernels.RunnerEnv)
		}
		t.Skipf("%s is not set", kernels.RunnerEnv)
	}
	r, err := kernels.StartRunner(context.Background(), kernels.RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	t.Logf("runner on %s", r.Hello())
	return r
}

// TestGPURunnerMatchesReference: kvaudit-cuda, through the protocol, equals
// the reference engine on every rank of every synth configuration.
func TestGPURunnerMatchesReference(t *testing.T) {
	r := startGPU(t)
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
			var done int64
			plan.Progress = func(n int64) { done += n }
			got := run(t, r, plan)
			plan.Progress = nil
			if want := run(t, checksum.Reference{}, plan); !slices.Equal(got, want) {
				t.Errorf("%s %s:\n got %x\nwant %x", kerneltest.Name(cfg), p, got, want)
			}
			if done != plan.Bytes() {
				t.Errorf("%s: progress %d bytes, plan %d", p, done, plan.Bytes())
			}
			d.Close()
		}
	}
}

// TestGPURunnerBench runs a small benchmark through the protocol.
func TestGPURunnerBench(t *testing.T) {
	r := startGPU(t)
	res, err := r.Bench(context.Background(), kernels.BenchRequest{Bytes: 64 << 20, Reps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.VerifiedRows == 0 || res.ChecksumSeconds <= 0 {
		t.Fatalf("%+v", res)
	}
}
