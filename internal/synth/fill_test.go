package synth

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
)

// fillCacheByElement is fillCache as first written: every element copied on
// its own, every stride looked up by axis name; with ZeroTails, a slot past
// the request's last token gets zero elements. fillCache must write the same
// bytes.
func (c *Config) fillCacheByElement(data []byte, ca Cache, pl placement, tables []layout.BlockIDs) {
	stride := map[string]int64{}
	for i, a := range pl.axes {
		stride[a] = pl.strides[i] * int64(pl.elem) // bytes; absent axes stay 0
	}
	_, cellAxis := stride["cell"]
	kvN := 2
	if ca.Latent {
		kvN = 1
	}
	es := map[string]int{"bfloat16": 2, "float16": 2, "float32": 4}[ca.Dtype]
	cellBytes := kvN * ca.HeadSize * es
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
				if tok >= c.Tokens && !c.ZeroTails {
					break
				}
				for lh := range pl.heads {
					gh := pl.firstHead + lh
					seed := cellSeed(c.Seed, req, ca.Name, gh, tok)
					for p := range P {
						var v uint64
						if tok >= c.Tokens {
							v = 0 // a tail slot, zeroed
						} else if c.Values != nil {
							v = c.Values(ca.Layer, gh, tok, p)
						} else {
							v = mix(seed ^ uint64(p))
						}
						for k := range 8 {
							cell[8*p+k] = byte(v >> (8 * k))
						}
					}
					base := int64(b*pl.kb+t/c.KernelBlockSize)*stride["block"] +
						int64(t%c.KernelBlockSize)*stride["token"] + int64(lh)*stride["head"]
					if cellAxis {
						copy(data[base:base+int64(cellBytes)], cell)
						continue
					}
					for kv := range kvN {
						for d := range ca.HeadSize {
							o := (kv*ca.HeadSize + d) * es
							a := base + int64(kv)*stride["kv"] + int64(d)*stride["dim"]
							copy(data[a:a+int64(es)], cell[o:o+es])
						}
					}
				}
			}
		}
	}
}

// TestFillCacheSameBytes checks the fast fillCache against the element by
// element one on every preset, layout, format, TP rank and kernel block
// size, with and without Values, with and without ZeroTails, over the same
// noise.
func TestFillCacheSameBytes(t *testing.T) {
	checked := 0
	for _, preset := range Presets {
		for _, lay := range Layouts {
			for _, format := range Formats {
				for _, kbs := range []int{0, 1} {
					for _, variant := range []struct{ values, zeroTails bool }{{false, false}, {true, false}, {false, true}} {
						values := variant.values
						cfg := Config{Preset: preset, Layout: lay, Format: format, TP: 2, KernelBlockSize: kbs, Tokens: 37, Seed: 3, ZeroTails: variant.zeroTails}
						if values {
							cfg.Values = func(L, h, t, p int) uint64 { return uint64(L)<<48 | uint64(h)<<32 | uint64(t)<<8 | uint64(p) }
						}
						c, err := cfg.Normalize()
						if err != nil {
							t.Fatal(err)
						}
						m, err := BuildModel(c)
						if err != nil {
							t.Fatal(err)
						}
						tables := c.BlockTables(m)
						for _, g := range m.Groups {
							for _, ca := range g.Caches {
								if ca.States != nil {
									continue // state layers are written by fillState
								}
								for tp := range c.TP {
									pl := c.place(ca, tp)
									noise := rand.New(rand.NewPCG(1, 2))
									fast := make([]byte, pl.total)
									fillNoise(noise, fast)
									slow := bytes.Clone(fast)
									c.fillCache(fast, ca, pl, tables[g.ID])
									c.fillCacheByElement(slow, ca, pl, tables[g.ID])
									if !bytes.Equal(fast, slow) {
										i := 0
										for fast[i] == slow[i] {
											i++
										}
										t.Fatalf("%s", fmt.Sprintf("%s/%s/%s kbs %d values %v zero tails %v cache %q tp %d: first difference at byte %d", preset, lay, format, kbs, values, c.ZeroTails, ca.Name, tp, i))
									}
									checked++
								}
							}
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no cache compared")
	}
}
