package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// hooked is the kvaudit built with -tags kvaudit_testhooks, once for the
// whole test binary: TestInterrupt and TestProgressTerminal share it, each
// switching on its hooks by environment (KVAUDIT_TEST_HOLD_COPY and
// KVAUDIT_TEST_HOLD_SYNTH hold work until a signal comes,
// KVAUDIT_TEST_FAST_PROGRESS redraws progress every few milliseconds).
// Building and linking kvaudit takes seconds, so it is done once.
var hooked struct {
	once sync.Once
	dir  string // removed by hookedMain after the tests
	bin  string
	err  error
	out  []byte
}

// hookedMain runs the tests, then removes the hooked kvaudit.
type hookedMain struct{ m *testing.M }

func (h hookedMain) Run() int {
	code := h.m.Run()
	if hooked.dir != "" {
		os.RemoveAll(hooked.dir)
	}
	return code
}

// hookedKvaudit returns the path of the kvaudit built with -tags
// kvaudit_testhooks, building it on first use.
func hookedKvaudit(t *testing.T) string {
	t.Helper()
	hooked.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			hooked.err = err
			return
		}
		if hooked.dir, err = os.MkdirTemp("", "kvaudit-hooked-"); err != nil {
			hooked.err = err
			return
		}
		bin := filepath.Join(hooked.dir, "kvaudit")
		cmd := exec.Command(goTool, "build", "-o", bin, "-tags", "kvaudit_testhooks", "github.com/kvaudit/kvaudit/cmd/kvaudit")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if hooked.out, hooked.err = cmd.CombinedOutput(); hooked.err == nil {
			hooked.bin = bin
		}
	})
	if hooked.err != nil {
		t.Fatalf("go build -tags kvaudit_testhooks kvaudit: %v\n%s", hooked.err, hooked.out)
	}
	return hooked.bin
}
