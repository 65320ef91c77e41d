package synth

// This file fills a rank's caches: noise, then the logical KV of each
// request's blocks where the layout places it.

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/kvaudit/kvaudit/layout"
)

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
