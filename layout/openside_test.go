package layout_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// TestOpenSideOrder: OpenSide opens the ranks on several goroutines, yet
// sorts them by rank and, of several bad paths, names the first in the
// order given, at one thread and at four.
func TestOpenSideOrder(t *testing.T) {
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layers: 2, TP: 4, PP: 2, Requests: 2, Tokens: 40, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad1, bad2 := filepath.Join(dir, "bad1.safetensors"), filepath.Join(dir, "bad2.safetensors")
	for _, p := range []string{bad1, bad2} {
		if err := os.WriteFile(p, []byte("not a dump"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reversed := make([]string, len(paths))
	for i, p := range paths {
		reversed[len(paths)-1-i] = p
	}
	for _, procs := range []int{1, 4} {
		prev := runtime.GOMAXPROCS(procs)
		dumps, err := layout.OpenSide(reversed)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range dumps {
			if pp, tp := d.Rank(); pp != i/4 || tp != i%4 {
				t.Errorf("GOMAXPROCS %d: dump %d is pp %d tp %d", procs, i, pp, tp)
			}
		}
		layout.CloseAll(dumps)
		withBad := append(append([]string{paths[0], bad2}, paths[1:]...), bad1)
		_, err = layout.OpenSide(withBad)
		if err == nil || !strings.Contains(err.Error(), bad2) || strings.Contains(err.Error(), bad1) {
			t.Errorf("GOMAXPROCS %d: error %v, want one naming %q", procs, err, bad2)
		}
		runtime.GOMAXPROCS(prev)
	}
	if dumps, err := layout.OpenSide(nil); dumps != nil || err != nil {
		t.Errorf("no paths: %v, %v", dumps, err)
	}
}
