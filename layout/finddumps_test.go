package layout_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// TestFindDumpsErrors: a path that does not exist and a directory holding
// no dump are typed errors, the latter naming the subdirectories that hold
// the sides (a root as synth --out writes it).
func TestFindDumpsErrors(t *testing.T) {
	root := t.TempDir()
	for _, role := range []string{"producer", "consumer"} {
		if _, err := synth.Write(root, synth.Config{Preset: "tiny", Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(root, "nope")
	_, _, err := layout.FindDumps([]string{filepath.Join(root, "producer"), missing})
	var nf *layout.NotFoundError
	if !errors.As(err, &nf) || nf.Path != missing || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing path: %v, want a *NotFoundError for %q", err, missing)
	}
	_, _, err = layout.FindDumps([]string{root})
	var nd *layout.NoDumpError
	want := []string{filepath.Join(root, "consumer"), filepath.Join(root, "producer")}
	if !errors.As(err, &nd) || nd.Dir != root || !slices.Equal(nd.Sides, want) {
		t.Errorf("a root of sides: %v (%+v), want a *NoDumpError naming %q", err, nd, want)
	}
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, err = layout.FindDumps([]string{empty})
	if !errors.As(err, &nd) || nd.Dir != empty || nd.Sides != nil {
		t.Errorf("an empty directory: %v, want a *NoDumpError with no sides", err)
	}
}
