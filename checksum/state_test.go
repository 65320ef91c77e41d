package checksum_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
)

// TestStatePresets: for each state preset, conv layout and conv dtype, TP
// 1, 2 and 4 (and PP 2) give the checks of the definition over the global
// state, every replica's check equal, with both engines.
func TestStatePresets(t *testing.T) {
	for _, preset := range []string{"mamba2-hybrid", "gdn-hybrid", "mamba1"} {
		for _, conv := range synth.ConvLayouts {
			for _, dtype := range []string{"bfloat16", "float32"} {
				for _, tp := range []int{1, 2, 4} {
					cfg := synth.Config{Preset: preset, ConvLayout: conv, ConvDtype: dtype, TP: tp, PP: 2, Seed: 9}
					t.Run(fmt.Sprintf("%s/%s/%s/tp%d", preset, conv, dtype, tp), func(t *testing.T) {
						t.Parallel()
						checkEnginesExpected(t, cfg)
					})
				}
			}
		}
	}
}

// TestStatePaddingAndExtraNotCovered: bytes of a state block past the
// covered states (an extra state, padding) never change a checksum, and a
// covered bit always does.
func TestStatePaddingAndExtraNotCovered(t *testing.T) {
	cfg := synth.Config{Preset: "mamba2-hybrid", TP: 2, Seed: 4}
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	compute := func() *side.Checks {
		cRes, err := side.Checksum(context.Background(), side.Input{Paths: paths}, side.ChecksumOptions{Partial: true})
		if err != nil {
			t.Fatal(err)
		}
		c := cRes.Checks
		return c
	}
	before := compute()
	d, err := layout.Open(paths[1])
	if err != nil {
		t.Fatal(err)
	}
	g := d.GroupView(1)
	layer := g.Caches[0].Layer
	var covered int64
	for _, s := range layer.States {
		n := int64(2)
		if s.Dtype == "float32" {
			n = 4
		}
		for _, x := range s.Shape {
			n *= x
		}
		covered += n
	}
	cells := g.Caches[0].Cells
	page := cells.RowStride
	block := d.Manifest.Requests[0].StateBlock["1"]
	file, base := cells.File, cells.FileOffset+int64(block)*page
	d.Close()
	if page-covered < 40 {
		t.Fatalf("page %d, covered %d: no room for the extra state", page, covered)
	}
	for off := covered; off < page; off += 7 {
		flip(t, cellByte{file, base + off}, 0xff)
	}
	if after := compute(); !reflect.DeepEqual(after, before) {
		t.Fatal("changing an extra state or padding changed a checksum")
	}
	flip(t, cellByte{file, base + covered - 1}, 0x80)
	after := compute()
	if reflect.DeepEqual(after, before) {
		t.Fatal("flipping the last covered bit changed nothing")
	}
}

// TestStateFingerprints: a state group's fingerprint (both forms) is the
// same for every TP size and conv layout, and differs with the conv dtype;
// without a split it follows the local shapes, so it differs across TP.
func TestStateFingerprints(t *testing.T) {
	fp := func(cfg synth.Config) [2]uint64 {
		c := computeSide(t, cfg, checksum.Fast{})
		for _, g := range c.Groups {
			if g.Kind == layout.KindMamba {
				return [2]uint64{g.Fingerprint, g.FingerprintFlat}
			}
		}
		t.Fatalf("%+v: no state group", cfg)
		return [2]uint64{}
	}
	for _, preset := range []string{"mamba2-hybrid", "gdn-hybrid", "mamba1"} {
		base := fp(synth.Config{Preset: preset})
		for _, tp := range []int{1, 2, 4} {
			for _, conv := range synth.ConvLayouts {
				if got := fp(synth.Config{Preset: preset, TP: tp, PP: 2, ConvLayout: conv}); got != base {
					t.Errorf("%s tp %d %s: fingerprint %x, tp 1 dim-first %x", preset, tp, conv, got, base)
				}
			}
		}
		if fp(synth.Config{Preset: preset, ConvDtype: "float32"}) == base {
			t.Errorf("%s: the conv dtype does not change the fingerprint", preset)
		}
		if fp(synth.Config{Preset: preset, TP: 2, NoStateSplit: true}) == fp(synth.Config{Preset: preset, NoStateSplit: true}) {
			t.Errorf("%s: without a split the fingerprint should follow the local shapes", preset)
		}
	}
}
