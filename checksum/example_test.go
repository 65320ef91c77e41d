package checksum_test

import (
	"context"
	"fmt"
	"os"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// Checksum one rank's dump: one value per (request, group, block
// position, replica key), in both numberings from one pass over the KV.
func ExampleRecords() {
	dir, _ := os.MkdirTemp("", "kvaudit-example-")
	defer os.RemoveAll(dir)
	paths, _ := synth.Write(dir, synth.Config{Preset: "llama", Seed: 7})

	dumps, err := layout.OpenSide(paths)
	if err != nil {
		panic(err)
	}
	defer layout.CloseAll(dumps)
	recs, err := checksum.Records(context.Background(), dumps, checksum.Options{})
	if err != nil {
		panic(err)
	}
	g := recs[0].Requests[0].Groups[0]
	fmt.Printf("%s group %d, replica keys %v\n", recs[0].Requests[0].ID, g.ID, g.ReplicaKeys)
	for i, vals := range g.Values.All() {
		fmt.Printf("position %d: %s (block numbering %s)\n", g.Start+i, layout.Hex64(vals[0]), layout.Hex64(g.ValuesBlock.At(i)[0]))
	}
	// Output:
	// req-0 group 0, replica keys [[1 0]]
	// position 0: 0xbcc6295bacdf458f (block numbering 0xbcc6295bacdf458f)
	// position 1: 0xae6063d8a014329a (block numbering 0x28dab35efd2b229a)
	// position 2: 0x5dd337444c6578f5 (block numbering 0xee0c3f0e665468f5)
}
