package verify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
)

// Compare what a TP1 producer sent for request req-0 (vLLM's
// kv_transfer_params) with the dumps of a TP2 consumer in another layout
// and block size.
func ExampleCompare() {
	dir, _ := os.MkdirTemp("", "kvaudit-example-")
	defer os.RemoveAll(dir)
	synth.Write(dir, synth.Config{Preset: "llama", Seed: 7})
	synth.Write(dir, synth.Config{Preset: "llama", Seed: 7, Role: "consumer", TP: 2, Layout: "hnd", BlockSize: 32})
	ctx := context.Background()

	// What the producer sends: its payload in kv_transfer_params.
	prodRes, err := side.Checksum(ctx, side.Input{Paths: []string{filepath.Join(dir, "producer")}}, side.ChecksumOptions{})
	if err != nil {
		panic(err)
	}
	prod := prodRes.Checks
	p, err := side.NewPayload(prod, prod.Requests[0], wire.FormNested)
	if err != nil {
		panic(err)
	}
	text, err := wire.EncodePayloadBase64(p)
	if err != nil {
		panic(err)
	}
	params, _ := json.Marshal(map[string]any{"kv_checksums": text})

	res, err := verify.Compare(ctx,
		side.Input{Payload: params, Name: "kv_transfer_params"},
		side.Input{Paths: []string{filepath.Join(dir, "consumer")}},
		verify.CompareOptions{Requests: []string{"req-0"}})
	if err != nil {
		panic(err)
	}
	for _, rv := range res.Diff.Requests {
		fmt.Println(rv.ID, rv.Verdict)
	}
	fmt.Println(res.Verdict())
	// Output:
	// req-0 verified
	// verified
}

// Flip one bit in a consumer's copy of request req-0, block position 2,
// and compare it with the producer's dumps: the mismatch is drilled down
// to the layer, head and token that differ.
func ExampleCompare_drillDown() {
	dir, _ := os.MkdirTemp("", "kvaudit-example-")
	defer os.RemoveAll(dir)
	synth.Write(dir, synth.Config{Preset: "llama", Seed: 7})
	cpaths, _ := synth.Write(dir, synth.Config{Preset: "llama", Seed: 7, Role: "consumer", TP: 2})
	ctx := context.Background()

	dumps, err := layout.OpenSide(cpaths)
	if err != nil {
		panic(err)
	}
	defer layout.CloseAll(dumps)
	pos := 2
	bad := filepath.Join(dir, "bad")
	if _, err := inject.Inject(ctx, dumps, bad, inject.Options{Kind: inject.BitFlip, Seed: 7,
		Target: inject.Target{Request: "req-0", Position: &pos, Layer: "1"}}); err != nil {
		panic(err)
	}

	res, err := verify.Compare(ctx,
		side.Input{Paths: []string{filepath.Join(dir, "producer")}},
		side.Input{Paths: []string{bad}},
		verify.CompareOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Verdict(), "-", res.Summary())
	for _, d := range res.Diff.Requests[0].Details {
		fmt.Printf("group %d position %d layer %d head %d token %d: %s\n", d.Group, d.Position, d.Layer, d.Head, d.FirstToken, d.Hint)
	}
	// Output:
	// mismatch - mismatch: request req-0
	// group 0 position 2 layer 1 head 5 token 35: 1 bit flipped
}

// Compare a TP1 producer with a TP2 consumer in another layout and block
// size that loaded the same KV.
func ExampleDiff() {
	dir, _ := os.MkdirTemp("", "kvaudit-example-")
	defer os.RemoveAll(dir)
	synth.Write(dir, synth.Config{Preset: "llama", Seed: 7})
	synth.Write(dir, synth.Config{Preset: "llama", Seed: 7, Role: "consumer", TP: 2, Layout: "hnd", BlockSize: 32})

	ctx := context.Background()
	prodRes, err := side.Checksum(ctx, side.Input{Paths: []string{filepath.Join(dir, "producer")}}, side.ChecksumOptions{})
	if err != nil {
		panic(err)
	}
	prod := prodRes.Checks
	consRes, err := side.Checksum(ctx, side.Input{Paths: []string{filepath.Join(dir, "consumer")}}, side.ChecksumOptions{})
	if err != nil {
		panic(err)
	}
	cons := consRes.Checks
	fmt.Printf("producer check 0 of req-0: %x\n", prod.Requests[0].Groups[0].Checks[0])
	fmt.Printf("consumer check 0 of req-0: %x\n", cons.Requests[0].Groups[0].Checks[0])
	fmt.Println(verify.Diff(prod, cons).Verdict)
	// Output:
	// producer check 0 of req-0: [bcc6295bacdf458f ae6063d8a014329a 5dd337444c6578f5]
	// consumer check 0 of req-0: [6b268d344cf37829 5dd337444c6578f5]
	// verified
}
