package synth

// This file expands a preset into its caches and groups.

import (
	"fmt"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
)

// Cache is one cache of a model preset.
type Cache struct {
	Name     string
	Layer    int // layer number (and index for the PP split)
	Heads    int // global KV heads (1 for a latent cache)
	HeadSize int
	Dtype    string // PyTorch dtype name
	Latent   bool   // one vector per token: no head and no kv axis
	// MaxTPShards, when set, is written to the manifest.
	MaxTPShards *int
	Spec        string
	// States make the cache a state layer (group kind mamba): its covered
	// states in page order, then Extra bytes of an uncovered extra state.
	States []StateDef
	Extra  int
}

// Group is one KV cache group of a preset.
type Group struct {
	ID     int
	Kind   string
	Window int
	Caches []Cache
}

// Model is a preset expanded for a number of layers.
type Model struct {
	Name       string
	NumKVHeads int
	Groups     []Group
}

// Presets lists the preset names.
var Presets = []string{"tiny", "llama", "mla", "swa", "indexer", "mamba2-hybrid", "gdn-hybrid", "mamba1"}

// ConvLayouts lists the conv state layouts of state presets.
var ConvLayouts = []string{"dim-first", "channels-last"}

type defaults struct {
	layers, blockSize, tokens, requests int
}

var presetDefaults = map[string]defaults{
	"tiny":    {2, 2, 3, 1},
	"llama":   {4, 16, 40, 2},
	"mla":     {4, 16, 40, 2},
	"swa":     {4, 16, 72, 2},
	"indexer": {2, 16, 40, 2},
	// hybrids: even layers attention, odd layers state
	"mamba2-hybrid": {4, 16, 40, 2},
	"gdn-hybrid":    {4, 16, 40, 2},
	"mamba1":        {2, 16, 40, 2},
}

func one() *int { v := 1; return &v }

// BuildModel returns the caches of the configuration's preset and number
// of layers (c normalized).
func BuildModel(c Config) (*Model, error) {
	preset, layers := c.Preset, c.Layers
	attn := func(l, heads, headSize int, dtype string) Cache {
		return Cache{Name: fmt.Sprintf("model.layers.%d.self_attn.attn", l), Layer: l, Heads: heads, HeadSize: headSize, Dtype: dtype}
	}
	m := &Model{Name: "synth/" + preset}
	switch preset {
	case "tiny":
		g := Group{ID: 0, Kind: layout.KindFullAttention}
		for l := range layers {
			g.Caches = append(g.Caches, attn(l, 2, 2, "float32"))
		}
		m.NumKVHeads, m.Groups = 2, []Group{g}
	case "llama":
		g := Group{ID: 0, Kind: layout.KindFullAttention}
		for l := range layers {
			g.Caches = append(g.Caches, attn(l, 8, 128, "bfloat16"))
		}
		m.NumKVHeads, m.Groups = 8, []Group{g}
	case "mla":
		g := Group{ID: 0, Kind: layout.KindMLA}
		for l := range layers {
			g.Caches = append(g.Caches, Cache{Name: fmt.Sprintf("model.layers.%d.self_attn.attn", l), Layer: l, Heads: 1, HeadSize: 576, Dtype: "bfloat16", Latent: true})
		}
		m.NumKVHeads, m.Groups = 1, []Group{g}
	case "swa":
		full := Group{ID: 0, Kind: layout.KindFullAttention}
		swa := Group{ID: 1, Kind: layout.KindSlidingWindow, Window: 20}
		for l := range layers {
			if l%2 == 0 {
				full.Caches = append(full.Caches, attn(l, 4, 64, "bfloat16"))
			} else {
				swa.Caches = append(swa.Caches, attn(l, 4, 64, "bfloat16"))
			}
		}
		m.NumKVHeads, m.Groups = 4, []Group{full, swa}
	case "indexer":
		g := Group{ID: 0, Kind: layout.KindFullAttention}
		for l := range layers {
			g.Caches = append(g.Caches, attn(l, 4, 64, "bfloat16"), Cache{
				Name: fmt.Sprintf("model.layers.%d.self_attn.indexer.k_cache", l), Layer: l,
				Heads: 1, HeadSize: 128, Dtype: "bfloat16", Latent: true, MaxTPShards: one(), Spec: "MLAAttentionSpec",
			})
		}
		m.NumKVHeads, m.Groups = 4, []Group{g}
	case "mamba2-hybrid", "gdn-hybrid", "mamba1":
		return stateModel(c)
	default:
		return nil, fmt.Errorf("unknown preset %q (want one of %s)", preset, strings.Join(Presets, ", "))
	}
	return m, nil
}
