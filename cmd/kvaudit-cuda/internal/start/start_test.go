package start

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/kernels"
)

// TestSameAsKernels: the protocol start reports is the runner's.
func TestSameAsKernels(t *testing.T) {
	if Protocol != kernels.ProtocolVersion {
		t.Errorf("start.Protocol %d, kernels.ProtocolVersion %d", Protocol, kernels.ProtocolVersion)
	}
}

// TestImportsForInitOrder: what lets start's init run before
// gorgonia.org/cu's (the package doc). Beyond the standard library it
// depends on internal/buildinfo alone, whose path sorts before cu's, and
// the two import only the standard packages start imported when
// TestRunnerWithoutGPU showed the order (runtime/debug, which buildinfo
// imports, was start's own before buildinfo held BuildVersion): they are
// ready to initialize no later than before, and Go initializes the
// package whose path sorts first among those ready.
func TestImportsForInitOrder(t *testing.T) {
	list := func(format, pkg string, deps bool) []string {
		args := []string{"list", "-f", format}
		if deps {
			args = append(args, "-deps")
		}
		out, err := exec.Command("go", append(args, pkg)...).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const buildinfo = "github.com/kvaudit/kvaudit/internal/buildinfo"
	self := list("{{.ImportPath}}", ".", false)[0]
	var own []string
	for _, p := range list("{{if not .Standard}}{{.ImportPath}}{{end}}", ".", true) {
		if p != self {
			own = append(own, p)
		}
	}
	if !slices.Equal(own, []string{buildinfo}) || buildinfo >= "gorgonia.org/cu" {
		t.Fatalf("start depends on %q beyond the standard library; want %q alone", own, buildinfo)
	}
	shown := []string{"fmt", "runtime/debug", "strconv", "strings"}
	for _, pkg := range []string{".", buildinfo} {
		for _, p := range list(`{{join .Imports " "}}`, pkg, false) {
			if p != buildinfo && !slices.Contains(shown, p) {
				t.Errorf("%s imports %q, not one of %q", pkg, p, shown)
			}
		}
	}
}

// TestEarly: --help and version never touch the driver; info, serve and
// bench report a failed cuInit and exit 1; with a usable driver they go on
// to main; anything else is a usage error.
func TestEarly(t *testing.T) {
	noDevice := errors.New("cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)")
	for _, c := range []struct {
		args         []string
		initErr      error
		wantInit     bool
		done         bool
		code         int
		stdout, errs []string
	}{
		{args: []string{"--help"}, done: true, code: 0, stdout: []string{"usage: kvaudit-cuda", "version"}},
		{args: []string{"help"}, done: true, code: 0, stdout: []string{"usage: kvaudit-cuda"}},
		{args: []string{"version"}, done: true, code: 0, stdout: []string{"kvaudit-cuda ", "(protocol 1)\n"}},
		{args: []string{"--version"}, done: true, code: 0, stdout: []string{"(protocol 1)"}},
		{args: nil, done: true, code: 3, errs: []string{"usage: kvaudit-cuda"}},
		{args: []string{"nope"}, done: true, code: 3, errs: []string{`unknown command "nope"`, "usage:"}},
		{args: []string{"info"}, initErr: noDevice, wantInit: true, done: true, code: 1,
			stdout: []string{"device:   none (no usable CUDA device: cuInit: CUDA_ERROR_NO_DEVICE", "runner:   kvaudit-cuda ", "(protocol 1)"}},
		{args: []string{"info", "-o", "json"}, initErr: noDevice, wantInit: true, done: true, code: 1,
			stdout: []string{`"kvaudit_cuda": 1`, `"runner": "kvaudit-cuda"`, `"error": "no usable CUDA device: cuInit: CUDA_ERROR_NO_DEVICE`}},
		{args: []string{"serve"}, initErr: noDevice, wantInit: true, done: true, code: 1, errs: []string{"kvaudit-cuda: no usable CUDA device: cuInit: CUDA_ERROR_NO_DEVICE"}},
		{args: []string{"bench", "--size", "1GiB"}, initErr: noDevice, wantInit: true, done: true, code: 1, errs: []string{"no usable CUDA device"}},
		{args: []string{"info"}, wantInit: true},
		{args: []string{"serve"}, wantInit: true},
	} {
		called := false
		stdout, stderr, code, done := Early(c.args, func() error { called = true; return c.initErr })
		if called != c.wantInit || done != c.done || code != c.code {
			t.Errorf("%q: cuInit called %v, done %v, code %d; want %v, %v, %d", c.args, called, done, code, c.wantInit, c.done, c.code)
		}
		for _, w := range c.stdout {
			if !strings.Contains(stdout, w) {
				t.Errorf("%q: stdout %q lacks %q", c.args, stdout, w)
			}
		}
		for _, w := range c.errs {
			if !strings.Contains(stderr, w) {
				t.Errorf("%q: stderr %q lacks %q", c.args, stderr, w)
			}
		}
		if c.stdout == nil && stdout != "" || c.errs == nil && stderr != "" {
			t.Errorf("%q: unexpected output: stdout %q, stderr %q", c.args, stdout, stderr)
		}
	}
}

// TestRunnerWithoutGPU builds the real runner (-tags cuda; skipped where
// the CUDA toolkit is missing) and runs --help, version and info: the
// first two exit 0 whether or not there is a GPU; info exits 0 on a GPU
// machine and otherwise 1 after printing the runner's version.
func TestRunnerWithoutGPU(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kvaudit-cuda")
	}
	bin := filepath.Join(t.TempDir(), "kvaudit-cuda")
	build := exec.Command("go", "build", "-tags", "cuda", "-o", bin, "github.com/kvaudit/kvaudit/cmd/kvaudit-cuda")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "cuda.h") || strings.Contains(string(out), "-lcuda") || strings.Contains(string(out), `exec: "gcc"`) {
			t.Skipf("no CUDA toolkit here (.ci/cuda.sh installs it): %s", firstLine(out))
		}
		t.Fatalf("go build -tags cuda: %v\n%s", err, out)
	}
	runBin := func(args ...string) (string, int) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &ee):
			if strings.Contains(string(out), "error while loading shared libraries") {
				t.Skipf("the CUDA driver library is not installed: %s", firstLine(out))
			}
			return string(out), ee.ExitCode()
		}
		t.Fatal(err)
		return "", 0
	}
	if out, code := runBin("--help"); code != 0 || !strings.Contains(out, "usage: kvaudit-cuda") {
		t.Errorf("kvaudit-cuda --help: exit %d\n%s", code, out)
	}
	if out, code := runBin("version"); code != 0 || !strings.Contains(out, "kvaudit-cuda ") || !strings.Contains(out, "(protocol 1)") {
		t.Errorf("kvaudit-cuda version: exit %d\n%s", code, out)
	}
	out, code := runBin("info")
	switch code {
	case 0:
		t.Logf("a GPU is here:\n%s", out)
	case 1:
		if !strings.Contains(out, "no usable CUDA device") || !strings.Contains(out, "(protocol 1)") || strings.Contains(out, "Error in initialization") {
			t.Errorf("kvaudit-cuda info without a GPU:\n%s", out)
		}
	default:
		t.Errorf("kvaudit-cuda info: exit %d\n%s", code, out)
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
