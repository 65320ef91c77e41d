package checksum_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// TestSGLangSynth: for SGLang pools synth writes (MHA and MLA, page sizes
// 1 and 16, TP 1 and 2, a consumer with a prefix hit sending the suffix
// only), the value package checksum computes from the dump equals the one
// synth wrote as sent, which synth computed with hash/adler32 over its own
// buffers; kvaudit's own checksum reads the same pools through the
// layers' strided sources.
func TestSGLangSynth(t *testing.T) {
	for _, c := range []synth.Config{
		{Preset: "tiny", BlockSize: 1, Tokens: 5},
		{Preset: "llama", Layers: 2, BlockSize: 16, Tokens: 40, TP: 2},
		{Preset: "mla", Layers: 2, BlockSize: 16, Tokens: 40, TP: 2},
		{Preset: "mla", Layers: 2, BlockSize: 1, Tokens: 7},
		{Preset: "llama", Layers: 2, BlockSize: 16, Tokens: 40, Role: "consumer", PrefixTokens: 16},
	} {
		c.Engine = "sglang"
		name := fmt.Sprintf("%s/ps%d/tp%d/%s", c.Preset, c.BlockSize, c.TP, c.Role)
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			paths, err := synth.Write(dir, c)
			if err != nil {
				t.Fatal(err)
			}
			dumps, err := layout.OpenSide(paths)
			if err != nil {
				t.Fatal(err)
			}
			defer layout.CloseAll(dumps)
			n := 0
			for _, d := range dumps {
				vals, err := checksum.SGLangValues(d, 2)
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range vals {
					n++
					if v.Sent == nil || uint64(v.Value) != *v.Sent {
						t.Errorf("rank %d request %s: computed %#08x, sent %v", v.TP, v.Request, v.Value, v.Sent)
					}
				}
			}
			if n == 0 {
				t.Fatal("no values")
			}
			if _, err := checksum.Records(context.Background(), dumps, checksum.Options{}); err != nil {
				t.Fatalf("kvaudit's own checksum: %v", err)
			}
		})
	}
}
