package transfer_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
)

// fixturesEnv names a directory that keeps the synthesized sides across
// runs of this test binary (mutation testing runs it once per mutant;
// internal/synth does not import this package, so the sides are the same
// for every mutant). Unset, they live in a temporary directory that
// TestMain removes.
const fixturesEnv = "KVAUDIT_TEST_FIXTURES"

// fixtures holds the sides synthesized by this test binary, one directory
// per pair of configurations: synthesizing is most of a pull's cost, and
// the audit only reads the dumps, so the tests share them.
var fixtures struct {
	sync.Mutex
	root string
	keep bool
	dirs map[string]*fixture
}

type fixture struct {
	once sync.Once
	dir  string
	err  error
}

// synthesized returns a directory holding the producer/ and consumer/
// that synth.Write makes of p and c, written the first time they are
// asked for. The dumps are shared: a test must not write into them.
func synthesized(t testing.TB, p, c synth.Config) string {
	t.Helper()
	if p.Values != nil || c.Values != nil {
		t.Fatal("synthesized: configurations with Values are not shared")
	}
	key := fmt.Sprintf("%#v\n%#v", p, c)
	fixtures.Lock()
	if fixtures.root == "" {
		fixtures.root, fixtures.keep = os.Getenv(fixturesEnv), true
		if fixtures.root == "" {
			root, err := os.MkdirTemp("", "kvaudit-transfer-test-")
			if err != nil {
				fixtures.Unlock()
				t.Fatal(err)
			}
			fixtures.root, fixtures.keep = root, false
		}
		fixtures.dirs = map[string]*fixture{}
	}
	f := fixtures.dirs[key]
	if f == nil {
		f = &fixture{dir: filepath.Join(fixtures.root, fmt.Sprintf("%x", sha256.Sum256([]byte(key)))[:16])}
		fixtures.dirs[key] = f
	}
	fixtures.Unlock()
	f.once.Do(func() {
		done := filepath.Join(f.dir, "synthesized")
		if _, err := os.Stat(done); err == nil {
			return
		}
		if f.err = os.RemoveAll(f.dir); f.err != nil {
			return
		}
		for _, cfg := range []synth.Config{p, c} {
			if _, f.err = synth.Write(f.dir, cfg); f.err != nil {
				return
			}
		}
		f.err = os.WriteFile(done, nil, 0o644)
	})
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.dir
}

// removeFixtures removes what synthesized wrote, unless fixturesEnv keeps
// it; TestMain calls it.
func removeFixtures() {
	fixtures.Lock()
	defer fixtures.Unlock()
	if fixtures.root != "" && !fixtures.keep {
		os.RemoveAll(fixtures.root)
	}
}
