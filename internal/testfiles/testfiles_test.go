package testfiles

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// recorder is a testing.TB that records the failures it is given.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAssertUnchanged: a tree left alone passes; a file written, removed or
// added is each reported.
func TestAssertUnchanged(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "sub", "b"), filepath.Join(dir, "c")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, a, "a")
	write(t, b, "b")
	before := HashTree(t, dir)
	if len(before) != 2 {
		t.Fatalf("HashTree: %d files, want 2", len(before))
	}
	r := &recorder{TB: t}
	AssertUnchanged(r, dir, before)
	if len(r.errs) != 0 {
		t.Fatalf("unchanged tree: %v", r.errs)
	}
	write(t, a, "A")
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	write(t, c, "c")
	AssertUnchanged(r, dir, before)
	want := []string{a + " was written to", b + " was removed", c + " was added"}
	slices.Sort(r.errs)
	slices.Sort(want)
	if !slices.Equal(r.errs, want) {
		t.Errorf("got %q, want %q", r.errs, want)
	}
}

// TestReadCases: names map to outcomes; comments and blank lines are
// skipped.
func TestReadCases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cases.txt")
	write(t, path, "# outcomes\n\nok-one: ok\nbad-two: field \"x\": not a number\n")
	got := ReadCases(t, path)
	if len(got) != 2 || got["ok-one"] != "ok" || got["bad-two"] != `field "x": not a number` {
		t.Errorf("got %q", got)
	}
}
