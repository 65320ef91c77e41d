package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
)

// TestInspectUnmapsDumps: inspect unmaps every dump it opened before it
// returns. The kernel's list of this process's mappings
// (/proc/self/maps) names each mapped file, so a dump left open shows up
// there.
func TestInspectUnmapsDumps(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/maps")
	}
	dir := t.TempDir()
	for _, f := range synth.Formats {
		if _, err := synth.Write(filepath.Join(dir, f), synth.Config{Preset: "swa", TP: 2, PP: 1, Format: f}); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := run(t, "inspect", filepath.Join(dir, f, "producer")); code != ExitOK {
			t.Fatalf("inspect %s: exit %d: %s", f, code, stderr)
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no mapping list: %v", err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(maps)) {
		if strings.Contains(line, dir) || strings.Contains(line, real) {
			t.Errorf("still mapped after inspect: %s", strings.TrimSpace(line))
		}
	}
}
