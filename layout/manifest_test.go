package layout_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/layout"
)

// TestManifestCorpus parses every manifest of testdata/manifest and checks
// the outcome cases.txt gives: the error names the field.
func TestManifestCorpus(t *testing.T) {
	cases := testfiles.ReadCases(t, filepath.Join("testdata", "manifest", "cases.txt"))
	files, _ := filepath.Glob(filepath.Join("testdata", "manifest", "*.json"))
	if len(files) < 40 || len(files) != len(cases) {
		t.Fatalf("%d manifest files, %d cases: the corpus must hold at least 40, each with an outcome", len(files), len(cases))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		want, ok := cases[name]
		if !ok {
			t.Errorf("%s: no outcome in cases.txt", name)
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := layout.ParseManifest(file, data)
		if want == "ok" {
			if err != nil || m == nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		var me *layout.ManifestError
		if err == nil || m != nil || !errors.As(err, &me) {
			t.Errorf("%s: got %v, %v; want a *ManifestError", name, m, err)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: error %q does not name the file and say %q", name, err, want)
		}
	}
}

// FuzzManifest: ParseManifest never panics; it returns either a manifest
// that survives a round trip through MarshalManifest, or nil and a
// *ManifestError.
func FuzzManifest(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "manifest", "*.json"))
	if len(files) < 40 {
		f.Fatalf("seed corpus holds %d files, want at least 40", len(files))
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := layout.ParseManifest("fuzz.json", data)
		if err != nil {
			var me *layout.ManifestError
			if m != nil || !errors.As(err, &me) {
				t.Fatalf("got %v, %T %v", m, err, err)
			}
			return
		}
		text, err := layout.MarshalManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := layout.ParseManifest("again.json", text)
		if err != nil {
			t.Fatalf("a valid manifest does not parse after a round trip: %v\n%s", err, text)
		}
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, again)
		}
	})
}
