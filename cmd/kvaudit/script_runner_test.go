package main

import (
	"bufio"
	"context"
	"fmt"
	"os"

	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/kernels"
)

// fakeRunnerEnv makes the kvaudit-cuda-fake command of the scripts
// hostile (see fakeRunner).
const fakeRunnerEnv = "KVAUDIT_FAKE_RUNNER"

// fakeRunner is the scripts' kvaudit-cuda-fake: a runner serving the
// protocol with the kernel's Go model, honest unless $KVAUDIT_FAKE_RUNNER
// says "zero" (it answers every checksum with 0, as a runner that computes
// nothing) or "flood" (it answers a request with progress lines forever).
func fakeRunner() {
	var dev kernels.Device = kernels.ModelDevice{}
	switch mode := os.Getenv(fakeRunnerEnv); mode {
	case "":
	case "zero":
		dev = zeroDevice{}
	case "flood":
		fmt.Println(`{"kvaudit_cuda":1,"runner":"kvaudit-cuda","device":"flood"}`)
		bufio.NewReader(os.Stdin).ReadBytes('\n')
		w := bufio.NewWriter(os.Stdout)
		for {
			if _, err := w.WriteString("{\"id\":1,\"progress\":1}\n"); err != nil {
				os.Exit(1)
			}
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", fakeRunnerEnv, mode)
		os.Exit(3)
	}
	if err := kernels.Serve(context.Background(), os.Stdin, os.Stdout, dev); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// zeroDevice answers every checksum with 0.
type zeroDevice struct{ kernels.ModelDevice }

func (zeroDevice) Run(context.Context, *ckplan.Plan, []uint64) error { return nil }
