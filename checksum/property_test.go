package checksum_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/wire"
)

// genConfig draws a random configuration: preset, layout, format, TP in
// {1,2,4,8} (replicated heads when TP exceeds them), PP in {1,2,3},
// kernel-block splits, block sizes, tokens and a consumer's prefix hit.
func genConfig(t *rapid.T) synth.Config {
	cfg := synth.Config{
		Preset: rapid.SampledFrom(synth.Presets).Draw(t, "preset"),
		Layout: rapid.SampledFrom(synth.Layouts).Draw(t, "layout"),
		Format: rapid.SampledFrom(synth.Formats).Draw(t, "format"),
		TP:     rapid.SampledFrom([]int{1, 2, 4, 8}).Draw(t, "tp"),
		Seed:   rapid.Uint64().Draw(t, "seed"),
	}
	cfg.Layers = rapid.IntRange(3, 4).Draw(t, "layers")
	cfg.ConvLayout = rapid.SampledFrom(synth.ConvLayouts).Draw(t, "conv layout")
	cfg.ConvDtype = rapid.SampledFrom([]string{"bfloat16", "float32"}).Draw(t, "conv dtype")
	cfg.NoStateSplit = rapid.Bool().Draw(t, "no state split")
	cfg.PP = rapid.IntRange(1, 3).Draw(t, "pp")
	if cfg.Preset == "llama" {
		cfg.Layers = 3 // keep the big preset small
	}
	bs := rapid.SampledFrom([]int{1, 2, 4, 8, 16}).Draw(t, "block size")
	cfg.BlockSize = bs
	var divisors []int
	for k := 1; k <= bs; k++ {
		if bs%k == 0 {
			divisors = append(divisors, k)
		}
	}
	cfg.KernelBlockSize = rapid.SampledFrom(divisors).Draw(t, "kernel block size")
	cfg.Tokens = rapid.IntRange(1, 3*bs+2).Draw(t, "tokens")
	cfg.Requests = rapid.IntRange(1, 2).Draw(t, "requests")
	if rapid.Bool().Draw(t, "consumer") {
		cfg.Role = "consumer"
		cfg.PrefixTokens = rapid.IntRange(0, cfg.Tokens).Draw(t, "prefix tokens")
	}
	return cfg
}

// TestPropertyIndependence: whatever the preset, layout, TP, PP, kernel
// split, block size or file format, the merged checks equal the definition
// computed from the logical KV, and every replica's check equals check 0.
func TestPropertyIndependence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		engine := rapid.SampledFrom([]checksum.Engine{checksum.Fast{}, checksum.Fast{Threads: 1, ChunkBytes: 1}, checksum.Reference{}}).Draw(t, "engine")
		checkExpected(t, cfg, computeSide(t, cfg, engine))
	})
}

// cellByte locates byte i of the cell of (block position pos, token t of
// the block, local head h) of a rank's cache, in its file.
type cellByte struct {
	file string
	off  int64
}

func locate(t tester, d *layout.Dump, g *layout.GroupView, c *layout.LayerView, block, tok, head, i int) cellByte {
	t.Helper()
	v := &c.Cells
	for _, r := range v.Runs {
		if i < r.Len {
			return cellByte{v.File, v.FileOffset + v.CellAddr(block, tok, head) + r.Offset + int64(i)}
		}
		i -= r.Len
	}
	t.Fatalf("byte past the cell")
	return cellByte{}
}

func flip(t tester, b cellByte, mask byte) {
	t.Helper()
	f, err := os.OpenFile(b.file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := []byte{0}
	if _, err := f.ReadAt(buf, b.off); err != nil {
		t.Fatal(err)
	}
	buf[0] ^= mask
	if _, err := f.WriteAt(buf, b.off); err != nil {
		t.Fatal(err)
	}
}

// TestPropertyOneByteChange: changing one byte of a valid slot changes
// exactly that block position (in the checks holding that replica), and
// changing a slot at or past num_tokens changes nothing.
func TestPropertyOneByteChange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		cfg.Role, cfg.PrefixTokens = "producer", 0
		paths, remove := synthSide(t, cfg)
		defer remove()
		compute := func() *side.Checks {
			cRes, err := side.Checksum(context.Background(), side.Input{Paths: paths}, side.ChecksumOptions{Partial: true})
			if err != nil {
				t.Fatal(err)
			}
			c := cRes.Checks
			return c
		}
		before := compute()

		// Pick a rank, group, cache, request, block position, token, head
		// and byte.
		rank := rapid.IntRange(0, len(paths)-1).Draw(t, "rank")
		d, err := layout.Open(paths[rank])
		if err != nil {
			t.Fatal(err)
		}
		var groups []*layout.GroupView
		for _, g := range d.Groups {
			if len(g.Caches) > 0 {
				groups = append(groups, g)
			}
		}
		if len(groups) == 0 {
			d.Close()
			t.Skip("rank holds no cache")
		}
		g := rapid.SampledFrom(groups).Draw(t, "group")
		c := rapid.SampledFrom(g.Caches).Draw(t, "cache")
		ri := rapid.IntRange(0, len(d.Manifest.Requests)-1).Draw(t, "request")
		req := &d.Manifest.Requests[ri]
		span, _, err := blockspan.Of(req, g.Group)
		if err != nil || len(span.Blocks) == 0 {
			d.Close()
			t.Skip("no blocks")
		}
		i := rapid.IntRange(0, len(span.Blocks)-1).Draw(t, "position index")
		pos := span.Start + i
		S := g.Group.BlockSize
		tok := rapid.IntRange(0, S-1).Draw(t, "token")
		if c.State {
			tok = 0 // a state row is the whole block
		}
		head := rapid.IntRange(0, c.Heads-1).Draw(t, "head")
		byteIdx := rapid.IntRange(0, c.Cells.CellBytes-1).Draw(t, "byte")
		mask := byte(1) << rapid.IntRange(0, 7).Draw(t, "bit")
		target := locate(t, d, g, c, span.Blocks[i], tok, head, byteIdx)
		valid := pos*S+tok < req.NumTokens || c.State
		key := [2]int{c.Replicas, c.ReplicaIndex}
		d.Close()

		flip(t, target, mask)
		after := compute()

		// Which check covers key: check k includes (R, k mod R).
		for r, rc := range after.Requests {
			for gi, gc := range rc.Groups {
				bg := before.Requests[r].Groups[gi]
				for k := range gc.Checks {
					for p := range gc.Checks[k] {
						changed := gc.Checks[k][p] != bg.Checks[k][p]
						want := valid && rc.ID == req.ID && gc.ID == g.Group.ID &&
							gc.Start+p == pos && k%key[0] == key[1]
						if changed != want {
							t.Fatalf("request %s group %d check %d position %d: changed=%v, want %v (flip at pos %d tok %d head %d byte %d, valid %v, key %v)",
								rc.ID, gc.ID, k, gc.Start+p, changed, want, pos, tok, head, byteIdx, valid, key)
						}
					}
				}
			}
		}
	})
}

// TestFastMatchesReferenceOnJunk: the engines agree on random bytes
// everywhere, not only on synthesized KV (the dump is filled with noise
// after synthesis).
func TestFastMatchesReferenceOnJunk(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		paths, remove := synthSide(t, cfg)
		defer remove()
		dumps, err := layout.OpenSide(paths)
		if err != nil {
			t.Fatal(err)
		}
		defer layout.CloseAll(dumps)
		var outs [][]*wire.Record
		for _, e := range []checksum.Engine{checksum.Reference{}, checksum.Fast{Threads: 2, ChunkBytes: 64}} {
			recs, err := checksum.Records(context.Background(), dumps, checksum.Options{Engine: e})
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, recs)
		}
		for i := range outs[0] {
			a, _ := wire.MarshalRecord(outs[0][i])
			b, _ := wire.MarshalRecord(outs[1][i])
			if !slices.Equal(a, b) {
				t.Fatalf("rank %d: reference and fast records differ:\n%s\n%s", i, a, b)
			}
		}
	})
}
