package drill_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// A producer (TP1) and a consumer (TP2, HND layout) hold the same KV but
// for one flipped bit, which a verdict found at block position 0 of group
// 0 (package verify's Compare drills its mismatches down this way):
// Explain names the cell.
func ExampleExplain() {
	dir, _ := os.MkdirTemp("", "kvaudit-example-")
	defer os.RemoveAll(dir)
	ppaths, _ := synth.Write(dir, synth.Config{Preset: "llama", Requests: 1, Seed: 1})
	cpaths, _ := synth.Write(dir, synth.Config{Preset: "llama", Requests: 1, Seed: 1, TP: 2, Layout: "hnd", Role: "consumer"})
	flip(cpaths, dumpindex.CellRef{Request: "req-0", Layer: "model.layers.3.self_attn.attn", Head: 6, Token: 9}, 40, 2)

	pd, err := layout.OpenSide(ppaths)
	if err != nil {
		log.Fatal(err)
	}
	defer layout.CloseAll(pd)
	cd, err := layout.OpenSide(cpaths)
	if err != nil {
		log.Fatal(err)
	}
	defer layout.CloseAll(cd)
	mismatches := []drill.Request{{ID: "req-0", ProducerID: "req-0", Groups: []drill.Group{{ID: 0, Positions: []int{0}}}}}
	xs, err := drill.Explain(context.Background(), pd, cd, mismatches, drill.Options{})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range xs[0].Details {
		fmt.Printf("position %d layer %d head %d tokens %d-%d: %s\n", d.Position, d.Layer, d.Head, d.FirstToken, d.LastToken, d.Hint)
	}
	// Output:
	// position 0 layer 3 head 6 tokens 9-9: 1 bit flipped
}

// flip flips one bit of one byte of a cell of the dumps at paths.
func flip(paths []string, ref dumpindex.CellRef, i, bit int) {
	if _, _, err := dumpindex.FlipBit(paths, ref, i, bit); err != nil {
		log.Fatal(err)
	}
}
