package kernels_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// TestModelBlockNumbering: the kernel model (the CUDA kernel's work in Go,
// which returns one sum per row and no slope) gives vLLM's block
// numbering through a block-numbered plan (blockRows in checksum), equal
// to the cpu engine's one-pass values, in every load variant.
func TestModelBlockNumbering(t *testing.T) {
	for _, cfg := range []synth.Config{
		{Preset: "llama", Layers: 2, TP: 2, KernelBlockSize: 4, Tokens: 37},
		{Preset: "tiny", TP: 4, BlockSize: 2, Tokens: 7, Layout: "hnd"},
		{Preset: "mla", Layers: 2, Layout: "packed-token-major"},
	} {
		paths, err := synth.Write(filepath.Join(t.TempDir()), cfg)
		if err != nil {
			t.Fatal(err)
		}
		dumps, err := layout.OpenSide(paths)
		if err != nil {
			t.Fatal(err)
		}
		want, err := checksum.Records(context.Background(), dumps, checksum.Options{Engine: checksum.Fast{}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range variants {
			got, err := checksum.Records(context.Background(), dumps, checksum.Options{Engine: m, BlockValues: true})
			if err != nil {
				t.Fatal(err)
			}
			for ri := range want {
				for qi, rq := range want[ri].Requests {
					for gi, g := range rq.Groups {
						o := got[ri].Requests[qi].Groups[gi]
						if o.ValuesBlock.IsZero() || !o.ValuesBlock.Equal(g.ValuesBlock) || !o.Values.Equal(g.Values) {
							t.Errorf("%+v %+v rank %d %s group %d: %v / %v, want %v / %v", cfg, m, ri, rq.ID, g.ID, o.Values, o.ValuesBlock, g.Values, g.ValuesBlock)
						}
					}
				}
			}
		}
		layout.CloseAll(dumps)
	}
	var _ checksum.Engine = kernels.Model{}
}
