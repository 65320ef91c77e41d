package inject_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// BenchmarkTransferFault plans and writes a transfer-log fault into a
// pull of 32 requests of 4 layers: xfer-local-other looks, for each
// candidate pair, for a co-resident pair of an earlier transfer.
func BenchmarkTransferFault(b *testing.B) {
	dir := b.TempDir()
	p := synth.Config{Preset: "llama", Layers: 4, Layout: "nhd", Requests: 32, Seed: 4}
	c := p
	c.Role = "consumer"
	prodPaths, err := synth.Write(dir, p)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := synth.Write(filepath.Join(dir, "raw"), c)
	if err != nil {
		b.Fatal(err)
	}
	openSide := func(paths []string) []*layout.Dump {
		dumps, err := layout.OpenSide(paths)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { layout.CloseAll(dumps) })
		return dumps
	}
	paths, err := inject.Prepare(context.Background(), openSide(raw), filepath.Join(dir, "consumer"), inject.PrepareOptions{ZeroTails: true, ExtraBlocks: 1, Stored: true})
	if err != nil {
		b.Fatal(err)
	}
	prod, cons := openSide(prodPaths), openSide(paths)
	logs := filepath.Join(dir, "nixl")
	if _, err := nixl.WritePlan(logs, prod, cons, false, nixl.PlanOptions{Planner: nixl.PlannerExact}); err != nil {
		b.Fatal(err)
	}
	for _, k := range []inject.Kind{inject.XferLocalOther, inject.XferDrop} {
		b.Run(string(k), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				out := filepath.Join(b.TempDir(), "out")
				if _, err := inject.Inject(context.Background(), cons, out, inject.Options{Kind: k, Seed: uint64(i), Transfers: []string{logs}, Producer: prod}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
