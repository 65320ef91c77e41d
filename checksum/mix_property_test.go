package checksum_test

import (
	"context"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// TestPropertyMixIndependence: the same logical KV under two random
// layouts (conv state layouts too), file formats, TP and PP splits, block
// and kernel block sizes has the same mix checks: comparing one with the other, with every check
// of both (vLLM's and the mix check, in chunks of the larger block size
// where the sizes differ), verifies.
func TestPropertyMixIndependence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genConfig(t)
		a.Role, a.PrefixTokens = "producer", 0
		b := genConfig(t)
		// The same KV: preset, layers, seed, tokens, requests, conv dtype
		// and whether states are split; everything else redrawn.
		b.Preset, b.Layers, b.Seed, b.Tokens, b.Requests = a.Preset, a.Layers, a.Seed, a.Tokens, a.Requests
		b.ConvDtype, b.NoStateSplit, b.Role, b.PrefixTokens = a.ConvDtype, a.NoStateSplit, "producer", 0
		if a.NoStateSplit {
			// A state without a split is its raw local bytes (docs/spec.md
			// §6): the conv layout and the TP size change them. (PP too, for
			// now: side.Merge takes split_less from a stage's record
			// without the group's layers, so a split-less group split over
			// stages does not compare; a bug of its own.)
			b.ConvLayout, b.TP, b.PP = a.ConvLayout, a.TP, a.PP
		}
		engines := []checksum.Engine{checksum.Fast{}, checksum.Fast{Threads: 1, ChunkBytes: 1}, checksum.Reference{}}
		ca := computeSide(t, a, rapid.SampledFrom(engines).Draw(t, "engine a"))
		cb := computeSide(t, b, rapid.SampledFrom(engines).Draw(t, "engine b"))
		res := verify.Diff(ca, cb)
		compared := 0
		for _, rv := range res.Requests {
			for _, g := range rv.Groups {
				switch {
				case g.Verdict == verify.LeftOut:
				case g.Verdict == verify.Unverified && g.Reason == verify.ReasonNoBlockInCommon:
					// a sliding window of other block sizes: nothing in common
				case g.Verdict != verify.Verified || g.Strength != verify.StrengthMix:
					t.Fatalf("request %s group %d: %s (%s), strength %q, mix-only positions %v",
						rv.ID, g.ID, g.Verdict, g.Reason, g.Strength, g.MixOnly)
				default:
					compared++
				}
			}
		}
		if compared == 0 && a.Preset != "swa" {
			t.Fatalf("nothing compared: %+v", res.Requests)
		}
	})
}

// TestPropertyMixDetects: a changed bit of a valid slot changes the mix
// check at exactly its block position (in the checks holding its replica
// key), as it does vLLM's; an even number of top-bit flips of 8-byte
// pieces under one replica key of one block position leave vLLM's
// checksum unchanged everywhere and change the mix check there.
func TestPropertyMixDetects(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		cfg.Role, cfg.PrefixTokens = "producer", 0
		paths, remove := synthSide(t, cfg)
		defer remove()
		compute := func() *side.Checks {
			res, err := side.Checksum(context.Background(), side.Input{Paths: paths}, side.ChecksumOptions{Partial: true})
			if err != nil {
				t.Fatal(err)
			}
			return res.Checks
		}
		before := compute()
		topBits := rapid.Bool().Draw(t, "top bits")
		rank := rapid.IntRange(0, len(paths)-1).Draw(t, "rank")
		d, err := layout.Open(paths[rank])
		if err != nil {
			t.Fatal(err)
		}
		var groups []*layout.GroupView
		for _, g := range d.Groups {
			if len(g.Caches) > 0 && (!topBits || g.Group.Kind != layout.KindMamba) {
				groups = append(groups, g)
			}
		}
		if len(groups) == 0 {
			d.Close()
			t.Skip("no cache to change")
		}
		g := rapid.SampledFrom(groups).Draw(t, "group")
		req := &d.Manifest.Requests[rapid.IntRange(0, len(d.Manifest.Requests)-1).Draw(t, "request")]
		span, _, err := blockspan.Of(req, g.Group)
		if err != nil || len(span.Blocks) == 0 {
			d.Close()
			t.Skip("no blocks")
		}
		i := rapid.IntRange(0, len(span.Blocks)-1).Draw(t, "position index")
		pos, S := span.Start+i, g.Group.BlockSize
		c := rapid.SampledFrom(g.Caches).Draw(t, "cache")
		key := [2]int{c.Replicas, c.ReplicaIndex}
		valid := blockspan.ValidTokens(req.NumTokens, pos, S)
		if c.State {
			valid = 1
		}
		type pieceRef struct {
			c           *layout.LayerView
			tok, h, idx int
		}
		var flips []cellByte
		var masks []byte
		if topBits {
			// 2, 4 or 6 distinct pieces of the position under the key.
			var cands []pieceRef
			for _, cc := range g.Caches {
				if cc.Key() != c.Key() {
					continue
				}
				for tok := range valid {
					for h := range cc.Heads {
						for p := range cc.Pieces {
							cands = append(cands, pieceRef{cc, tok, h, p})
						}
					}
				}
			}
			n := 2 * rapid.IntRange(1, min(3, len(cands)/2)).Draw(t, "pairs")
			for _, k := range rapid.Permutation(indicesOf(len(cands))).Draw(t, "pieces")[:n] {
				x := cands[k]
				flips = append(flips, locate(t, d, g, x.c, span.Blocks[i], x.tok, x.h, 8*x.idx+7))
				masks = append(masks, 0x80)
			}
		} else {
			tok := 0
			if !c.State {
				tok = rapid.IntRange(0, valid-1).Draw(t, "token")
			}
			flips = append(flips, locate(t, d, g, c, span.Blocks[i], tok, rapid.IntRange(0, c.Heads-1).Draw(t, "head"), rapid.IntRange(0, c.Cells.CellBytes-1).Draw(t, "byte")))
			masks = append(masks, byte(1)<<rapid.IntRange(0, 7).Draw(t, "bit"))
		}
		d.Close()
		for k, f := range flips {
			flip(t, f, masks[k])
		}
		after := compute()
		for r, rc := range after.Requests {
			for gi, gc := range rc.Groups {
				bg := before.Requests[r].Groups[gi]
				for k := range gc.Checks {
					for p := range gc.Checks[k] {
						here := rc.ID == req.ID && gc.ID == g.Group.ID && gc.Start+p == pos && k%key[0] == key[1]
						vllm := gc.Checks[k][p] != bg.Checks[k][p]
						mix := gc.ChecksMix[k][p] != bg.ChecksMix[k][p]
						if mix != here || vllm != (here && !topBits) {
							t.Fatalf("request %s group %d check %d position %d: vLLM's changed %v, the mix check %v; the change (top bits %v, %d flips) is at position %d, key %v",
								rc.ID, gc.ID, k, gc.Start+p, vllm, mix, topBits, len(flips), pos, key)
						}
					}
				}
			}
		}
	})
}

func indicesOf(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestMixSynthTopBitAttack is the attack of the issue on synthesized
// dumps, every layout: two top-bit flips in one block position, on two TP
// ranks, leave vLLM's checks unchanged and change the mix check there.
func TestMixSynthTopBitAttack(t *testing.T) {
	for _, lay := range synth.Layouts {
		cfg := synth.Config{Preset: "llama", Layers: 2, Layout: lay, TP: 2, Tokens: 40, Seed: 3}
		paths, remove := synthSide(t, cfg)
		before := computeSide(t, cfg, checksum.Fast{})
		for rank, path := range paths {
			d, err := layout.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			g := d.Groups[0]
			req := &d.Manifest.Requests[0]
			span, _, _ := blockspan.Of(req, g.Group)
			// Position 1, token 3 of the block, head 0, piece rank+1.
			flip(t, locate(t, d, g, g.Caches[rank], span.Blocks[1-span.Start], 3, 0, 8*(rank+1)+7), 0x80)
			d.Close()
		}
		res, err := side.Checksum(context.Background(), side.Input{Paths: paths}, side.ChecksumOptions{})
		remove()
		if err != nil {
			t.Fatal(err)
		}
		bg, ag := before.Requests[0].Groups[0], res.Checks.Requests[0].Groups[0]
		if !slices.Equal(ag.Checks[0], bg.Checks[0]) {
			t.Errorf("%s: vLLM's checks changed: %x, were %x", lay, ag.Checks[0], bg.Checks[0])
		}
		for p := range ag.ChecksMix[0] {
			if changed := ag.ChecksMix[0][p] != bg.ChecksMix[0][p]; changed != (ag.Start+p == 1) {
				t.Errorf("%s: mix check at position %d changed %v", lay, ag.Start+p, changed)
			}
		}
	}
}
