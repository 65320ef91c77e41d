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
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/kvaudit/kvaudit/internal/dumpwrite"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/layout"
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
	var tensors []safetensors.TensorData
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
				tensors = append(tensors, safetensors.TensorData{Name: ca.Name, Dtype: dt, Shape: pl.sizes, Data: data})
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
	wo := dumpwrite.Options{Force: c.Force, Progress: c.Progress}
	switch c.Format {
	case "safetensors":
		p := filepath.Join(dir, name+".safetensors")
		return p, dumpwrite.File(p, man, tensors, wo)
	case "dir":
		p := filepath.Join(dir, name)
		return p, dumpwrite.Dir(p, man, tensors, wo)
	default:
		p := filepath.Join(dir, name)
		if err := dumpwrite.Dir(p, man, nil, wo); err != nil {
			return "", err
		}
		return p, dumpwrite.Raw(filepath.Join(p, "kv.bin"), raw, wo)
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
