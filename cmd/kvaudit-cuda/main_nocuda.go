//go:build !cuda

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "kvaudit-cuda: this build has no CUDA support: build it with `go build -tags cuda ./cmd/kvaudit-cuda` on a machine with the CUDA toolkit (see internal/kernels/README.md)")
	os.Exit(3)
}
