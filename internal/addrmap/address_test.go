package addrmap_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// addressConfigs are synthesized ranks of every layout, format, kernel
// block split and state preset.
func addressConfigs() []synth.Config {
	var cs []synth.Config
	for _, lay := range synth.Layouts {
		for _, f := range synth.Formats {
			cs = append(cs, synth.Config{Preset: "tiny", Layout: lay, Format: f, BlockSize: 4, KernelBlockSize: 2, TP: 1, Tokens: 7})
		}
	}
	cs = append(cs,
		synth.Config{Preset: "llama", Layout: "hnd", TP: 2, Format: "raw"},
		synth.Config{Preset: "mla", TP: 2},
		synth.Config{Preset: "indexer", Layout: "nhd"},
		synth.Config{Preset: "mamba2-hybrid", TP: 2, Format: "raw"},
		synth.Config{Preset: "gdn-hybrid", ConvLayout: "channels-last"},
		synth.Config{Preset: "mamba1", NoStateSplit: true},
	)
	return cs
}

// TestResolveCell: one byte of a cell, found through the geometry that
// reads cells (CellView) and the dump's address, resolves to exactly that
// cell (block, kernel row, token, head, byte); the bytes of every block's
// cells (Intervals) resolve back to that block's cells, and cover them all.
func TestResolveCell(t *testing.T) {
	for i, c := range addressConfigs() {
		c.Seed = uint64(i + 1)
		t.Run(fmt.Sprintf("%s-%s-%s-tp%d", c.Preset, c.Layout, c.Format, c.TP), func(t *testing.T) {
			paths, err := synth.Write(t.TempDir(), c)
			if err != nil {
				t.Fatal(err)
			}
			d, err := layout.Open(paths[len(paths)-1])
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			am, err := addrmap.New(d)
			if err != nil {
				t.Fatal(err)
			}
			if len(am.Regions) == 0 {
				t.Fatal("no regions")
			}
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			for _, r := range am.Regions {
				for _, v := range r.Views {
					checkCells(t, am, r, v, d.Manifest.NumBlocks, rng)
				}
				if !r.State {
					checkIntervals(t, am, r, d.Manifest.NumBlocks)
					checkNonZero(t, r, min(d.Manifest.NumBlocks, 3))
				}
			}
		})
	}
}

// cellAddress is the address of byte b of the logical cell (K then V) of
// token tok (block-relative) of local head h in block blk, from the
// CellView and the region's start.
func cellAddress(r *addrmap.Region, v *layout.LayerView, blk, tok, h, b int) uint64 {
	c := &v.Cells
	a := c.CellAddr(blk, tok, h)
	for _, run := range c.Runs {
		if b < run.Len {
			return r.Start + uint64(a+run.Offset+int64(b))
		}
		b -= run.Len
	}
	panic("byte past the cell")
}

func checkCells(t *testing.T, am *addrmap.Map, r *addrmap.Region, v *layout.LayerView, blocks int, rng *rand.Rand) {
	t.Helper()
	c := &v.Cells
	for range 40 {
		blk := rng.IntN(blocks)
		tok := rng.IntN(c.KernelBlocks * c.KernelTokens)
		h := rng.IntN(c.Heads)
		b := rng.IntN(c.CellBytes)
		addr := cellAddress(r, v, blk, tok, h, b)
		var got []addrmap.Cells
		out, pad, err := am.Resolve(addr, 1, func(x addrmap.Cells) error { got = append(got, x); return nil })
		if err != nil || out != 0 || pad != 0 || len(got) != 1 {
			t.Fatalf("resolve 0x%x: %d cells, outside %d, padding %d, %v", addr, len(got), out, pad, err)
		}
		x := got[0]
		k, tk := tok/c.KernelTokens, tok%c.KernelTokens
		want := [...]int{blk, k, k + 1, tk, tk + 1, h, h + 1}
		gotv := [...]int{x.Block, x.Kernels[0], x.Kernels[1], x.Tokens[0], x.Tokens[1], x.Heads[0], x.Heads[1]}
		if r.State {
			// A state row's byte: its view and row (a split along
			// another axis than the first: the state's bytes, no row).
			want[3], want[4] = 0, 1
			if x.View == nil {
				want[5], want[6] = 0, 1
			}
		}
		if gotv != want || x.Region != r || x.Len != 1 || x.Addr != addr {
			t.Fatalf("layer %s byte 0x%x (block %d token %d head %d byte %d): got block %d kernels %v tokens %v heads %v len %d addr 0x%x",
				r.Layer.Name, addr, blk, tok, h, b, x.Block, x.Kernels, x.Tokens, x.Heads, x.Len, x.Addr)
		}
		if x.View != nil && x.View != v {
			t.Fatalf("layer %s byte 0x%x: view %p, want %p", r.Layer.Name, addr, x.View, v)
		}
		if x.View != nil && (x.Bytes != [2]int{b, b + 1}) && !r.State {
			t.Fatalf("layer %s byte 0x%x: cell bytes %v, want [%d %d]", r.Layer.Name, addr, x.Bytes, b, b+1)
		}
	}
}

func checkIntervals(t *testing.T, am *addrmap.Map, r *addrmap.Region, blocks int) {
	t.Helper()
	v := r.Views[0]
	c := &v.Cells
	per := uint64(c.KernelTokens*c.Heads) * uint64(c.CellBytes)
	for blk := range blocks {
		for k := range c.KernelBlocks {
			var total uint64
			r.Intervals(blk, k, [2]int{0, c.KernelTokens}, func(lo, hi uint64) {
				total += hi - lo
				_, pad, _ := am.Resolve(lo, hi-lo, func(x addrmap.Cells) error {
					if x.Block != blk || x.Kernels != [2]int{k, k + 1} {
						t.Fatalf("layer %s block %d kernel %d: an interval holds block %d kernels %v", r.Layer.Name, blk, k, x.Block, x.Kernels)
					}
					return nil
				})
				if pad != 0 {
					t.Fatalf("layer %s block %d: an interval holds %d bytes of padding", r.Layer.Name, blk, pad)
				}
			})
			if total != per {
				t.Fatalf("layer %s block %d kernel %d: intervals hold %d bytes, the cells %d", r.Layer.Name, blk, k, total, per)
			}
		}
	}
}

// checkNonZero: NonZero over a kernel row's intervals, and from a zero
// byte inside one, counts the non-zero bytes of the cells there and finds
// the lowest address of one, as the cells read through the CellView say.
func checkNonZero(t *testing.T, r *addrmap.Region, blocks int) {
	t.Helper()
	v := r.Views[0]
	c := &v.Cells
	var cell []byte
	for blk := range blocks {
		for k := range c.KernelBlocks {
			bytes := map[uint64]byte{}
			for tk := range c.KernelTokens {
				tok := k*c.KernelTokens + tk
				for h := range c.Heads {
					cell = c.ReadCell(cell[:0], blk, tok, h)
					for b, x := range cell {
						bytes[cellAddress(r, v, blk, tok, h, b)] = x
					}
				}
			}
			want := func(lo, hi uint64) (n, first uint64) {
				for a := lo; a < hi; a++ {
					if bytes[a] != 0 {
						if n == 0 {
							first = a
						}
						n++
					}
				}
				return n, first
			}
			r.Intervals(blk, k, [2]int{0, c.KernelTokens}, func(lo, hi uint64) {
				starts := []uint64{lo}
				for a := lo; a < hi; a++ {
					if bytes[a] == 0 {
						starts = append(starts, a)
						break
					}
				}
				for _, s := range starts {
					n, first := r.NonZero(s, hi)
					wn, wfirst := want(s, hi)
					if n != wn || first != wfirst {
						t.Fatalf("layer %s block %d kernel %d: NonZero(0x%x, 0x%x) = %d bytes from 0x%x, the cells %d from 0x%x",
							r.Layer.Name, blk, k, s, hi, n, first, wn, wfirst)
					}
				}
			})
		}
	}
}

// TestResolveOutside: bytes before, between and after the caches are
// outside; a range over a gap is split.
func TestResolveOutside(t *testing.T) {
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "tiny", Format: "raw"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := layout.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	am, err := addrmap.New(d)
	if err != nil {
		t.Fatal(err)
	}
	r0, r1 := am.Regions[0], am.Regions[1]
	out, pad, _ := am.Resolve(r0.Start-16, 16, func(addrmap.Cells) error { t.Fatal("cells before the first region"); return nil })
	if out != 16 || pad != 0 {
		t.Fatalf("before: outside %d padding %d", out, pad)
	}
	var n uint64
	out, _, _ = am.Resolve(r0.End-8, r1.Start-r0.End+16, func(x addrmap.Cells) error { n += x.Len; return nil })
	if out != r1.Start-r0.End {
		t.Fatalf("gap: outside %d, want %d", out, r1.Start-r0.End)
	}
	// The raw format pads each kernel row: its last 8 bytes are padding.
	if n == 0 || n > 16 {
		t.Fatalf("gap: %d cell bytes", n)
	}
}
