package drill_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/checksum/drill"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/layout/synth"
)

// A producer (TP1) and a consumer (TP2, HND layout) hold the same KV but
// for one flipped bit: Diff names the block, Explain the cell.
func ExampleExplain() {
	dir, _ := os.MkdirTemp("", "kvaudit-example-")
	defer os.RemoveAll(dir)
	ppaths, _ := synth.Write(dir, synth.Config{Preset: "llama", Requests: 1, Seed: 1})
	cpaths, _ := synth.Write(dir, synth.Config{Preset: "llama", Requests: 1, Seed: 1, TP: 2, Layout: "hnd", Role: "consumer"})
	flip(cpaths, drill.CellRef{Request: "req-0", Layer: "model.layers.3.self_attn.attn", Head: 6, Token: 9}, 40, 2)

	ctx := context.Background()
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
	prod, _ := checksum.Compute(ctx, pd, checksum.Options{})
	cons, _ := checksum.Compute(ctx, cd, checksum.Options{})
	res := checksum.Diff(prod, cons)
	if err := drill.Explain(ctx, pd, cd, res, drill.Options{}); err != nil {
		log.Fatal(err)
	}
	for _, r := range res.Requests {
		for _, g := range r.Groups {
			fmt.Printf("%s group %d: %s at positions %v\n", r.ID, g.ID, g.Verdict, g.Positions)
		}
		for _, d := range r.Details {
			fmt.Printf("position %d layer %d head %d tokens %d-%d: %s\n", d.Position, d.Layer, d.Head, d.FirstToken, d.LastToken, d.Hint)
		}
	}
	// Output:
	// req-0 group 0: mismatch at positions [0]
	// position 0 layer 3 head 6 tokens 9-9: 1 bit flipped
}

// flip flips one bit of one byte of a cell of the dumps at paths.
func flip(paths []string, ref drill.CellRef, i, bit int) {
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		log.Fatal(err)
	}
	file, off, err := drill.Locate(dumps, ref, i)
	layout.CloseAll(dumps)
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, off)
	b[0] ^= 1 << bit
	f.WriteAt(b, off)
}
