package cli

import (
	"fmt"
	"io"

	"github.com/kvaudit/kvaudit/checksum"
)

// engineNames are the values --engine takes.
const engineHelp = "checksum engine: cpu (fast, parallel), ref (the literal definition, slow), cuda (the kvaudit-cuda runner) or auto (cuda when the runner works, else cpu)"

// newEngine returns the engine an --engine value names. auto falls back to
// the CPU with a one-line note on stderr when the CUDA runner is absent or
// fails to start; cuda then is an error.
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
		fmt.Fprintf(stderr, "kvaudit: note: %v; using the cpu engine\n", err)
		return checksum.Fast{Threads: threads}, nil
	}
	return nil, usageErrorf("--engine %q: want cpu, ref, cuda or auto", name)
}

// cudaEngine starts the GPU engine. It is replaced when the CUDA runner
// client is built in.
var cudaEngine = func() (checksum.Engine, error) {
	return nil, fmt.Errorf("the CUDA engine needs the kvaudit-cuda runner, which this build cannot start")
}
