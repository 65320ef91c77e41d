package checksum_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout/synth"
)

// Compare a TP1 producer with a TP2 consumer in another layout and block
// size that loaded the same KV.
func ExampleDiff() {
	dir, _ := os.MkdirTemp("", "kvaudit-example-")
	defer os.RemoveAll(dir)
	synth.Write(dir, synth.Config{Preset: "llama", Seed: 7})
	synth.Write(dir, synth.Config{Preset: "llama", Seed: 7, Role: "consumer", TP: 2, Layout: "hnd", BlockSize: 32})

	ctx := context.Background()
	prod, err := checksum.ComputePaths(ctx, []string{filepath.Join(dir, "producer")}, checksum.Options{})
	if err != nil {
		panic(err)
	}
	cons, err := checksum.ComputePaths(ctx, []string{filepath.Join(dir, "consumer")}, checksum.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("producer check 0 of req-0: %x\n", prod.Requests[0].Groups[0].Checks[0])
	fmt.Printf("consumer check 0 of req-0: %x\n", cons.Requests[0].Groups[0].Checks[0])
	fmt.Println(checksum.Diff(prod, cons).Verdict)
	// Output:
	// producer check 0 of req-0: [bcc6295bacdf458f ae6063d8a014329a 5dd337444c6578f5]
	// consumer check 0 of req-0: [6b268d344cf37829 5dd337444c6578f5]
	// verified
}
