package synth

import (
	"sync/atomic"
	"testing"
)

// TestProgressAddsUpToTotalWork: what Write tells Progress adds up to
// TotalWork, give or take the files' headers (a safetensors header, a
// raw file's gaps between tensors), for every format and a TP and PP
// split: a bar of TotalWork then ends full, and not before the end.
func TestProgressAddsUpToTotalWork(t *testing.T) {
	for _, format := range Formats {
		cfg := Config{Preset: "tiny", TP: 2, PP: 2, Format: format}
		total, err := TotalWork(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var told atomic.Int64
		cfg.Progress = func(n int64) { told.Add(n) }
		paths, err := Write(t.TempDir(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		// 4 ranks; a header of a tiny rank is under 4 KB.
		if got := told.Load(); total <= 0 || got < total || got > total+int64(len(paths))*4096 {
			t.Errorf("%s: Progress was told %d bytes, TotalWork says %d", format, got, total)
		}
	}
}
