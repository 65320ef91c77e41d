package synth

import (
	"fmt"
	"hash/adler32"
	"math/rand/v2"
	"path/filepath"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/dumpwrite"
	"github.com/kvaudit/kvaudit/layout"
)

// Engines lists the --engine names: vllm (the default) and sglang.
var Engines = []string{"vllm", "sglang"}

// sglangPresets are the presets an SGLang pool is synthesized for: one
// group of MHA layers (MHATokenToKVPool) or of MLA latents
// (MLATokenToKVPool).
var sglangPresets = map[string]string{"tiny": layout.SGLangMHAPool, "llama": layout.SGLangMHAPool, "mla": layout.SGLangMLAPool}

// normalizeSGLang checks what an SGLang pool allows: an MHA or MLA preset,
// one PP stage, TP dividing the KV heads, a prefix hit on a page
// boundary; ranks are written as dump directories (manifest.json and
// pool.bin).
func (c *Config) normalizeSGLang() error {
	if _, ok := sglangPresets[c.Preset]; !ok {
		return fmt.Errorf("engine sglang: preset %q: SGLang pools are synthesized for tiny, llama (MHATokenToKVPool) and mla (MLATokenToKVPool)", c.Preset)
	}
	if heads := map[string]int{"tiny": 2, "llama": 8}[c.Preset]; heads > 0 && heads%c.TP != 0 {
		return fieldErrorf("TP", c.TP, "does not divide the %d KV heads of %s: each rank of an SGLang MHA pool holds its share of the heads", heads, c.Preset)
	}
	if c.PP != 1 {
		return fieldErrorf("PP", c.PP, "is not 1: SGLang pools are synthesized for one PP stage")
	}
	if c.KernelBlockSize != c.BlockSize {
		return fieldErrorf("KernelBlockSize", c.KernelBlockSize, "differs from the page size %d: an SGLang pool has no kernel blocks", c.BlockSize)
	}
	if c.PrefixTokens%c.BlockSize != 0 {
		return fieldErrorf("PrefixTokens", c.PrefixTokens, "is not on a page boundary (page size %d): SGLang sends from a page boundary", c.BlockSize)
	}
	if c.Transfers {
		return fmt.Errorf("engine sglang: --transfers writes NIXL logs of vLLM's connector; SGLang pools have none")
	}
	c.Format = "raw"
	return nil
}

// sglangBuffer is one buffer of a synthesized pool.
type sglangBuffer struct {
	ca       Cache
	role     string
	off      int64
	slot     int // bytes per slot
	heads    int // heads on this rank (1 for a latent)
	first    int // first global head
	elemSize int
}

// writeSGLangRank writes one rank of an SGLang pool: pool.bin holds the
// buffers in kv_data_ptrs order (K of every layer then V for MHA, one
// latent buffer per layer for MLA), each of NumBlocks+1 pages (page 0 is
// SGLang's padding page, never allocated); the request's tokens sit in
// its pages, the tail slots of its last page hold bytes that depend on
// the request, cache, head and token only (so a correct transfer of the
// whole page leaves them equal on both sides), and unused pages noise.
// The manifest describes each buffer's layer as a strided source too, so
// kvaudit's own checks read the same bytes, and gives each request the
// value a producer of this layout sends (hash/adler32 of its stream, an
// implementation of its own beside package checksum's).
func (c *Config) writeSGLangRank(dir string, m *Model, tables map[int][]layout.BlockIDs, tp int) (string, error) {
	g := m.Groups[0]
	pool := sglangPresets[c.Preset]
	ps, pages := c.BlockSize, c.NumBlocks+1
	agent := AgentName(c.Role, 0, tp)
	man := &layout.Manifest{
		Format:    layout.ManifestFormat,
		Model:     layout.Model{Name: m.Name, NumKVHeads: m.NumKVHeads},
		Parallel:  layout.Parallel{TPRank: tp, TPSize: c.TP, PPRank: 0, PPSize: 1, Agent: &agent},
		NumBlocks: pages,
		Engine:    layout.EngineSGLang,
		SGLang:    &layout.SGLangPool{Pool: pool, PageSize: ps, File: "pool.bin"},
	}
	var bufs []sglangBuffer
	var off int64
	add := func(ca Cache, role string) {
		dt, _ := layout.TorchDtype(ca.Dtype)
		b := sglangBuffer{ca: ca, role: role, off: off, heads: 1, elemSize: dt.Size()}
		if !ca.Latent {
			b.heads = ca.Heads / c.TP
			b.first = tp * b.heads
		}
		b.slot = b.heads * ca.HeadSize * b.elemSize
		off += int64(pages * ps * b.slot)
		bufs = append(bufs, b)
	}
	if pool == layout.SGLangMHAPool {
		for _, role := range []string{layout.SGLangRoleK, layout.SGLangRoleV} {
			for _, ca := range g.Caches {
				add(ca, role)
			}
		}
	} else {
		for _, ca := range g.Caches {
			add(ca, layout.SGLangRoleKV)
		}
	}
	data := make([]byte, off)
	fillNoise(rand.New(rand.NewPCG(c.configHash(), uint64(tp))), data)
	for i, b := range bufs {
		man.SGLang.Buffers = append(man.SGLang.Buffers, layout.SGLangBufferInfo{
			Ordinal: i, Layer: b.ca.Layer, Role: b.role, Offset: b.off, Size: int64(pages * ps * b.slot), ItemLen: int64(ps * b.slot),
		})
	}
	// Pages: the block tables shifted past the padding page.
	reqPages := make([][]int64, c.Requests)
	for r, table := range tables[g.ID] {
		for _, blk := range table {
			reqPages[r] = append(reqPages[r], int64(blk)+1)
		}
	}
	for r := range c.Requests {
		req := RequestID(r)
		for _, b := range bufs {
			vec := b.ca.HeadSize * b.elemSize
			for pos, page := range reqPages[r] {
				for s := range ps {
					tok := pos*ps + s
					for lh := range b.heads {
						gh := b.first + lh
						at := b.off + int64(((int(page)*ps+s)*b.heads+lh)*vec)
						dst := data[at : at+int64(vec)]
						if tok >= c.Tokens {
							c.sglangTail(dst, req, b, gh, tok)
							continue
						}
						c.sglangVector(dst, req, b, gh, tok)
					}
				}
			}
		}
	}
	mg := layout.Group{ID: g.ID, Kind: g.Kind, BlockSize: ps}
	for _, ca := range g.Caches {
		var k, v *sglangBuffer
		for i := range bufs {
			if bufs[i].ca.Name == ca.Name {
				if k == nil {
					k = &bufs[i]
				} else {
					v = &bufs[i]
				}
			}
		}
		dt, _ := layout.TorchDtype(ca.Dtype)
		es := int64(k.elemSize)
		l := layout.Layer{Name: ca.Name, Dtype: ca.Dtype, HeadSize: ca.HeadSize}
		if v == nil {
			l.Layout = []string{"block", "token", "dim"}
			l.Source = &layout.Source{File: "pool.bin", Offset: k.off, Dtype: dt.Name,
				Shape: []int64{int64(pages), int64(ps), int64(ca.HeadSize)}, Strides: []int64{int64(ps * ca.HeadSize), int64(ca.HeadSize), 1}}
		} else {
			h, d := int64(k.heads), int64(ca.HeadSize)
			l.NumKVHeads = k.heads
			l.Layout = []string{"kv", "block", "token", "head", "dim"}
			l.Source = &layout.Source{File: "pool.bin", Offset: k.off, Dtype: dt.Name,
				Shape:   []int64{2, int64(pages), int64(ps), h, d},
				Strides: []int64{(v.off - k.off) / es, int64(ps) * h * d, h * d, d, 1}}
		}
		mg.Layers = append(mg.Layers, l)
	}
	man.Groups = []layout.Group{mg}
	start := 0
	if c.Role == "consumer" {
		start = c.PrefixTokens
	}
	for r := range c.Requests {
		bt := make(layout.BlockIDs, len(reqPages[r]))
		for i, p := range reqPages[r] {
			bt[i] = int(p)
		}
		// The value sent: hash/adler32 of the stream over the pages from
		// start_send_idx on.
		h := adler32.New()
		for _, b := range bufs {
			for _, page := range reqPages[r][start/ps:] {
				at := b.off + page*int64(ps*b.slot)
				h.Write(data[at : at+int64(ps*b.slot)])
			}
		}
		man.Requests = append(man.Requests, layout.Request{
			ID: RequestID(r), NumTokens: c.Tokens, NumLocalComputedTokens: c.PrefixTokens,
			BlockTable: map[string]layout.BlockIDs{strconv.Itoa(g.ID): bt},
			SGLang:     &layout.SGLangRequest{StartSendIdx: start, KVChecksum: layout.Hex64(h.Sum32()).String()},
		})
	}
	p := filepath.Join(dir, fmt.Sprintf("rank-0-%d", tp))
	wo := dumpwrite.Options{Force: c.Force}
	if err := dumpwrite.Dir(p, man, nil, wo); err != nil {
		return "", err
	}
	return p, dumpwrite.Raw(filepath.Join(p, "pool.bin"), data, wo)
}

// sglangVector writes the K (role k), V (role v) or latent (role kv) vector
// of a token's cell for global head gh: the first or second half of the
// logical cell (Config.Piece), or the whole latent.
func (c *Config) sglangVector(dst []byte, req string, b sglangBuffer, gh, tok int) {
	vec := len(dst)
	first := 0
	if b.role == layout.SGLangRoleV {
		first = vec
	}
	seed := cellSeed(c.Seed, req, b.ca.Name, gh, tok)
	for i := range vec {
		j := first + i
		var piece uint64
		if c.Values != nil {
			piece = c.Values(b.ca.Layer, gh, tok, j/8)
		} else {
			piece = mix(seed ^ uint64(j/8))
		}
		dst[i] = byte(piece >> (8 * (j % 8)))
	}
}

// sglangTail fills a tail slot's vector with bytes of the request, cache,
// role, head and token alone.
func (c *Config) sglangTail(dst []byte, req string, b sglangBuffer, gh, tok int) {
	seed := mix(cellSeed(c.Seed^0x7461696c, req, b.ca.Name+"/"+b.role, gh, tok))
	for i := range dst {
		if i%8 == 0 {
			seed = mix(seed)
		}
		dst[i] = byte(seed >> (8 * (i % 8)))
	}
}
