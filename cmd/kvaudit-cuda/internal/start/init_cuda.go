//go:build cuda

package start

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
*/
import "C"

import (
	"fmt"
	"os"
)

// cudaInitError is cuInit(0)'s failure, named as the driver names it.
type cudaInitError struct{ name, text string }

func (e *cudaInitError) Error() string { return fmt.Sprintf("cuInit: %s (%s)", e.name, e.text) }

func cuInit() error {
	r := C.cuInit(0)
	if r == C.CUDA_SUCCESS {
		return nil
	}
	e := &cudaInitError{name: fmt.Sprintf("CUresult %d", int(r)), text: "unknown"}
	var name, text *C.char
	if C.cuGetErrorName(r, &name) == C.CUDA_SUCCESS && name != nil {
		e.name = C.GoString(name)
	}
	if C.cuGetErrorString(r, &text) == C.CUDA_SUCCESS && text != nil {
		e.text = C.GoString(text)
	}
	return e
}

func init() {
	stdout, stderr, code, done := Early(os.Args[1:], cuInit)
	if !done {
		return
	}
	os.Stdout.WriteString(stdout)
	os.Stderr.WriteString(stderr)
	os.Exit(code)
}
