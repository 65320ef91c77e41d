package checksum_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/kvaudit/kvaudit/layout"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout/synth"
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
						for _, e := range []checksum.Engine{checksum.Reference{}, checksum.Fast{}} {
							checkExpected(t, cfg, computeSide(t, cfg, e))
						}
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
	compute := func() *checksum.Checks {
		c, err := checksum.ComputePaths(context.Background(), paths, checksum.Options{})
		if err != nil {
			t.Fatal(err)
		}
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
