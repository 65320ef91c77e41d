package apicheck

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite api/*.txt from the source")

// module is the import path of the repository's root.
const module = "github.com/kvaudit/kvaudit"

// publicPackages lists the directories, relative to the repository's
// root, of every package that is API: those holding non-test Go files
// outside cmd/, examples/, internal/ and testdata.
func publicPackages(t *testing.T, root string) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch d.Name() {
			case "cmd", "examples", "internal", "testdata", "api":
				if filepath.Dir(rel) == "." || d.Name() == "testdata" || d.Name() == "internal" {
					return filepath.SkipDir
				}
			}
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dir := filepath.ToSlash(filepath.Dir(rel))
			if dir != "." && !slices.Contains(pkgs, dir) {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pkgs)
	return pkgs
}

// apiFile is where a package's API is kept: api/layout.txt,
// api/layout-synth.txt for layout/synth, ...
func apiFile(root, pkg string) string {
	return filepath.Join(root, "api", strings.ReplaceAll(pkg, "/", "-")+".txt")
}

// TestAPI: api/*.txt holds the exported API of every public package, as
// the source declares it; an API change that does not update its file
// fails (go test ./internal/apicheck -update rewrites them, for review).
func TestAPI(t *testing.T) {
	root := filepath.Join("..", "..")
	pkgs := publicPackages(t, root)
	for _, want := range []string{"checksum", "layout", "parse", "side", "transfer", "verify", "verify/drill", "wire"} {
		if !slices.Contains(pkgs, want) {
			t.Errorf("package %s is not found among the public packages %q", want, pkgs)
		}
	}
	files := map[string]bool{}
	for _, pkg := range pkgs {
		lines, err := Lines(filepath.Join(root, pkg), module+"/"+pkg)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(lines, "\n") + "\n"
		file := apiFile(root, pkg)
		files[filepath.Base(file)] = true
		if *update {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v (go test ./internal/apicheck -update writes it)", pkg, err)
			continue
		}
		if string(want) != got {
			t.Errorf("the API of %s changed and %s does not say so: review the change and run go test ./internal/apicheck -update\n%s", pkg, file, lineDiff(string(want), got))
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, "api"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !files[e.Name()] {
			if *update {
				os.Remove(filepath.Join(root, "api", e.Name()))
				continue
			}
			t.Errorf("api/%s names no public package: remove it (go test ./internal/apicheck -update)", e.Name())
		}
	}
}

// lineDiff lists the lines only one of want and got has.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if l != "" && !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if l != "" && !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// TestLines: the lines of a small package written out, every kind of
// declaration, and nothing unexported.
func TestLines(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import "io"

// C is a constant.
const C = "c"

const (
	A K = iota
	B
	c
)

var V, w = 1, 2
var E error

type K int

type S struct {
	X, y int
	io.Reader
	F func(a, b int) (n int, err error)
}

type I interface {
	M(x int) string
	m()
}

type A2 = S

type G[T any] struct{ V T }

func F(r io.Reader, n int) (int, error) { return 0, nil }
func f() {}
func (s *S) M(x int) string { return "" }
func (s S) m() {}
func (k K) String() string { return "" }
func (k k2) String() string { return "" }

type k2 int
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nfunc Test() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_windows.go"), []byte("package p\n\nfunc Windows() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Lines(dir, "x/p")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg x/p, const A K",
		"pkg x/p, const B K",
		`pkg x/p, const C = "c"`,
		"pkg x/p, func F(io.Reader, int) (int, error)",
		"pkg x/p, method (*S) M(int) string",
		"pkg x/p, method (K) String() string",
		"pkg x/p, type A2 = S",
		"pkg x/p, type G[T any] struct",
		"pkg x/p, type G[T any] struct, V T",
		"pkg x/p, type I interface",
		"pkg x/p, type I interface, M(int) string",
		"pkg x/p, type I interface, unexported methods",
		"pkg x/p, type K int",
		"pkg x/p, type S struct",
		"pkg x/p, type S struct, F func(int, int) (int, error)",
		"pkg x/p, type S struct, X int",
		"pkg x/p, type S struct, embedded io.Reader",
		"pkg x/p, var E error",
		"pkg x/p, var V = 1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
