package layout_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/dumpwrite"
	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
)

// rewriteEmbedded writes a copy of an embedded dump with its manifest
// changed by edit.
func rewriteEmbedded(t *testing.T, src, dst string, edit func(m *layout.Manifest)) {
	t.Helper()
	d, err := layout.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tensors []safetensors.TensorData
	for _, ti := range f.Tensors {
		tensors = append(tensors, safetensors.TensorData{Name: ti.Name, Dtype: ti.Dtype, Shape: ti.Shape, Data: ti.Data})
	}
	edit(d.Manifest)
	if err := dumpwrite.File(dst, d.Manifest, tensors); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedDumpReadsOnlyItself: a .safetensors dump whose manifest
// names another file (a neighbour rank's, a raw file) is refused naming
// the field; naming itself is fine.
func TestEmbeddedDumpReadsOnlyItself(t *testing.T) {
	dir := t.TempDir()
	paths, err := synth.Write(dir, synth.Config{Preset: "tiny", TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Base(paths[1])
	for _, c := range []struct {
		name, field string
		edit        func(l *layout.Layer)
	}{
		{"neighbour", ".file", func(l *layout.Layer) { l.File = other }},
		{"self", "", func(l *layout.Layer) { l.File = "self.safetensors" }},
		{"raw", ".source.file", func(l *layout.Layer) {
			l.Tensor = ""
			l.Source = &layout.Source{File: "kv.bin", Dtype: "F32", Shape: []int64{1}}
		}},
	} {
		dst := filepath.Join(dir, "producer", "self.safetensors")
		os.Remove(dst)
		rewriteEmbedded(t, paths[0], dst, func(m *layout.Manifest) { c.edit(&m.Groups[0].Layers[0]) })
		os.WriteFile(filepath.Join(dir, "producer", "kv.bin"), make([]byte, 64), 0o644)
		d, err := layout.Open(dst)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else {
				d.Close()
			}
			continue
		}
		de := parse.As(err, parse.Dump)
		if de == nil || de.Field != "groups[0].layers[0]"+c.field || !strings.Contains(err.Error(), "a .safetensors dump reads only its own tensors") {
			t.Errorf("%s: got %v, want a refusal naming groups[0].layers[0]%s", c.name, err, c.field)
		}
		if d != nil {
			d.Close()
		}
	}
}

// TestOpenRefusesNonRegular: a device in place of a dump's file is
// refused before anything is read from it.
func TestOpenRefusesNonRegular(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	_, err := safetensors.Open("/dev/zero")
	var re *layout.ReadError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "not a regular file (a character device)") {
		t.Fatalf("got %v, want a ReadError for a character device", err)
	}
	_, err = mapped.ReadRegularFile("/dev/zero", 1<<20, "record")
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want a ReadError", err)
	}
}
