package kernels_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/testlong"
)

// TestRunnerFloodStart: a "runner" that floods stdout instead of
// answering (KVAUDIT_CUDA_RUNNER=/usr/bin/yes) gives a short StartError,
// not one holding everything it printed.
func TestRunnerFloodStart(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// 4 MB of "y" lines on each stream, a thousand times what is kept of
	// them, then exit; 40 MB, what yes prints in a moment, in the long
	// runs (each line is a channel send: seconds).
	n := 4000000
	if testlong.Long() {
		n = 40000000
	}
	_, err = kernels.StartRunner(context.Background(), kernels.RunnerOptions{
		Path: sh, Args: []string{"-c", fmt.Sprintf("yes | head -c %d; yes | head -c %d >&2", n, n)},
	})
	var se *kernels.StartError
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a StartError", err)
	}
	if n := len(err.Error()); n > 16<<10 {
		t.Fatalf("the error holds %d bytes of what the runner printed; want at most a few KB", n)
	}
	if !strings.Contains(err.Error(), "y y y") {
		t.Errorf("the error does not show what the runner said: %.200s", err)
	}
}
