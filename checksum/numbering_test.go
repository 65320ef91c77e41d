package checksum_test

import (
	"context"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

// plainEngine hides an engine's slopes, as the CUDA runner has none: a
// block-numbered plan is run for block values instead.
type plainEngine struct{ checksum.Engine }

// TestNumberingOnePass: the slopes the cpu and ref engines give in the
// pass that computes request-numbered values convert to the same
// block-numbered values that an engine without slopes computes from a
// block-numbered plan, on every layout, kernel-block split, TP and MLA;
// and they differ from request numbering exactly at positions past 0.
func TestNumberingOnePass(t *testing.T) {
	for _, cfg := range []synth.Config{
		{Preset: "llama", Layers: 2, TP: 2, KernelBlockSize: 4, Tokens: 37},
		{Preset: "llama", Layers: 2, Layout: "packed-token-major", Tokens: 37},
		{Preset: "mla", Layers: 2, TP: 2, Layout: "nhd"},
		{Preset: "tiny", TP: 4, BlockSize: 2, Tokens: 7, Format: "raw"},
		{Preset: "mamba2-hybrid", Layers: 2},
	} {
		paths, remove := synthSide(t, cfg)
		dumps, err := layout.OpenSide(paths)
		if err != nil {
			remove()
			t.Fatal(err)
		}
		var got [][]*wire.Record
		for _, opts := range []checksum.Options{
			{Engine: checksum.Fast{}},
			{Engine: checksum.Reference{}},
			{Engine: plainEngine{checksum.Reference{}}, BlockValues: true},
		} {
			recs, err := checksum.Records(context.Background(), dumps, opts)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, recs)
		}
		layout.CloseAll(dumps)
		remove()
		differ := false
		for ri := range got[0] {
			for qi, rq := range got[0][ri].Requests {
				for gi, g := range rq.Groups {
					for _, other := range got[1:] {
						o := other[ri].Requests[qi].Groups[gi]
						if !g.ValuesBlock.Equal(o.ValuesBlock) || !g.Values.Equal(o.Values) {
							t.Errorf("%+v rank %d %s group %d: %v / %v, want %v / %v", cfg, ri, rq.ID, g.ID, o.Values, o.ValuesBlock, g.Values, g.ValuesBlock)
						}
					}
					if g.ValuesBlock.Len() != g.Values.Len() {
						t.Fatalf("%+v: %d block values for %d positions", cfg, g.ValuesBlock.Len(), g.Values.Len())
					}
					for i, vals := range g.Values.All() {
						if g.Start+i == 0 && !slices.Equal(vals, g.ValuesBlock.At(i)) {
							t.Errorf("%+v %s group %d: numberings differ at position 0", cfg, rq.ID, g.ID)
						}
						if g.Start+i > 0 && !slices.Equal(vals, g.ValuesBlock.At(i)) {
							differ = true
						}
					}
				}
			}
		}
		if cfg.Preset != "mamba2-hybrid" && !differ {
			t.Errorf("%+v: block numbering equals request numbering everywhere", cfg)
		}
	}
}

// TestNumberingConversion: BlockNumbered and RequestNumbered invert each
// other and match docs/spec.md §1's worked example: position 1 (f = 2) of the
// golden vector.
func TestNumberingConversion(t *testing.T) {
	const cReq, cBlock = 0x00000002a65023b8, 0x0000000087acd3f8
	// slope D = sum m*P*A over position 1's slices (token 2 only, P = 2).
	var D uint64
	for L := range 2 {
		for h := range 2 {
			var A uint64
			for p := range 2 {
				A += uint64((L+1)*1000 + (h+1)*100 + 2*10 + p)
			}
			D += uint64(2*(L*65536+h)+1) * 2 * A
		}
	}
	if got := checksum.BlockNumbered(cReq, D, 2); got != cBlock {
		t.Errorf("BlockNumbered = %#x, want %#x", got, uint64(cBlock))
	}
	if got := checksum.RequestNumbered(cBlock, D, 2); got != cReq {
		t.Errorf("RequestNumbered = %#x, want %#x", got, uint64(cReq))
	}
	for _, s := range []string{"request", "block"} {
		if n, err := checksum.ParseNumbering(s); err != nil || n.String() != s {
			t.Errorf("ParseNumbering(%q) = %v, %v", s, n, err)
		}
	}
	if _, err := checksum.ParseNumbering("token"); err == nil {
		t.Error("ParseNumbering(\"token\") succeeded")
	}
}
