package transfer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
)

// fixtures holds the sides synthesized by this test binary, one directory
// per pair of configurations: synthesizing is most of a pull's cost, and
// the audit only reads the dumps, so the tests share them.
var fixtures struct {
	sync.Mutex
	root string
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
		root, err := os.MkdirTemp("", "kvaudit-transfer-test-")
		if err != nil {
			fixtures.Unlock()
			t.Fatal(err)
		}
		fixtures.root, fixtures.dirs = root, map[string]*fixture{}
	}
	f := fixtures.dirs[key]
	if f == nil {
		f = &fixture{dir: filepath.Join(fixtures.root, fmt.Sprint(len(fixtures.dirs)))}
		fixtures.dirs[key] = f
	}
	fixtures.Unlock()
	f.once.Do(func() {
		for _, cfg := range []synth.Config{p, c} {
			if _, f.err = synth.Write(f.dir, cfg); f.err != nil {
				return
			}
		}
	})
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.dir
}

// removeFixtures removes what synthesized wrote; TestMain calls it.
func removeFixtures() {
	fixtures.Lock()
	defer fixtures.Unlock()
	if fixtures.root != "" {
		os.RemoveAll(fixtures.root)
	}
}
