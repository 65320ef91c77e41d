package verify_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// The API a Go program auditing KV uses, and all that stays public for
// it: name the two sides (side.Input: dumps here; a record file, a
// producer's payload or its kv_transfer_params are given the same way),
// compare them (verify.Compare opens, checksums and pairs both), and read
// the verdict: the result's, each request's and each group's, with the
// drill-down of a mismatch to the layer, head and tokens that differ.
func Example() {
	dir, err := os.MkdirTemp("", "kvaudit-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// Two sides as kvaudit synth writes them: a TP1 producer and a TP2
	// consumer that loaded its two requests, with one bit of req-1
	// flipped in the consumer's copy.
	ppaths, err := synth.Write(dir, synth.Config{Preset: "llama", Requests: 2, Seed: 3})
	if err != nil {
		log.Fatal(err)
	}
	cpaths, err := synth.Write(dir, synth.Config{Preset: "llama", Requests: 2, Seed: 3, Role: "consumer", TP: 2})
	if err != nil {
		log.Fatal(err)
	}
	flipOne(cpaths, dumpindex.CellRef{Request: "req-1", Layer: "model.layers.2.self_attn.attn", Head: 5, Token: 20}, 9, 4)

	producer := side.Input{Paths: ppaths}
	consumer := side.Input{Paths: cpaths}
	res, err := verify.Compare(context.Background(), producer, consumer, verify.CompareOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("producer: %s, TP %d; consumer: %s, TP %d\n", res.Producer.Form, res.Producer.TPSize, res.Consumer.Form, res.Consumer.TPSize)
	for _, rv := range res.Diff.Requests {
		fmt.Println(rv.ID, rv.Verdict)
		for _, g := range rv.Groups {
			if g.Verdict == verify.Mismatch {
				fmt.Println("  group", g.ID, "mismatch at block positions", g.Positions)
			}
		}
		for _, d := range rv.Details {
			fmt.Printf("  layer %d head %d tokens %d-%d: %s\n", d.Layer, d.Head, d.FirstToken, d.LastToken, d.Hint)
		}
	}
	fmt.Println(res.Verdict())
	// Output:
	// producer: dumps, TP 1; consumer: dumps, TP 2
	// req-0 verified
	// req-1 mismatch
	//   group 0 mismatch at block positions [1]
	//   layer 2 head 5 tokens 20-20: 1 bit flipped
	// mismatch
}

// flipOne flips bit of byte i of a cell of the dumps at paths.
func flipOne(paths []string, ref dumpindex.CellRef, i, bit int) {
	if _, _, err := dumpindex.FlipBit(paths, ref, i, bit); err != nil {
		log.Fatal(err)
	}
}
