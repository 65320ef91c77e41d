package layout_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
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
		me := parse.As(err, parse.Manifest)
		if err == nil || m != nil || me == nil {
			t.Errorf("%s: got %v, %v; want a *parse.Error (parse.Manifest)", name, m, err)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: error %q does not name the file and say %q", name, err, want)
		}
	}
}

// FuzzManifest: ParseManifest never panics; it returns either a manifest
// that survives a round trip through MarshalManifest, or nil and a
// *parse.Error (parse.Manifest).
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
			me := parse.As(err, parse.Manifest)
			if m != nil || me == nil {
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
		dropEmpty(reflect.ValueOf(m))
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, again)
		}
	})
}

// dropEmpty sets to nil every empty slice or map under v that its JSON
// tag omits when empty: the format cannot tell it from an absent one
// ("block_table": {} reads back, once written, as no block table).
func dropEmpty(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			dropEmpty(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			dropEmpty(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			dropEmpty(e)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			if !f.CanSet() {
				continue
			}
			omit := strings.Contains(v.Type().Field(i).Tag.Get("json"), ",omitempty")
			if omit && (f.Kind() == reflect.Slice || f.Kind() == reflect.Map) && f.Len() == 0 {
				f.SetZero()
				continue
			}
			dropEmpty(f)
		}
	}
}

// TestManifestAddresses: the optional device addresses and NIXL agent name
// (docs/dump-format.md) are kept on the parsed manifest, with their values.
func TestManifestAddresses(t *testing.T) {
	file := filepath.Join("testdata", "manifest", "ok-addresses.json")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := layout.ParseManifest(file, data)
	if err != nil {
		t.Fatal(err)
	}
	if m.Parallel.Agent == nil || *m.Parallel.Agent != "7f3c2a10-prefill-rank0" {
		t.Errorf("parallel.agent: got %v", m.Parallel.Agent)
	}
	attn, state := &m.Groups[0].Layers[0], &m.Groups[1].Layers[0]
	for _, c := range []struct {
		what string
		got  func() (uint64, bool)
		want uint64
	}{
		{"attention layer", attn.DeviceAddress, 0x7f00deadbe00},
		{"state layer", state.DeviceAddress, 0x7f1000000000},
		{"state 0", state.States[0].DeviceAddress, 0x7f1000000000},
		{"state 1", state.States[1].DeviceAddress, 0x7f1000000240},
	} {
		if v, ok := c.got(); !ok || v != c.want {
			t.Errorf("%s: address %#x, %v; want %#x", c.what, v, ok, c.want)
		}
	}

	// Without them: no agent, no address.
	data, err = os.ReadFile(filepath.Join("testdata", "manifest", "ok-state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m, err = layout.ParseManifest("ok-state.json", data); err != nil {
		t.Fatal(err)
	}
	if m.Parallel.Agent != nil {
		t.Errorf("an absent agent parsed as %q", *m.Parallel.Agent)
	}
	if _, ok := m.Groups[0].Layers[0].DeviceAddress(); ok {
		t.Error("an absent address parsed as present")
	}

	// The widest address, 16 hex digits, is valid; 17 are not.
	for digits, valid := range map[int]bool{1: true, 16: true, 17: false} {
		text := strings.Replace(string(data), `"tensor": "model.layers.0.self_attn.attn"`,
			`"tensor": "model.layers.0.self_attn.attn", "address": "0x`+strings.Repeat("f", digits)+`"`, 1)
		_, err := layout.ParseManifest("widths.json", []byte(text))
		if (err == nil) != valid {
			t.Errorf("an address of %d hex digits: error %v, want valid %v", digits, err, valid)
		}
	}
}
