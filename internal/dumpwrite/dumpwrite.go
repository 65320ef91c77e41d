// Package dumpwrite writes kvaudit dumps (docs/spec.md): a one-file
// .safetensors dump with its manifest embedded, a dump directory, a raw
// tensor file; each appears complete or not at all (internal/safeio).
// kvaudit synth and the faults of kvaudit inject write with it; package
// layout reads what it writes.
package dumpwrite

import (
	"io"
	"path/filepath"

	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/layout"
)

// Options change how the write functions treat existing files.
type Options struct {
	// Force replaces existing files (never through a symlink: the link
	// itself is replaced).
	Force bool
	// Progress, when set, is told the bytes of each write into a file
	// as it completes (a progress bar's).
	Progress func(n int64)
}

func force(opts []Options) bool { return len(opts) > 0 && opts[0].Force }

// counted returns w, telling opts' Progress of every write.
func counted(w io.Writer, opts []Options) io.Writer {
	if len(opts) == 0 || opts[0].Progress == nil {
		return w
	}
	return progressWriter{w, opts[0].Progress}
}

type progressWriter struct {
	w        io.Writer
	progress func(int64)
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.progress(int64(n))
	return n, err
}

// File writes a one-file dump: a .safetensors file whose __metadata__
// holds the manifest under layout.ManifestKey. It refuses to replace
// an existing file unless opts say Force. The file appears complete or
// not at all (internal/safeio).
func File(path string, m *layout.Manifest, tensors []safetensors.TensorData, opts ...Options) error {
	text, err := layout.MarshalManifest(m)
	if err != nil {
		return err
	}
	return safeio.Write(path, force(opts), func(w io.Writer) error {
		return safetensors.Write(counted(w, opts), map[string]string{layout.ManifestKey: string(text)}, tensors)
	})
}

// Dir writes a dump directory: manifest.json and, when tensors is
// not empty, data.safetensors holding them (the layers' default file). It
// refuses to replace an existing directory's files unless opts say Force.
func Dir(dir string, m *layout.Manifest, tensors []safetensors.TensorData, opts ...Options) error {
	if err := safeio.MkdirOut(dir); err != nil {
		return err
	}
	text, err := layout.MarshalManifest(m)
	if err != nil {
		return err
	}
	if err := safeio.Write(filepath.Join(dir, "manifest.json"), force(opts), func(w io.Writer) error {
		_, err := w.Write(append(text, '\n'))
		return err
	}); err != nil {
		return err
	}
	if len(tensors) == 0 {
		return nil
	}
	return safeio.Write(filepath.Join(dir, "data.safetensors"), force(opts), func(w io.Writer) error {
		return safetensors.Write(counted(w, opts), nil, tensors)
	})
}

// Raw writes data to a new file (a raw tensor source).
func Raw(path string, data []byte, opts ...Options) error {
	if err := safeio.WriteFile(path, data, force(opts)); err != nil {
		return err
	}
	if len(opts) > 0 && opts[0].Progress != nil {
		opts[0].Progress(int64(len(data)))
	}
	return nil
}
