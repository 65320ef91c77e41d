// Package synthstore is a synthetic side's KV as an engine's offload tier
// stores it: the blocks scrub.WriteStore writes as a store (kvaudit synth
// --store, and the campaign's store trials). It lies apart from
// internal/synth, which cannot import scrub (scrub's tests import
// internal/bench, and so internal/synth), and scrub reads stores without
// the dump packages synth brings.
package synthstore

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/scrub"
)

// Blocks is a synthetic side's KV as an offload tier would store it:
// one block per request, attention group, block position and TP rank
// (kvaudit synth --store, and the campaign's store trials). A block holds,
// for each cache of the group in turn, K then V (a latent cache: its one
// vector), each as block_size token slots of the rank's heads, each head
// the cache's head size of synth's logical KV (Config.Piece, the values
// synth writes into the dumps); slots past the request's last token are
// zero, as a tier stores a partial block. State groups (Mamba) are left
// out: the tiers store attention blocks. The block's hash chains the
// seed, the request, the group and the positions before it, as vLLM's
// prefix-cache hashes do.
func Blocks(cfg synth.Config) ([]scrub.Block, error) {
	c, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	m, err := synth.BuildModel(c)
	if err != nil {
		return nil, err
	}
	var out []scrub.Block
	for i := range c.Requests {
		req := synth.RequestID(i)
		for _, g := range m.Groups {
			var caches []synth.Cache
			for _, ca := range g.Caches {
				if len(ca.States) == 0 {
					caches = append(caches, ca)
				}
			}
			if len(caches) == 0 {
				continue
			}
			prev := sha256.Sum256(fmt.Appendf(nil, "kvaudit synth %d %s group %d", c.Seed, req, g.ID))
			for b := range (c.Tokens + c.BlockSize - 1) / c.BlockSize {
				hash := sha256.Sum256(fmt.Appendf(prev[:], " block %d", b))
				prev = hash
				for r := range c.TP {
					out = append(out, scrub.Block{Model: m.Name, Rank: r, TP: c.TP, Group: g.ID, Hash: hash[:], Data: synthBlock(&c, req, caches, b, r)})
				}
			}
		}
	}
	return out, nil
}

func synthBlock(c *synth.Config, req string, caches []synth.Cache, b, rank int) []byte {
	var data []byte
	for _, ca := range caches {
		size := map[string]int{"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}[ca.Dtype]
		if size == 0 {
			size = 2
		}
		headBytes := ca.HeadSize * size
		heads := []int{0}
		kv := []string{""}
		if !ca.Latent {
			per := max(ca.Heads/c.TP, 1)
			heads = heads[:0]
			for h := rank * per; h < (rank+1)*per && h < ca.Heads; h++ {
				heads = append(heads, h)
			}
			kv = []string{"/k", "/v"}
		}
		for _, side := range kv {
			for s := range c.BlockSize {
				t := b*c.BlockSize + s
				for _, h := range heads {
					start := len(data)
					data = append(data, make([]byte, headBytes)...)
					if t >= c.Tokens {
						continue
					}
					head := data[start:]
					for p := 0; p*8 < headBytes; p++ {
						var piece [8]byte
						binary.LittleEndian.PutUint64(piece[:], c.Piece(req, ca.Name+side, ca.Layer, h, t, p))
						copy(head[p*8:], piece[:])
					}
				}
			}
		}
	}
	return data
}
