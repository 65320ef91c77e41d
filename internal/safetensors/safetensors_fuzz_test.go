package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvaudit/kvaudit/parse"
)

// corpusSeeds returns the files of the corpus (testdata), the seeds of
// both fuzz tests; it fails for fewer than 20.
func corpusSeeds(f *testing.F) [][]byte {
	paths, err := filepath.Glob(filepath.Join(corpusDir, "*.safetensors"))
	if err != nil {
		f.Fatal(err)
	}
	if len(paths) < 20 {
		f.Fatalf("%s holds %d seed files, want at least 20", corpusDir, len(paths))
	}
	seeds := make([][]byte, len(paths))
	for i, p := range paths {
		if seeds[i], err = os.ReadFile(p); err != nil {
			f.Fatal(err)
		}
	}
	return seeds
}

// FuzzSafetensors checks that Parse never panics, that a
// successful parse satisfies every invariant (re-validated from the raw
// bytes) and survives a write/parse round trip, and that a failure returns
// a nil result and a *parse.Error (parse.Safetensors).
func FuzzSafetensors(f *testing.F) {
	for _, b := range corpusSeeds(f) {
		f.Add(b)
	}
	var buf bytes.Buffer
	if err := Write(&buf, map[string]string{"kvaudit.manifest": "{}"}, roundTripTensors()); err != nil {
		f.Fatal(err)
	}
	f.Add(bytes.Clone(buf.Bytes()))
	u8, _ := ParseDtype("U8")
	buf.Reset()
	if err := Write(&buf, nil, []TensorData{{Name: "a", Dtype: u8, Shape: []int64{2, 1}, Data: []byte{1, 2}}}); err != nil {
		f.Fatal(err)
	}
	f.Add(bytes.Clone(buf.Bytes()))

	f.Fuzz(func(t *testing.T, file []byte) {
		s, err := Parse("fuzz.safetensors", file)
		if err != nil {
			if s != nil {
				t.Fatalf("error %v with a non-nil result", err)
			}
			se := parse.As(err, parse.Safetensors)
			if se == nil {
				t.Fatalf("error %v is a %T, want *parse.Error (parse.Safetensors)", err, err)
			}
			return
		}
		checkInvariants(t, s, file)
		for i := 1; i < len(s.Tensors); i++ {
			a, b := s.Tensors[i-1], s.Tensors[i]
			if a.Begin > b.Begin || a.Begin == b.Begin && a.End > b.End {
				t.Fatalf("tensors not sorted by offsets: %q [%d,%d] before %q [%d,%d]", a.Name, a.Begin, a.End, b.Name, b.Begin, b.End)
			}
		}
		// What was read can be written and read back the same.
		tensors := make([]TensorData, len(s.Tensors))
		for i, ti := range s.Tensors {
			tensors[i] = TensorData{Name: ti.Name, Dtype: ti.Dtype, Shape: ti.Shape, Data: ti.Data}
		}
		var out bytes.Buffer
		if err := Write(&out, s.Metadata, tensors); err != nil {
			t.Fatalf("rewriting a parsed file: %v", err)
		}
		s2, err := Parse("rewritten.safetensors", out.Bytes())
		if err != nil {
			t.Fatalf("parsing a rewritten file: %v", err)
		}
		if len(s2.Metadata) != len(s.Metadata) || len(s2.Tensors) != len(s.Tensors) {
			t.Fatalf("rewritten file has %d metadata keys and %d tensors, want %d and %d", len(s2.Metadata), len(s2.Tensors), len(s.Metadata), len(s.Tensors))
		}
		for k, v := range s.Metadata {
			if s2.Metadata[k] != v {
				t.Fatalf("rewritten metadata[%q] = %q, want %q", k, s2.Metadata[k], v)
			}
		}
		for i, want := range s.Tensors {
			got := s2.Tensors[i]
			if got.Name != want.Name || got.Dtype != want.Dtype || got.Begin != want.Begin || got.End != want.End ||
				len(got.Shape) != len(want.Shape) || !bytes.Equal(got.Data, want.Data) {
				t.Fatalf("rewritten tensor %d = %q %v %v [%d,%d], want %q %v %v [%d,%d]", i,
					got.Name, got.Dtype, got.Shape, got.Begin, got.End, want.Name, want.Dtype, want.Shape, want.Begin, want.End)
			}
			for j := range got.Shape {
				if got.Shape[j] != want.Shape[j] {
					t.Fatalf("rewritten tensor %q shape %v, want %v", got.Name, got.Shape, want.Shape)
				}
			}
		}
	})
}
