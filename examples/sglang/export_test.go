// Package sglang_test runs the Python tests of the SGLang exporter in
// examples/sglang (kvaudit_sglang_export.py on pools laid out as SGLang's
// memory_pool.py lays them out) against a kvaudit built from this tree.
package sglang_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/internal/testlong"
)

// python returns an interpreter that imports torch: $KVAUDIT_PYTHON,
// Debian's /usr/bin/python3 (python3-torch), or python3 on PATH. Without
// one the test skips, unless KVAUDIT_REQUIRE_TORCH asks for it (CI).
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("KVAUDIT_PYTHON"), "/usr/bin/python3", "python3"} {
		if p != "" && exec.Command(p, "-c", "import torch").Run() == nil {
			return p
		}
	}
	if os.Getenv("KVAUDIT_REQUIRE_TORCH") != "" {
		t.Fatal("no python3 that imports torch (install python3-torch)")
	}
	t.Skip("no python3 that imports torch")
	return ""
}

// TestExporterPython runs tests/test_*.py; every test class must run and
// none may skip.
func TestExporterPython(t *testing.T) {
	testlong.Skip(t, "the exporter's Python suite (PyTorch)")
	py := python(t)
	bin := testfiles.BuildKvaudit(t)
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Env = append(os.Environ(), "KVAUDIT_BIN="+bin, "KVAUDIT_REQUIRE_TORCH=1")
	o, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python tests: %v\n%s", err, o)
	}
	if strings.Contains(string(o), "skipped") {
		t.Fatalf("python tests skipped some tests:\n%s", o)
	}
	for _, c := range []string{"TestWorkedExample", "TestPools", "TestDiff"} {
		if !strings.Contains(string(o), "(test_export."+c+".") {
			t.Errorf("no test of %s ran:\n%s", c, o)
		}
	}
}
