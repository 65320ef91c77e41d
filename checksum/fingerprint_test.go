package checksum

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
)

// TestPyStr compares pyStr with Python 3.11's repr of tricky strings
// (quote choice, escapes, non-printable characters), recorded in
// testdata/pyrepr/strings.txt by Python itself.
func TestPyStr(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "pyrepr", "strings.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		var pair [2]string
		if err := json.Unmarshal([]byte(line), &pair); err != nil {
			t.Fatal(err)
		}
		if got := pyStr(pair[0]); got != pair[1] {
			t.Errorf("pyStr(%q) = %s, Python says %s", pair[0], got, pair[1])
		}
		n++
	}
	if n < 15 {
		t.Fatalf("only %d vectors", n)
	}
}

// TestLayerHash checks tuples and their hashes against Python: repr of
// the tuple, SHA-256, first 8 bytes little-endian (values computed with
// Python 3.11's repr and hashlib).
func TestLayerHash(t *testing.T) {
	g := &layout.Group{BlockSize: 16}
	attn := layout.LayerInfo{Name: "model.layers.0.self_attn.attn", Spec: "FullAttentionSpec", Dtype: "bfloat16"}
	state := layout.LayerInfo{Name: "model.layers.1.mixer", Spec: "MambaSpec", States: []layout.StateShape{
		{Dtype: "bfloat16", Shape: []int64{3, 1280}}, {Dtype: "float32", Shape: []int64{8, 16, 8}},
	}}
	one := layout.LayerInfo{Name: "model.layers.1.mixer", Spec: "MambaSpec", States: []layout.StateShape{{Dtype: "float32", Shape: []int64{8}}}}
	for _, tc := range []struct {
		info  layout.LayerInfo
		block int
		flat  bool
		tuple string
		hash  uint64
	}{
		{attn, 16, true, "('model.layers.0.self_attn.attn', 'FullAttentionSpec', 16, 'torch.bfloat16')", 0x05b265ca4f481ca9},
		{attn, 16, false, "('model.layers.0.self_attn.attn', 'FullAttentionSpec', 'torch.bfloat16')", 0xd8fe581622df5382},
		{state, 64, true, "('model.layers.1.mixer', 'MambaSpec', 64, (('torch.bfloat16', (3, 1280)), ('torch.float32', (8, 16, 8))))", 0x3b89ff2701d7c0e3},
		{one, 64, false, "('model.layers.1.mixer', 'MambaSpec', (('torch.float32', (8,)),))", 0xe8ab5ad41e60bb09},
	} {
		g.BlockSize = tc.block
		tuple := layerTuple(g, tc.info, tc.flat)
		if tuple != tc.tuple {
			t.Errorf("tuple %s, want %s", tuple, tc.tuple)
		}
		if h := layerHash(tuple); h != tc.hash {
			t.Errorf("hash of %s = %#x, want %#x", tuple, h, tc.hash)
		}
	}
}
