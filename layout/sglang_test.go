package layout_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
)

// TestOpenSGLang: an SGLang dump maps its pool file and returns each
// buffer's bytes in kv_data_ptrs order; a pool file shorter than its
// buffers, or named outside the dump directory, is a *parse.Error naming
// the field, and nothing is opened.
func TestOpenSGLang(t *testing.T) {
	dir := t.TempDir()
	paths, err := synth.Write(dir, synth.Config{Engine: "sglang", Preset: "tiny", BlockSize: 2, Tokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	d, err := layout.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	data := d.SGLangData()
	bufs := d.Manifest.SGLang.Buffers
	if len(data) != len(bufs) || len(bufs) != 4 {
		t.Fatalf("%d buffers' bytes for %d buffers", len(data), len(bufs))
	}
	raw, _ := os.ReadFile(filepath.Join(paths[0], "pool.bin"))
	for i, b := range bufs {
		if string(data[i]) != string(raw[b.Offset:b.Offset+b.Size]) {
			t.Errorf("buffer %d: not the bytes at offset %d", i, b.Offset)
		}
	}
	if pages := d.Manifest.SGLangPages(&d.Manifest.Requests[0]); len(pages) != 3 {
		t.Errorf("pages %v, want 3 for 5 tokens of page size 2", pages)
	}
	d.Close()

	// Buffer 3 moved 8 bytes on: past the end of pool.bin.
	man := filepath.Join(paths[0], "manifest.json")
	text, _ := os.ReadFile(man)
	m, err := layout.ParseManifest(man, text)
	if err != nil {
		t.Fatal(err)
	}
	m.SGLang.Buffers[3].Offset += 8
	moved, _ := layout.MarshalManifest(m)
	os.WriteFile(man, moved, 0o644)
	_, err = layout.Open(paths[0])
	var pe *parse.Error
	if err == nil || !strings.Contains(err.Error(), "sglang.buffers[3]") || !strings.Contains(err.Error(), "past the end") || !errors.As(err, &pe) || pe.Field != "sglang.buffers[3]" {
		t.Errorf("buffer past the pool file: %v", err)
	}

	os.WriteFile(man, []byte(strings.ReplaceAll(string(text), `"file": "pool.bin"`, `"file": "../pool.bin"`)), 0o644)
	if _, err := layout.Open(paths[0]); err == nil || !strings.Contains(err.Error(), "outside the dump directory") {
		t.Errorf("pool file outside: %v", err)
	}
}
