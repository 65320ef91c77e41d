package layout_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// TestNoAddress: a dump without addresses cannot be placed; the error
// names the field.
func TestNoAddress(t *testing.T) {
	dir := t.TempDir()
	paths, err := synth.Write(dir, synth.Config{Preset: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "bare.safetensors")
	rewriteEmbedded(t, paths[0], dst, func(m *layout.Manifest) { m.Groups[0].Layers[1].Address = "" })
	d, err := layout.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = addrmap.New(d)
	var na *addrmap.NoAddressError
	if !errors.As(err, &na) || na.Field != "groups[0].layers[1].address" {
		t.Fatalf("got %v", err)
	}
}
