package safeio

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteNeverOverwritesWithoutForce(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.json")
	if err := WriteFile(p, []byte("one"), false); err != nil {
		t.Fatal(err)
	}
	var ee *ExistsError
	if err := WriteFile(p, []byte("two"), false); !errors.As(err, &ee) {
		t.Fatalf("second write: %v, want an ExistsError", err)
	}
	if got := read(t, p); got != "one" {
		t.Errorf("file holds %q after a refused write", got)
	}
	if err := WriteFile(p, []byte("three"), true); err != nil {
		t.Fatal(err)
	}
	if got := read(t, p); got != "three" {
		t.Errorf("forced write: file holds %q", got)
	}
	assertOnly(t, dir, "out.json")
}

func TestSymlinkAtTargetNeverFollowed(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("precious"), 0o644)
	link := filepath.Join(dir, "out")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	os.Symlink(filepath.Join(dir, "nowhere"), dangling)
	if err := WriteFile(link, []byte("x"), false); err == nil {
		t.Error("a write over a symlink succeeded without force")
	}
	if err := WriteFile(dangling, []byte("x"), false); err == nil {
		t.Error("a write over a dangling symlink succeeded without force")
	}
	if _, err := os.Stat(filepath.Join(dir, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a write created the dangling link's target")
	}
	if err := WriteFile(link, []byte("new"), true); err != nil {
		t.Fatal(err)
	}
	if got := read(t, victim); got != "precious" {
		t.Errorf("the link's target now holds %q", got)
	}
	if st, _ := os.Lstat(link); st.Mode()&os.ModeSymlink != 0 || read(t, link) != "new" {
		t.Errorf("the link was not replaced by the file")
	}
}

func TestFailedWriteLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out")
	err := Write(p, false, func(w io.Writer) error {
		w.Write(make([]byte, 3<<20))
		return errors.New("disk full")
	})
	if err == nil {
		t.Fatal("no error")
	}
	assertOnly(t, dir)
	if len(Pending()) != 0 {
		t.Errorf("pending after an aborted write: %v", Pending())
	}
}

func TestCleanupRemovesTemporaries(t *testing.T) {
	dir := t.TempDir()
	f, err := Create(filepath.Join(dir, "out"), false)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("partial"))
	td, err := TempDir(dir, "scratch-")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(td, "x"), []byte("x"), 0o644)
	Cleanup()
	f.Close()
	assertOnly(t, dir)
}

func TestPlaceDir(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "out")
	mk := func(content string) string {
		td, err := TempDir(dir, ".out.tmp-")
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(td, "f"), []byte(content), 0o644)
		return td
	}
	if err := PlaceDir(mk("1"), target, false, nil); err != nil {
		t.Fatal(err)
	}
	second := mk("2")
	if err := PlaceDir(second, target, false, nil); err == nil {
		t.Error("a non-empty directory was replaced without force")
	}
	refuse := func(string) error { return errors.New("not ours") }
	if err := PlaceDir(second, target, true, refuse); err == nil {
		t.Error("force replaced a directory replaceable refused")
	}
	if err := PlaceDir(second, target, true, func(string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(target, "f")); got != "2" {
		t.Errorf("target holds %q", got)
	}
	assertOnly(t, dir, "out")
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if len(got) != len(names) {
		t.Errorf("%s holds %v, want %v", dir, got, names)
		return
	}
	for i := range got {
		if got[i] != names[i] {
			t.Errorf("%s holds %v, want %v", dir, got, names)
		}
	}
}

// Files in a scratch directory are placed like any other (complete or
// not at all, never over an existing file); only the syncs are skipped.
func TestScratchWritesStillSafe(t *testing.T) {
	dir, err := TempDir(t.TempDir(), "scratch-")
	if err != nil {
		t.Fatal(err)
	}
	defer RemoveTemp(dir)
	p := filepath.Join(dir, "f")
	if !InScratch(p) || InScratch(filepath.Dir(dir)) {
		t.Fatalf("InScratch wrong for %s", p)
	}
	stage, err := StageDir(t.TempDir(), "stage-")
	if err != nil {
		t.Fatal(err)
	}
	defer RemoveTemp(stage)
	if InScratch(filepath.Join(stage, "f")) {
		t.Fatalf("a staged output %s counts as scratch (it would not be synced)", stage)
	}
	if err := WriteFile(p, []byte("a"), false); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("b"), false); err == nil {
		t.Error("overwrote an existing file in a scratch directory")
	}
	assertOnly(t, dir, "f")
}

// TestPlaceDirOntoEmptyDirectory: an existing empty directory at the
// target is replaced (os.Rename alone refuses any directory there); one
// that gains a file is not.
func TestPlaceDirOntoEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "out")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	stage, err := StageDir(dir, ".out.tmp-")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(stage, "f"), []byte("1"), 0o644)
	if err := PlaceDir(stage, target, false, nil); err != nil {
		t.Fatalf("an empty directory at the target: %v", err)
	}
	if got := read(t, filepath.Join(target, "f")); got != "1" {
		t.Errorf("target holds %q", got)
	}
	assertOnly(t, dir, "out")
}

// TestMkdirOut: an output directory is created with its parents, an
// existing one is fine, and a symlink there (to a directory, or dangling)
// is refused, before anything is created through it.
func TestMkdirOut(t *testing.T) {
	dir := t.TempDir()
	if err := MkdirOut(filepath.Join(dir, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := MkdirOut(filepath.Join(dir, "a", "b")); err != nil {
		t.Fatalf("an existing directory: %v", err)
	}
	os.Mkdir(filepath.Join(dir, "elsewhere"), 0o755)
	os.Symlink("elsewhere", filepath.Join(dir, "link"))
	os.Symlink("nowhere", filepath.Join(dir, "dangling"))
	for _, l := range []string{"link", "dangling"} {
		var le *LinkError
		if err := MkdirOut(filepath.Join(dir, l)); !errors.As(err, &le) || le.Path != filepath.Join(dir, l) {
			t.Errorf("%s: %v, want a *LinkError", l, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
		t.Error("a directory was created through the dangling link")
	}
}
