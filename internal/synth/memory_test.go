package synth

import (
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/memlimit"
	"github.com/kvaudit/kvaudit/parse"
)

// TestNormalizeMemory: a configuration whose rank does not fit in
// MaxBytes is refused before anything is allocated, blaming NumBlocks when
// it was given and Requests otherwise; one that fits exactly passes. The
// llama preset's rank is 4 layers x K and V x 8 heads x 128 x 2 bytes x 16
// tokens = 262144 bytes a block, and its tables 8 bytes a block and a
// table entry (2 requests of 40 tokens: 6 entries).
func TestNormalizeMemory(t *testing.T) {
	const need = 100*262144 + 8*(100+6)
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{Preset: "llama", NumBlocks: 100, MaxBytes: need}, ""},
		{Config{Preset: "llama", NumBlocks: 100, MaxBytes: need - 1}, "NumBlocks"},
		{Config{Preset: "llama", NumBlocks: 100, Format: "raw", MaxBytes: need}, "NumBlocks"},
		{Config{Preset: "llama", NumBlocks: 4000000000}, "NumBlocks"},
		{Config{Preset: "llama", Requests: 4096, Tokens: 100000}, "Requests"},
		{Config{Preset: "llama", NumBlocks: 1<<40 + 1}, "NumBlocks"},
	} {
		if c.cfg.MaxBytes == 0 && c.cfg.NumBlocks <= 1<<40 && memlimit.Bytes() == 0 {
			continue // no memory size known on this system
		}
		_, err := c.cfg.Normalize()
		fe := parse.As(err, parse.SynthConfig)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.field != "" && (fe == nil || fe.Field != c.field):
			t.Errorf("%+v: got %v, want a *parse.Error on %s", c.cfg, err, c.field)
		case c.field != "" && c.cfg.NumBlocks <= 1<<40 && !strings.Contains(err.Error(), "a rank of"):
			t.Errorf("%+v: %v does not say what the rank would take", c.cfg, err)
		}
	}
}
