// Package testfiles holds the helpers kvaudit's tests share for files on
// disk: the outcome lists (cases.txt) of the test corpora, and content
// hashes of a directory tree to prove that a command left its inputs as
// they were. It is for tests only.
package testfiles

import (
	"bufio"
	"crypto/sha256"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ReadCases reads a corpus's outcome list: lines of `NAME: EXPECTED`, where
// NAME names a file of the corpus (without its extension) and EXPECTED is
// "ok" or a substring of the error that file must give. Blank lines and
// lines starting with # are ignored. A malformed line or a name listed
// twice fails the test.
func ReadCases(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cases := map[string]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, want, ok := strings.Cut(text, ": ")
		if !ok || name == "" || want == "" {
			t.Fatalf("%s:%d: want `name: expected error substring` or `name: ok`, got %q", path, line, text)
		}
		if _, dup := cases[name]; dup {
			t.Fatalf("%s:%d: duplicate case %q", path, line, name)
		}
		cases[name] = want
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cases
}

// HashTree returns the SHA-256 of every regular file under dir, by path.
func HashTree(t testing.TB, dir string) map[string][32]byte {
	t.Helper()
	sums := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sums[p] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// AssertUnchanged fails the test when the files under dir differ from
// before (a HashTree of dir): a file changed, added or removed.
func AssertUnchanged(t testing.TB, dir string, before map[string][32]byte) {
	t.Helper()
	after := HashTree(t, dir)
	for p, sum := range before {
		got, ok := after[p]
		switch {
		case !ok:
			t.Errorf("%s was removed", p)
		case got != sum:
			t.Errorf("%s was written to", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s was added", p)
		}
	}
}

// BuildKvaudit builds the pure-Go kvaudit binary of this tree, with the
// build tags given, into a new temporary directory and returns the
// binary's path. It uses the go command on PATH (go test puts its own
// first).
func BuildKvaudit(t testing.TB, tags ...string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build kvaudit: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "kvaudit")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command(goTool, append(args, "github.com/kvaudit/kvaudit/cmd/kvaudit")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build kvaudit: %v\n%s", err, out)
	}
	return bin
}
