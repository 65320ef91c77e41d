package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/termtext"
)

// engineHelp documents the values --engine takes.
const engineHelp = "checksum engine: cpu (fast, parallel), ref (the literal definition, slow), cuda (the GPU, through the kvaudit-cuda runner: $KVAUDIT_CUDA_RUNNER, beside kvaudit, or on PATH) or auto (cuda when the runner starts, else cpu)"

// addCUDATimeoutFlag adds --cuda-timeout, the deadline of one request to
// the kvaudit-cuda runner, to a command that may start it.
func addCUDATimeoutFlag(f *pflag.FlagSet) {
	f.Duration("cuda-timeout", kernels.DefaultRequestTimeout, "with --engine cuda or auto: the longest one request to the kvaudit-cuda runner (one rank's checksums) may take before the runner is stopped (0: no deadline)")
	f.String("runner-check", "", fmt.Sprintf("with --engine cuda or auto: how many host-resident output slots of each request the cpu engine recomputes to check the runner: N, or all (default: %d, or 1 in %d when more; the note and -o json say the probability of catching a single wrong slot)", kernels.DefaultSampleMin, kernels.DefaultSampleFraction))
	f.Bool("trust-runner", false, "with --engine cuda or auto: accept the runner's values of rows in device memory (cuda_ipc), which the cpu engine cannot recompute (without it a comparison holding them is unverified)")
}

// cudaTimeoutSetting names what sets the runner's deadline, in its
// timeout error.
const cudaTimeoutSetting = "--cuda-timeout or KVAUDIT_CUDA_TIMEOUT"

// runnerOptions are the runner's options from the command's settings:
// --cuda-timeout (0: none; negative is refused).
func runnerOptions(cfg *config) (kernels.RunnerOptions, error) {
	o := kernels.RunnerOptions{TimeoutSetting: cudaTimeoutSetting, Trust: cfg.Bool("trust-runner")}
	switch c := strings.TrimSpace(cfg.String("runner-check")); c {
	case "", "default":
	case "all":
		o.Check = kernels.CheckAll
	default:
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			return o, usageErrorf("%s %q: want a number of output slots (1 or more) or all", cfg.Source("runner-check"), c)
		}
		o.Check = n
	}
	switch d := cfg.Duration("cuda-timeout"); {
	case d < 0:
		return o, usageErrorf("%s: %v is negative (0 means no deadline)", cfg.Source("cuda-timeout"), d)
	case d == 0:
		o.RequestTimeout = -1
	default:
		o.RequestTimeout = d
	}
	return o, nil
}

// newEngine returns the engine the command's --engine names. auto falls
// back to the CPU with a one-line note on stderr when the CUDA runner is
// absent or fails to start, and says which runner it uses when it starts
// (its path, how it was found, its device); cuda then is an error (exit
// 3) carrying what the runner said.
func newEngine(cfg *config, stderr io.Writer) (checksum.Engine, error) {
	name, threads := cfg.String("engine"), cfg.Int("threads")
	switch name {
	case "cpu", "":
		return checksum.Fast{Threads: threads}, nil
	case "ref":
		return checksum.Reference{}, nil
	case "cuda", "auto":
		o, err := runnerOptions(cfg)
		if err != nil {
			return nil, err
		}
		r, err := cudaEngine(o)
		if err == nil {
			if name == "auto" {
				fmt.Fprintf(stderr, "kvaudit: note: %s\n", termtext.Line(fmt.Sprintf("using the CUDA engine: %s (found %s) on %s", r.Path(), r.Found(), r.Hello())))
			}
			return r, nil
		}
		if name == "cuda" {
			return nil, err
		}
		fmt.Fprintf(stderr, "kvaudit: note: %s; using the cpu engine\n", termtext.Line(err.Error()))
		return checksum.Fast{Threads: threads}, nil
	}
	return nil, usageErrorf("--engine %q: want cpu, ref, cuda or auto", name)
}

// cudaEngine starts the kvaudit-cuda runner (kernels.FindRunner) and waits
// for its handshake. The runner ends when kvaudit does (its stdin closes).
var cudaEngine = func(o kernels.RunnerOptions) (*kernels.Runner, error) {
	r, err := kernels.StartRunner(context.Background(), o)
	if err != nil {
		return nil, fmt.Errorf("the CUDA engine is unavailable: %w", err)
	}
	return r, nil
}
