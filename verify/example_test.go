package verify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/inject"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/layout/synth"
	"github.com/kvaudit/kvaudit/verify"
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
	prod, err := checksum.ComputePaths(ctx, []string{filepath.Join(dir, "producer")}, checksum.Options{})
	if err != nil {
		panic(err)
	}
	p, err := checksum.NewPayload(prod, prod.Requests[0], checksum.FormNested)
	if err != nil {
		panic(err)
	}
	text, err := checksum.EncodePayloadBase64(p)
	if err != nil {
		panic(err)
	}
	params, _ := json.Marshal(map[string]any{"kv_checksums": text})

	res, err := verify.Compare(ctx,
		verify.Input{Payload: params, Name: "kv_transfer_params"},
		verify.Input{Paths: []string{filepath.Join(dir, "consumer")}},
		verify.Options{Requests: []string{"req-0"}})
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
		verify.Input{Paths: []string{filepath.Join(dir, "producer")}},
		verify.Input{Paths: []string{bad}},
		verify.Options{})
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
