package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/kvaudit/kvaudit/kernels"
)

// engineHelp documents the values --engine takes.
const engineHelp = "checksum engine: cpu (fast, parallel), ref (the literal definition, slow), cuda (the GPU, through the kvaudit-cuda runner: $KVAUDIT_CUDA_RUNNER, beside kvaudit, or on PATH) or auto (cuda when the runner starts, else cpu)"

// newEngine returns the engine an --engine value names. auto falls back to
// the CPU with a one-line note on stderr when the CUDA runner is absent or
// fails to start; cuda then is an error (exit 3) carrying what the runner
// said.
func newEngine(name string, threads int, stderr io.Writer) (checksum.Engine, error) {
	switch name {
	case "cpu", "":
		return checksum.Fast{Threads: threads}, nil
	case "ref":
		return checksum.Reference{}, nil
	case "cuda", "auto":
		e, err := cudaEngine()
		if err == nil {
			return e, nil
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
var cudaEngine = func() (checksum.Engine, error) {
	r, err := kernels.StartRunner(context.Background(), kernels.RunnerOptions{})
	if err != nil {
		return nil, fmt.Errorf("the CUDA engine is unavailable: %w", err)
	}
	return r, nil
}
