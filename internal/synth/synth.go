// Package synth writes deterministic synthetic KV cache dumps of model
// presets in any layout, TP and PP split and block size.
//
// The logical KV (the bytes of every cell) is a function of the seed, the
// request id, the cache name, the global head and the token position only,
// so a producer and a consumer synthesized with the same seed hold the same
// KV whatever their configuration and must verify. Block ids, unused blocks
// and slots past num_tokens are filled from the configuration (random
// bytes), so a reader that looks in the wrong place fails.
//
// Expected computes the checks of a configuration straight from the logical
// KV, without any dump: it is the independent reference the tests compare
// the engines with.
package synth

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/memlimit"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
)

// Layouts lists the --layout names.
var Layouts = []string{"flash", "nhd", "hnd", "packed", "packed-token-major"}

// Formats lists how a rank is written: one .safetensors file with the
// manifest embedded, a directory with manifest.json and a .safetensors
// file, or a directory with manifest.json and a raw file read through
// strided sources (with padding between blocks).
var Formats = []string{"safetensors", "dir", "raw"}

// Config is what to synthesize. Zero fields take the preset's defaults.
type Config struct {
	Preset          string
	Layers          int
	TP, PP          int
	Layout          string
	BlockSize       int
	KernelBlockSize int
	NumBlocks       int
	Requests        int
	Tokens          int
	PrefixTokens    int
	Seed            uint64
	Role            string // producer or consumer
	Format          string
	// Engine is whose cache is synthesized: "" or "vllm" (vLLM's layouts),
	// "sglang" (SGLang's pools, docs/sglang.md).
	Engine string
	// ConvLayout places a state layer's conv state dim-first ([channels,
	// width]) or channels-last ([width, channels]); ConvDtype is its dtype
	// (bfloat16 or float32). NoStateSplit writes state layers without their
	// TP split (one slice per rank, comparable only at equal TP sizes).
	ConvLayout   string
	ConvDtype    string
	NoStateSplit bool
	// ZeroTails zeroes the slots of a request's blocks past its last
	// token, as a consumer's connector that keeps the transferred-or-
	// zeroed invariant leaves them (it does not change block tables).
	ZeroTails bool
	// Transfers, for a consumer, also writes its ranks' NIXL logs of a
	// correct pull from the producer synthesized into the same output
	// (out/producer) as out/nixl/AGENT.jsonl (WriteSide); it implies
	// ZeroTails, since vLLM zeroes what the pull leaves.
	Transfers bool
	// Planner is how the logs of Transfers pair blocks: transfer's
	// PlannerVLLM (as vLLM's connector does, the default) or
	// PlannerExact (by token).
	Planner string
	// Values, when set, replaces the logical KV: the 8-byte piece p of the
	// cell of global head h at token position t of layer number L. (The
	// docs/spec.md's worked example uses it.)
	Values func(L, h, t, p int) uint64 `json:"-"`
	// Force lets Write replace existing rank files (kvaudit synth
	// --force); without it an existing file is an error.
	Force bool `json:"-"`
	// MaxBytes bounds the memory Write may use for one rank, which it
	// builds whole before writing it; 0 means what this process may use
	// (the machine's memory, its cgroup's limit, GOMEMLIMIT). Normalize
	// refuses a configuration past it.
	MaxBytes int64 `json:"-"`
	// Progress, when set, is told of the work Write does on the KV,
	// in bytes: each cache's bytes once built in memory and again as
	// they are written out; TotalWork is the sum.
	Progress func(n int64) `json:"-"`
}

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

// Normalize fills defaults and checks the configuration.
func (c Config) Normalize() (Config, error) {
	if c.Preset == "" {
		c.Preset = "llama"
	}
	d, ok := presetDefaults[c.Preset]
	if !ok {
		return c, fmt.Errorf("unknown preset %q (want one of %s)", c.Preset, strings.Join(Presets, ", "))
	}
	if c.Layers == 0 {
		c.Layers = d.layers
	}
	if c.BlockSize == 0 {
		c.BlockSize = d.blockSize
	}
	if c.Tokens == 0 {
		c.Tokens = d.tokens
	}
	if c.Requests == 0 {
		c.Requests = d.requests
	}
	if c.TP == 0 {
		c.TP = 1
	}
	if c.PP == 0 {
		c.PP = 1
	}
	if c.Layout == "" {
		c.Layout = "flash"
	}
	if c.KernelBlockSize == 0 {
		c.KernelBlockSize = c.BlockSize
	}
	if c.Role == "" {
		c.Role = "producer"
	}
	if c.Format == "" {
		c.Format = "safetensors"
	}
	if c.ConvLayout == "" {
		c.ConvLayout = "dim-first"
	}
	if c.ConvDtype == "" {
		c.ConvDtype = "bfloat16"
	}
	switch {
	case !slices.Contains(Layouts, c.Layout):
		return c, fmt.Errorf("unknown layout %q (want one of %s)", c.Layout, strings.Join(Layouts, ", "))
	case !slices.Contains(Formats, c.Format):
		return c, fmt.Errorf("unknown format %q (want one of %s)", c.Format, strings.Join(Formats, ", "))
	case !slices.Contains(ConvLayouts, c.ConvLayout):
		return c, fmt.Errorf("unknown conv layout %q (want one of %s)", c.ConvLayout, strings.Join(ConvLayouts, ", "))
	case c.ConvDtype != "bfloat16" && c.ConvDtype != "float32":
		return c, fmt.Errorf("conv dtype %q: want bfloat16 or float32", c.ConvDtype)
	case c.Role != "producer" && c.Role != "consumer":
		return c, fmt.Errorf("unknown role %q (want producer or consumer)", c.Role)
	case c.Layers < 1 || c.Layers > 1024:
		return c, fieldErrorf("Layers", c.Layers, "is not in 1..1024")
	case c.TP < 1 || c.TP > 64:
		return c, fieldErrorf("TP", c.TP, "is not in 1..64")
	case c.PP < 1 || c.PP > c.Layers:
		return c, fieldErrorf("PP", c.PP, "is not in 1..layers (%d)", c.Layers)
	case c.BlockSize < 1 || c.BlockSize > 4096:
		return c, fieldErrorf("BlockSize", c.BlockSize, "is not in 1..4096")
	case c.KernelBlockSize < 1 || c.BlockSize%c.KernelBlockSize != 0:
		return c, fieldErrorf("KernelBlockSize", c.KernelBlockSize, "does not divide the block size %d", c.BlockSize)
	case c.Requests < 1 || c.Requests > 4096:
		return c, fieldErrorf("Requests", c.Requests, "is not in 1..4096")
	case c.Tokens < 1 || c.Tokens > 1<<24:
		return c, fieldErrorf("Tokens", c.Tokens, "is not in 1..2^24")
	case c.PrefixTokens < 0 || c.PrefixTokens > c.Tokens:
		return c, fieldErrorf("PrefixTokens", c.PrefixTokens, "is not in 0..tokens (%d)", c.Tokens)
	case c.PrefixTokens > 0 && c.Role != "consumer":
		return c, fieldErrorf("PrefixTokens", c.PrefixTokens, "is a consumer's local prefix hit: the role must be consumer")
	case c.Planner != "" && c.Planner != nixl.PlannerVLLM && c.Planner != nixl.PlannerExact:
		return c, fmt.Errorf("unknown planner %q (want %s)", c.Planner, strings.Join(nixl.Planners, " or "))
	case c.Transfers && c.Role != "consumer":
		return c, errors.New("transfers are a consumer's pull from its producer: the role must be consumer")
	}
	switch c.Engine {
	case "", "vllm":
	case "sglang":
		if err := c.normalizeSGLang(); err != nil {
			return c, err
		}
	default:
		return c, fmt.Errorf("unknown engine %q (want one of %s)", c.Engine, strings.Join(Engines, ", "))
	}
	if c.Transfers {
		c.ZeroTails = true
	}
	m, err := BuildModel(c)
	if err != nil {
		return c, err
	}
	for _, g := range m.Groups {
		for _, ca := range g.Caches {
			for _, st := range ca.States {
				for _, seg := range st.Segments {
					if !seg.Replicated && seg.Global%c.TP != 0 {
						return c, fieldErrorf("TP", c.TP, "does not divide the %d rows of a %s segment of %q", seg.Global, st.Name, ca.Name)
					}
				}
			}
			if ca.States == nil && !ca.Latent && ca.Heads%c.TP != 0 && c.TP%ca.Heads != 0 {
				return c, fieldErrorf("TP", c.TP, "neither divides nor is a multiple of the %d KV heads of %q", ca.Heads, ca.Name)
			}
		}
	}
	need := c.Requests * ceilDiv(c.Tokens, c.BlockSize)
	given := c.NumBlocks != 0
	if !given {
		c.NumBlocks = 2*need + 3
	}
	if c.NumBlocks < need {
		return c, fieldErrorf("NumBlocks", c.NumBlocks, "cannot hold %d requests of %d tokens (%d blocks)", c.Requests, c.Tokens, need)
	}
	if c.NumBlocks > 1<<40 {
		return c, fieldErrorf("NumBlocks", c.NumBlocks, "is not in 1..2^40")
	}
	if err := c.checkMemory(m, given); err != nil {
		return c, err
	}
	return c, nil
}

// checkMemory refuses a configuration whose largest rank would not fit in
// c.MaxBytes (or memlimit.Bytes()): Write builds a rank in memory (twice
// over for the raw format) beside its block tables, and a Go runtime
// out-of-memory crash cannot be caught. The error blames NumBlocks when it
// was given (given), else Requests, and says what the rank would take.
func (c *Config) checkMemory(m *Model, given bool) error {
	limit := c.MaxBytes
	if limit <= 0 {
		limit = memlimit.Bytes()
	}
	if limit <= 0 {
		return nil
	}
	// One block's bytes on the largest rank, from a placement of one
	// block (so nothing overflows), in float64.
	one := *c
	one.NumBlocks = 1
	var perBlock float64
	for pp := range c.PP {
		lo, hi := stageLayers(c.Layers, pp, c.PP)
		var stage float64
		for _, g := range m.Groups {
			for _, ca := range g.Caches {
				if ca.Layer < lo || ca.Layer >= hi {
					continue
				}
				if ca.States != nil {
					stage += float64(one.placeState(ca).total)
				} else {
					stage += float64(one.place(ca, 0).total)
				}
			}
		}
		perBlock = max(perBlock, stage)
	}
	rank := perBlock * float64(c.NumBlocks)
	total := rank
	if c.Format == "raw" {
		total *= 2 // the data file is assembled from the tensors
	}
	// The block tables: a permutation of the blocks per group, and the
	// requests' tables.
	total += 8 * float64(len(m.Groups)) * (float64(c.NumBlocks) + float64(c.Requests*ceilDiv(c.Tokens, c.BlockSize)))
	if total <= float64(limit) {
		return nil
	}
	size := fmt.Sprintf("a rank of %s (%s a block)", memlimit.Format(rank), memlimit.Format(perBlock))
	where := fmt.Sprintf("more than the %s of memory this process may use: synth builds each rank in memory before writing it", memlimit.Format(float64(limit)))
	if given {
		return fieldErrorf("NumBlocks", c.NumBlocks, "makes %s, %s", size, where)
	}
	return fieldErrorf("Requests", c.Requests, "of %d tokens need %d blocks, %s, %s", c.Tokens, c.NumBlocks, size, where)
}

// fieldErrorf is a Config field out of range: a *parse.Error of
// parse.SynthConfig whose Field is the field's Go name ("TP",
// "BlockSize", ...) and whose Msg starts with its value ("0 is not in
// 1..64").
func fieldErrorf(field string, value int, format string, args ...any) error {
	return &parse.Error{Format: parse.SynthConfig, Field: field, Msg: strconv.Itoa(value) + " " + fmt.Sprintf(format, args...)}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// RequestID names request i.
func RequestID(i int) string { return fmt.Sprintf("req-%d", i) }

// Piece returns the logical KV: piece p (8 little-endian bytes) of the cell
// of global head h at token position t of a cache, for a request.
func (c *Config) Piece(request, cache string, layer, h, t, p int) uint64 {
	if c.Values != nil {
		return c.Values(layer, h, t, p)
	}
	return mix(cellSeed(c.Seed, request, cache, h, t) ^ uint64(p))
}

// cellSeed mixes everything but the piece index, so a cell costs one mix
// per piece.
func cellSeed(seed uint64, request, cache string, h, t int) uint64 {
	x := mix(seed ^ 0x6b76617564697421)
	x = mix(x ^ strHash(request))
	x = mix(x ^ strHash(cache))
	x = mix(x ^ uint64(h)<<32 ^ uint64(t))
	return x
}

func strHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// configHash identifies everything that may place data differently, so
// block ids and filler differ between configurations.
func (c *Config) configHash() uint64 {
	return strHash(fmt.Sprintf("%d|%s|%d|%d|%s|%d|%d|%d|%s|%s|%s|%s|%v", c.Seed, c.Preset, c.TP, c.PP, c.Layout, c.BlockSize, c.KernelBlockSize, c.NumBlocks, c.Role, c.Format, c.ConvLayout, c.ConvDtype, c.NoStateSplit))
}

// BlockTables returns, per group id, each request's block table: distinct
// block ids drawn from a permutation that depends on the configuration, and
// nulls at the start of a sliding-window group (blocks out of its window).
func (c *Config) BlockTables(m *Model) map[int][]layout.BlockIDs {
	tables := map[int][]layout.BlockIDs{}
	n := ceilDiv(c.Tokens, c.BlockSize)
	for _, g := range m.Groups {
		rng := rand.New(rand.NewPCG(c.configHash(), uint64(g.ID)))
		perm := rng.Perm(c.NumBlocks)
		keep := n
		if g.Kind == layout.KindMamba {
			n, keep = 1, 1 // one state block per request
		}
		if g.Kind == layout.KindSlidingWindow {
			keep = min(n, ceilDiv(g.Window, c.BlockSize)+1)
		}
		for r := range c.Requests {
			table := make(layout.BlockIDs, n)
			for pos := range n {
				table[pos] = layout.NoBlock
				if pos >= n-keep {
					table[pos] = perm[r*n+pos]
				}
			}
			tables[g.ID] = append(tables[g.ID], table)
		}
	}
	return tables
}

// Write synthesizes every rank of cfg under out/<role>/ and returns the
// dump paths (rank-<pp>-<tp>.safetensors, or directories of that name).
func Write(out string, cfg Config) ([]string, error) {
	return WriteContext(context.Background(), out, cfg)
}

// WriteContext is Write, stopping with ctx's error before each rank once
// ctx is done.
func WriteContext(ctx context.Context, out string, cfg Config) ([]string, error) {
	c, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	m, err := BuildModel(c)
	if err != nil {
		return nil, err
	}
	// out and out/<role> are output directories: never symlinks
	// (internal/safeio).
	dir := filepath.Join(out, c.Role)
	if err := safeio.MkdirOut(out); err != nil {
		return nil, err
	}
	if err := safeio.MkdirOut(dir); err != nil {
		return nil, err
	}
	tables := c.BlockTables(m)
	var paths []string
	for pp := range c.PP {
		for tp := range c.TP {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			var p string
			var err error
			if c.Engine == "sglang" {
				p, err = c.writeSGLangRank(dir, m, tables, tp)
			} else {
				p, err = c.writeRank(dir, m, tables, pp, tp)
			}
			if err != nil {
				return nil, err
			}
			paths = append(paths, p)
			if err := rankWritten(ctx); err != nil {
				return nil, err
			}
		}
	}
	return paths, nil
}

// Written is what WriteSide wrote: the dumps of every rank and, with
// Config.Transfers, the consumer ranks' NIXL logs.
type Written struct {
	Dumps, Logs []string
}

// WriteSide is WriteContext, and, with c.Transfers, the consumer ranks'
// logs of a correct pull from out/producer (nixl.Plan) written into
// out/nixl. The producer must have been synthesized into out first.
func WriteSide(ctx context.Context, out string, cfg Config) (*Written, error) {
	c, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	var w Written
	if c.Transfers {
		// The producer first, so that nothing is written without it.
		if _, err := os.Stat(filepath.Join(out, "producer")); err != nil {
			return nil, fmt.Errorf("transfers: no producer in %q: synthesize it into the same --out first (%w)", filepath.Join(out, "producer"), err)
		}
	}
	if w.Dumps, err = WriteContext(ctx, out, c); err != nil || !c.Transfers {
		return &w, err
	}
	prod, err := layout.OpenPaths([]string{filepath.Join(out, "producer")})
	if err != nil {
		return nil, fmt.Errorf("transfers: the producer: %w", err)
	}
	defer layout.CloseAll(prod)
	cons, err := layout.OpenSide(w.Dumps)
	if err != nil {
		return nil, err
	}
	defer layout.CloseAll(cons)
	if w.Logs, err = nixl.WritePlan(filepath.Join(out, "nixl"), prod, cons, c.Force, nixl.PlanOptions{Planner: c.Planner}); err != nil {
		return nil, fmt.Errorf("transfers: %w", err)
	}
	return &w, nil
}

// stageLayers returns the layer numbers [lo, hi) PP stage pp holds.
func stageLayers(layers, pp, stages int) (lo, hi int) {
	return pp * layers / stages, (pp + 1) * layers / stages
}

// placement is how one cache is laid out on one rank.
type placement struct {
	axes      []string
	sizes     []int64
	strides   []int64 // elements
	elem      int     // bytes per element of the tensor
	dtype     string  // safetensors dtype of the tensor
	heads     int     // on this rank
	firstHead int     // global head of local head 0
	replicas  int
	kb        int // kernel blocks per block
	total     int64
}

func (c *Config) place(ca Cache, tpRank int) placement {
	var pl placement
	latent := ca.Latent
	pl.heads, pl.replicas = 1, c.TP
	if !latent {
		if ca.Heads >= c.TP {
			pl.heads, pl.replicas = ca.Heads/c.TP, 1
		} else {
			pl.heads, pl.replicas = 1, c.TP/ca.Heads
		}
		pl.firstHead = (tpRank / pl.replicas) * pl.heads
	}
	dt, _ := layout.TorchDtype(ca.Dtype)
	pl.elem, pl.dtype = dt.Size(), dt.Name
	packed := c.Layout == "packed" || c.Layout == "packed-token-major"
	pl.kb = c.BlockSize / c.KernelBlockSize
	switch {
	case latent && packed:
		pl.axes = []string{"block", "token", "cell"}
	case latent:
		pl.axes = []string{"block", "token", "dim"}
	case c.Layout == "flash":
		pl.axes = []string{"kv", "block", "token", "head", "dim"}
	case c.Layout == "nhd":
		pl.axes = []string{"block", "kv", "token", "head", "dim"}
	case c.Layout == "hnd":
		pl.axes = []string{"block", "kv", "head", "token", "dim"}
	case c.Layout == "packed":
		pl.axes = []string{"block", "head", "token", "cell"}
	default:
		pl.axes = []string{"block", "token", "head", "cell"}
	}
	cellBytes := ca.HeadSize * pl.elem * 2
	if latent {
		cellBytes /= 2
	}
	if packed {
		pl.elem, pl.dtype = 1, "U8"
	}
	for _, a := range pl.axes {
		var n int
		switch a {
		case "block":
			n = c.NumBlocks * pl.kb
		case "token":
			n = c.KernelBlockSize
		case "head":
			n = pl.heads
		case "kv":
			n = 2
		case "dim":
			n = ca.HeadSize
		case "cell":
			n = cellBytes
		}
		pl.sizes = append(pl.sizes, int64(n))
	}
	// Row-major strides; the raw format pads every kernel block row by 64
	// bytes so that strides are not the contiguous ones.
	pl.strides = make([]int64, len(pl.axes))
	run := int64(1)
	for i := len(pl.axes) - 1; i >= 0; i-- {
		pl.strides[i] = run
		run *= pl.sizes[i]
		if pl.axes[i] == "block" && c.Format == "raw" {
			run += int64(64 / pl.elem)
		}
	}
	pl.total = run * int64(pl.elem)
	return pl
}

// writeRank writes one rank's dump.
func (c *Config) writeRank(dir string, m *Model, tables map[int][]layout.BlockIDs, pp, tp int) (string, error) {
	agent := AgentName(c.Role, pp, tp)
	man := &layout.Manifest{
		Format:    layout.ManifestFormat,
		Model:     layout.Model{Name: m.Name, NumKVHeads: m.NumKVHeads},
		Parallel:  layout.Parallel{TPRank: tp, TPSize: c.TP, PPRank: pp, PPSize: c.PP, Agent: &agent},
		NumBlocks: c.NumBlocks,
	}
	next := c.baseAddress(pp, tp)
	lo, hi := stageLayers(c.Layers, pp, c.PP)
	var tensors []layout.TensorData
	var raw []byte
	noise := rand.New(rand.NewPCG(c.configHash(), uint64(pp)<<32|uint64(tp)))
	for _, g := range m.Groups {
		mg := layout.Group{ID: g.ID, Kind: g.Kind, BlockSize: c.BlockSize, SlidingWindow: g.Window, Layers: []layout.Layer{}}
		for _, ca := range g.Caches {
			if ca.Layer < lo || ca.Layer >= hi {
				continue
			}
			var pl placement
			var data []byte
			var layer layout.Layer
			if ca.States != nil {
				pl = c.placeState(ca)
				data = make([]byte, pl.total)
				fillNoise(noise, data)
				c.fillState(data, ca, pl, tables[g.ID], tp)
				c.progress(pl.total)
				layer = layout.Layer{Name: ca.Name, Dtype: ca.States[0].Dtype, Layout: pl.axes, States: c.manifestStates(ca)}
				var off uint64
				for i := range layer.States {
					layer.States[i].Address = hexAddress(next + off)
					off += uint64(stateBytes(layer.States[i]))
				}
			} else {
				pl = c.place(ca, tp)
				data = make([]byte, pl.total)
				fillNoise(noise, data)
				c.fillCache(data, ca, pl, tables[g.ID])
				c.progress(pl.total)
				layer = layout.Layer{
					Name: ca.Name, Dtype: ca.Dtype, HeadSize: ca.HeadSize,
					Layout: pl.axes, MaxTPShards: ca.MaxTPShards, Spec: ca.Spec,
				}
				if !ca.Latent {
					layer.NumKVHeads = pl.heads
				}
			}
			layer.Address = hexAddress(next)
			next += (uint64(pl.total) + addressAlign - 1) / addressAlign * addressAlign
			if c.Format == "raw" {
				strides := slices.Clone(pl.strides)
				layer.Source = &layout.Source{File: "kv.bin", Offset: int64(len(raw)), Dtype: pl.dtype, Shape: pl.sizes, Strides: strides}
				raw = append(raw, data...)
				raw = append(raw, make([]byte, 8)...) // a gap between tensors
			} else {
				layer.Tensor = ca.Name
				dt, _ := layout.ParseDtype(pl.dtype)
				tensors = append(tensors, layout.TensorData{Name: ca.Name, Dtype: dt, Shape: pl.sizes, Data: data})
			}
			mg.Layers = append(mg.Layers, layer)
		}
		man.Groups = append(man.Groups, mg)
	}
	for r := range c.Requests {
		req := layout.Request{ID: RequestID(r), NumTokens: c.Tokens, NumLocalComputedTokens: c.PrefixTokens, BlockTable: map[string]layout.BlockIDs{}}
		for _, g := range m.Groups {
			if g.Kind == layout.KindMamba {
				if req.StateBlock == nil {
					req.StateBlock = map[string]int{}
				}
				req.StateBlock[fmt.Sprint(g.ID)] = tables[g.ID][r][0]
				continue
			}
			req.BlockTable[fmt.Sprint(g.ID)] = tables[g.ID][r]
		}
		man.Requests = append(man.Requests, req)
	}
	name := fmt.Sprintf("rank-%d-%d", pp, tp)
	wo := layout.WriteOptions{Force: c.Force, Progress: c.Progress}
	switch c.Format {
	case "safetensors":
		p := filepath.Join(dir, name+".safetensors")
		return p, layout.WriteDumpFile(p, man, tensors, wo)
	case "dir":
		p := filepath.Join(dir, name)
		return p, layout.WriteDumpDir(p, man, tensors, wo)
	default:
		p := filepath.Join(dir, name)
		if err := layout.WriteDumpDir(p, man, nil, wo); err != nil {
			return "", err
		}
		return p, layout.WriteRawFile(filepath.Join(p, "kv.bin"), raw, wo)
	}
}

// progress tells c.Progress of n bytes done, if set.
func (c *Config) progress(n int64) {
	if c.Progress != nil {
		c.Progress(n)
	}
}

// TotalWork is the sum of what Write tells Progress for cfg: twice the
// bytes of every rank's caches (built, then written), a few more for the
// files' headers. It is 0 for the SGLang engine, whose ranks Write does
// not count.
func TotalWork(cfg Config) (int64, error) {
	c, err := cfg.Normalize()
	if err != nil || c.Engine == "sglang" {
		return 0, err
	}
	m, err := BuildModel(c)
	if err != nil {
		return 0, err
	}
	var total int64
	for pp := range c.PP {
		lo, hi := stageLayers(c.Layers, pp, c.PP)
		for tp := range c.TP {
			for _, g := range m.Groups {
				for _, ca := range g.Caches {
					switch {
					case ca.Layer < lo || ca.Layer >= hi:
					case ca.States != nil:
						total += 2 * c.placeState(ca).total
					default:
						total += 2 * c.place(ca, tp).total
					}
				}
			}
		}
	}
	return total, nil
}

// addressAlign is the alignment of a synthesized cache's device address
// (CUDA's caching allocator hands out 2 MiB segments).
const addressAlign = 2 << 20

// AgentName is the NIXL agent name synth gives a rank of a role.
func AgentName(role string, pp, tp int) string { return fmt.Sprintf("%s-pp%d-tp%d", role, pp, tp) }

// baseAddress is where a rank's first cache lies: deterministic from the
// seed, the role and the rank, in the user half of a 48-bit address space,
// 256 MiB aligned; the rank's caches follow one another from it.
func (c *Config) baseAddress(pp, tp int) uint64 {
	h := mix(c.Seed ^ strHash(fmt.Sprintf("address|%s|%d|%d", c.Role, pp, tp)))
	return 0x7f0000000000 - (h%0x4000)<<28
}

func hexAddress(a uint64) string { return fmt.Sprintf("0x%x", a) }

// stateBytes is the bytes of a manifest state.
func stateBytes(s layout.State) int64 {
	n := int64(dtypeSize(s.Dtype))
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

func fillNoise(rng *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

// fillCache writes the logical KV of every request's valid tokens into the
// cache's tensor, computing each byte's address from the axes alone. It
// writes the same bytes as writing element by element (fill_test.go keeps
// that version and compares them); it only copies a K or V vector in one
// piece when its elements are adjacent.
func (c *Config) fillCache(data []byte, ca Cache, pl placement, tables []layout.BlockIDs) {
	stride := map[string]int64{}
	for i, a := range pl.axes {
		stride[a] = pl.strides[i] * int64(pl.elem) // bytes; absent axes stay 0
	}
	_, cellAxis := stride["cell"]
	blockStride, tokenStride, headStride := stride["block"], stride["token"], stride["head"]
	kvStride, dimStride := stride["kv"], stride["dim"]
	kvN := 2
	if ca.Latent {
		kvN = 1
	}
	dt, _ := layout.TorchDtype(ca.Dtype)
	es := dt.Size()
	cellBytes := kvN * ca.HeadSize * es
	vecBytes := int64(ca.HeadSize * es)
	adjacent := dimStride == int64(es) // a K or V vector is one run
	P := cellBytes / 8
	cell := make([]byte, cellBytes)
	for r, table := range tables {
		req := RequestID(r)
		for pos, b := range table {
			if b == layout.NoBlock {
				continue
			}
			for t := range c.BlockSize {
				tok := pos*c.BlockSize + t
				if tok >= c.Tokens {
					if !c.ZeroTails {
						break
					}
					clear(cell)
				}
				for lh := range pl.heads {
					gh := pl.firstHead + lh
					seed := cellSeed(c.Seed, req, ca.Name, gh, tok)
					for p := range P {
						if tok >= c.Tokens {
							break
						}
						var v uint64
						if c.Values != nil {
							v = c.Values(ca.Layer, gh, tok, p)
						} else {
							v = mix(seed ^ uint64(p))
						}
						binary.LittleEndian.PutUint64(cell[8*p:], v)
					}
					base := int64(b*pl.kb+t/c.KernelBlockSize)*blockStride +
						int64(t%c.KernelBlockSize)*tokenStride + int64(lh)*headStride
					if cellAxis {
						copy(data[base:base+int64(cellBytes)], cell)
						continue
					}
					for kv := range kvN {
						a := base + int64(kv)*kvStride
						if adjacent {
							copy(data[a:a+vecBytes], cell[int64(kv)*vecBytes:])
							continue
						}
						for d := range ca.HeadSize {
							o := (kv*ca.HeadSize + d) * es
							copy(data[a:a+int64(es)], cell[o:o+es])
							a += dimStride
						}
					}
				}
			}
		}
	}
}
