package layout_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/dumpwrite"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
)

// testCache describes a float32 cache in the FlashAttention layout
// [kv, block, token, head, dim] for a hand-built dump.
type testCache struct {
	name      string
	heads     int
	headSize  int
	dtype     string // default float32
	blocks    int    // block axis size (default num_blocks)
	tokens    int    // token axis size (default the block size)
	noKV      bool
	edit      func(*layout.Layer)
	tensorDup string // name another layer's tensor instead of owning one
}

// buildDump writes a one-file dump with a supported group 0 (two layers of
// a regular cache) and group 1 made of the given caches, and opens it.
func buildDump(t *testing.T, g1 layout.Group, caches []testCache, edit func(*layout.Manifest)) *layout.Dump {
	t.Helper()
	const numBlocks = 4
	m := &layout.Manifest{
		Format:    layout.ManifestFormat,
		Model:     layout.Model{Name: "test", NumKVHeads: 2},
		Parallel:  layout.Parallel{TPSize: 1, PPSize: 1},
		NumBlocks: numBlocks,
	}
	var tensors []safetensors.TensorData
	add := func(g *layout.Group, c testCache) {
		if c.dtype == "" {
			c.dtype = "float32"
		}
		dt, err := layout.TorchDtype(c.dtype)
		if err != nil {
			t.Fatal(err)
		}
		if c.blocks == 0 {
			c.blocks = numBlocks
		}
		if c.tokens == 0 {
			c.tokens = g.BlockSize
		}
		l := layout.Layer{Name: c.name, Dtype: c.dtype, NumKVHeads: c.heads, HeadSize: c.headSize, Tensor: c.name,
			Layout: []string{"kv", "block", "token", "head", "dim"}}
		shape := []int64{2, int64(c.blocks), int64(c.tokens), int64(c.heads), int64(c.headSize)}
		if c.noKV {
			l.Layout, shape = l.Layout[1:], shape[1:]
		}
		if c.edit != nil {
			c.edit(&l)
		}
		if c.tensorDup != "" {
			l.Tensor = c.tensorDup
		} else {
			n := int64(dt.Size())
			for _, d := range shape {
				n *= d
			}
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(i * 7)
			}
			tensors = append(tensors, safetensors.TensorData{Name: c.name, Dtype: dt, Shape: shape, Data: data})
		}
		g.Layers = append(g.Layers, l)
	}
	g0 := layout.Group{ID: 0, Kind: layout.KindFullAttention, BlockSize: 2}
	add(&g0, testCache{name: "model.layers.0.self_attn.attn", heads: 2, headSize: 2})
	add(&g0, testCache{name: "model.layers.1.self_attn.attn", heads: 2, headSize: 2})
	for _, c := range caches {
		add(&g1, c)
	}
	m.Groups = []layout.Group{g0, g1}
	b := []int{1, 3}
	m.Requests = []layout.Request{{ID: "r", NumTokens: 3, BlockTable: map[string]layout.BlockIDs{
		"0": {b[0], b[1]}, "1": {b[1], b[0]},
	}}}
	if edit != nil {
		edit(m)
	}
	return writeAndOpen(t, m, tensors)
}

// buildDumpWith writes a dump with only the regular group 0, after add has
// added groups and tensors, and opens it.
func buildDumpWith(t *testing.T, add func(m *layout.Manifest, tensors *[]safetensors.TensorData)) *layout.Dump {
	t.Helper()
	d := buildDump(t, layout.Group{ID: 99, Kind: layout.KindFullAttention, BlockSize: 2}, nil, func(m *layout.Manifest) {
		m.Groups = m.Groups[:1]
		delete(m.Requests[0].BlockTable, "1")
	})
	m := d.Manifest
	var tensors []safetensors.TensorData
	f, err := safetensors.Open(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, ti := range f.Tensors {
		tensors = append(tensors, safetensors.TensorData{Name: ti.Name, Dtype: ti.Dtype, Shape: ti.Shape, Data: append([]byte(nil), ti.Data...)})
	}
	add(m, &tensors)
	return writeAndOpen(t, m, tensors)
}

func writeAndOpen(t *testing.T, m *layout.Manifest, tensors []safetensors.TensorData) *layout.Dump {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dump.safetensors")
	if err := dumpwrite.File(path, m, tensors); err != nil {
		t.Fatal(err)
	}
	d, err := layout.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func intp(v int) *int { return &v }

// TestReasons: each fixed reason of docs/spec.md §4 skips its group, and the
// supported group beside it is still checksummed.
func TestReasons(t *testing.T) {
	full := layout.Group{ID: 1, Kind: layout.KindFullAttention, BlockSize: 2}
	cases := []struct {
		name   string
		group  layout.Group
		caches []testCache
		edit   func(*layout.Manifest)
		reason string
	}{
		{"no layer number", full, []testCache{{name: "model.layers.x.attn", heads: 2, headSize: 2}}, nil, layout.ReasonNoLayerNumber},
		{"two layer numbers", full, []testCache{{name: "model.layers.2.experts.3.attn", heads: 2, headSize: 2}}, nil, layout.ReasonNoLayerNumber},
		{"two modules, one number", full, []testCache{
			{name: "model.layers.2.self_attn.attn", heads: 2, headSize: 2},
			{name: "mtp.layers.2.self_attn.attn", heads: 2, headSize: 2},
		}, nil, layout.ReasonSharedLayerNumber},
		{"too many heads", full, []testCache{{name: "model.layers.2.attn", heads: 65537, headSize: 1, blocks: 4, tokens: 2}}, nil, layout.ReasonTooManyHeads},
		{"too many heads over two caches", full, []testCache{
			{name: "model.layers.2.attn.a", heads: 32768, headSize: 1},
			{name: "model.layers.2.attn.b", heads: 32769, headSize: 1},
		}, nil, layout.ReasonTooManyHeads},
		{"replication unknown", full, []testCache{{name: "model.layers.2.attn", heads: 1, headSize: 2}}, func(m *layout.Manifest) {
			m.Parallel.TPSize, m.Model.NumKVHeads = 4, 3
			m.Groups[0].Layers[0].NumKVHeads = 2
		}, layout.ReasonReplication},
		{"num_blocks", full, []testCache{{name: "model.layers.2.attn", heads: 2, headSize: 2, blocks: 6}}, nil, layout.ReasonNumBlocks},
		{"fewer blocks", full, []testCache{{name: "model.layers.2.attn", heads: 2, headSize: 2, blocks: 2}}, nil, layout.ReasonNumBlocks},
		{"pieces", full, []testCache{{name: "model.layers.2.attn", heads: 2, headSize: 3, dtype: "bfloat16"}}, nil, layout.ReasonPieces},
		{"kernel blocks", layout.Group{ID: 1, Kind: layout.KindFullAttention, BlockSize: 4}, []testCache{{name: "model.layers.2.attn", heads: 2, headSize: 2, blocks: 8, tokens: 3}}, nil, layout.ReasonKernelBlocks},
		{"compressed", full, []testCache{{name: "model.layers.2.attn", heads: 2, headSize: 2, edit: func(l *layout.Layer) { l.TokensPerState = intp(4) }}}, nil, layout.ReasonCompressed},
		{"head slots", full, []testCache{{name: "model.layers.2.attn", heads: 2, headSize: 2, edit: func(l *layout.Layer) { l.NumHeadSlots = intp(4) }}}, nil, layout.ReasonHeadSlots},
		{"host resident", layout.Group{ID: 1, Kind: layout.KindFullAttention, BlockSize: 2, HostResident: true}, []testCache{{name: "model.layers.2.attn", heads: 2, headSize: 2}}, nil, layout.ReasonHostResident},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := buildDump(t, tc.group, tc.caches, tc.edit)
			if got := d.Groups[1].Skip; got != tc.reason {
				t.Fatalf("group 1 skipped for %q, want %q", got, tc.reason)
			}
			if !slices.Contains(layout.Reasons, tc.reason) {
				t.Errorf("%q is not in layout.Reasons", tc.reason)
			}
			if d.Groups[0].Skip != "" || len(d.Groups[0].Caches) != 2 {
				t.Fatalf("group 0 skipped (%q) or lost caches", d.Groups[0].Skip)
			}
			c, err := side.Compute(context.Background(), []*layout.Dump{d}, checksum.Options{Engine: checksum.Reference{}})
			if err != nil && tc.edit == nil {
				t.Fatal(err)
			}
			if err == nil {
				r := c.Requests[0]
				if len(r.Groups) != 1 || r.Groups[0].ID != 0 || r.Groups[0].Positions() != 2 {
					t.Fatalf("checks %+v: want group 0 with two positions", r.Groups)
				}
				if c.Skipped[1] != tc.reason {
					t.Errorf("Skipped = %v", c.Skipped)
				}
			}
		})
	}
}

// TestKVSharing: layers aliasing one cache (alias_of, or the same tensor)
// count it once, under the lowest (layer number, name); the fingerprint
// still covers every name.
func TestKVSharing(t *testing.T) {
	full := layout.Group{ID: 1, Kind: layout.KindFullAttention, BlockSize: 2}
	d := buildDump(t, full, []testCache{
		{name: "model.layers.5.attn", heads: 2, headSize: 2},
		{name: "model.layers.3.attn", heads: 2, headSize: 2, tensorDup: "model.layers.5.attn"},
		{name: "model.layers.9.attn", heads: 2, headSize: 2, edit: func(l *layout.Layer) {
			l.AliasOf, l.Tensor = "model.layers.5.attn", ""
		}, tensorDup: ""},
	}, func(m *layout.Manifest) {
		// the alias has no tensor of its own
		ls := m.Groups[1].Layers
		ls[2].Tensor = ""
	})
	g := d.Groups[1]
	if g.Skip != "" || len(g.Caches) != 1 {
		t.Fatalf("skip %q, %d caches; want one shared cache", g.Skip, len(g.Caches))
	}
	c := g.Caches[0]
	if c.Number != 3 || c.Module != "model.layers.3" || !slices.Equal(c.Aliases, []string{"model.layers.3.attn", "model.layers.5.attn", "model.layers.9.attn"}) {
		t.Errorf("cache counted as layer %d (%s) with aliases %v; want layer 3 and all three names", c.Number, c.Module, c.Aliases)
	}
	if len(g.Layers) != 3 {
		t.Errorf("fingerprint covers %d layers, want 3", len(g.Layers))
	}
}

// TestModuleHeads: several caches of one module number their heads
// consecutively in layer-name order.
func TestModuleHeads(t *testing.T) {
	full := layout.Group{ID: 1, Kind: layout.KindFullAttention, BlockSize: 2}
	d := buildDump(t, full, []testCache{
		{name: "model.layers.2.self_attn.indexer", heads: 1, headSize: 4, noKV: true},
		{name: "model.layers.2.self_attn.attn", heads: 2, headSize: 2},
	}, nil)
	g := d.Groups[1]
	if g.Skip != "" {
		t.Fatal(g.Skip)
	}
	var got []string
	for _, c := range g.Caches {
		got = append(got, fmt.Sprintf("%s@%d+%d", c.Layer.Name, c.HeadBase, c.Heads))
	}
	want := []string{"model.layers.2.self_attn.attn@0+2", "model.layers.2.self_attn.indexer@2+1"}
	if !slices.Equal(got, want) {
		t.Errorf("heads %v, want %v", got, want)
	}
}

// TestStateWidthReason: a state of 8-byte elements (float64) with a split
// makes its group unsupported; the attention group beside it is kept.
func TestStateWidthReason(t *testing.T) {
	for _, tc := range []struct {
		dtype  string
		split  bool
		reason string
	}{
		{"float64", true, layout.ReasonStateWidth},
		{"uint8", true, layout.ReasonStateWidth},
		{"float32", true, ""},
		{"bfloat16", false, layout.ReasonPieces}, // 3x5 bf16 = 30 bytes, not whole 8-byte pieces
		{"float64", false, ""},                   // without a split, 8-byte pieces of bytes
	} {
		st := layout.State{Dtype: tc.dtype, Shape: []int64{3, 5}}
		if tc.split {
			st.Split = &layout.Split{Axis: 1, Segments: [][2]int{{5, 1}}}
		}
		g1 := layout.Group{ID: 1, Kind: layout.KindMamba, BlockSize: 2}
		d := buildStateDump(t, g1, st)
		if got := d.Groups[1].Skip; got != tc.reason {
			t.Errorf("%s split=%v: skip %q, want %q", tc.dtype, tc.split, got, tc.reason)
		}
		if d.Groups[0].Skip != "" || len(d.Groups[0].Caches) != 2 {
			t.Errorf("%s split=%v: the attention group was not kept", tc.dtype, tc.split)
		}
	}
}

// buildStateDump writes a dump with the regular group 0 and one state
// layer holding st in a 256-byte page.
func buildStateDump(t *testing.T, g1 layout.Group, st layout.State) *layout.Dump {
	t.Helper()
	return buildDumpWith(t, func(m *layout.Manifest, tensors *[]safetensors.TensorData) {
		u8, _ := layout.ParseDtype("U8")
		g1.Layers = []layout.Layer{{Name: "model.layers.7.mixer", Dtype: st.Dtype, Tensor: "state", Layout: []string{"block", "page"}, States: []layout.State{st}}}
		m.Groups = append(m.Groups, g1)
		*tensors = append(*tensors, safetensors.TensorData{Name: "state", Dtype: u8, Shape: []int64{int64(m.NumBlocks), 256}, Data: make([]byte, m.NumBlocks*256)})
		m.Requests[0].StateBlock = map[string]int{"1": 2}
	})
}
