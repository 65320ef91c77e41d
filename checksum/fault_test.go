package checksum_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
)

// TestTruncatedWhileMapped: a dump file cut short after it was opened makes
// every engine return an error naming the file, not crash the process.
func TestTruncatedWhileMapped(t *testing.T) {
	for _, e := range []checksum.Engine{checksum.Reference{}, checksum.Fast{}} {
		paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layers: 2})
		if err != nil {
			t.Fatal(err)
		}
		d, err := layout.Open(paths[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(paths[0], 4096); err != nil {
			t.Fatal(err)
		}
		_, err = side.Compute(context.Background(), []*layout.Dump{d}, checksum.Options{Engine: e})
		d.Close()
		if err == nil || !strings.Contains(err.Error(), paths[0]) {
			t.Errorf("%s engine: got %v, want an error naming %s", e.Name(), err, paths[0])
		}
	}
}
