package synth

// This file is the logical KV synth writes: request names, the value of
// each piece of a cell, and the requests' block tables.

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"

	"github.com/kvaudit/kvaudit/layout"
)

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
