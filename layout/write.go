package layout

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// MarshalManifest returns the manifest as indented JSON.
func MarshalManifest(m *Manifest) ([]byte, error) {
	return json.MarshalIndent(m, "", " ")
}

// WriteDumpFile writes a one-file dump: a .safetensors file whose
// __metadata__ holds the manifest under MetadataKey. It refuses to replace
// an existing file.
func WriteDumpFile(path string, m *Manifest, tensors []TensorData) error {
	text, err := MarshalManifest(m)
	if err != nil {
		return err
	}
	return writeNew(path, func(w *bufio.Writer) error {
		return WriteSafetensors(w, map[string]string{MetadataKey: string(text)}, tensors)
	})
}

// WriteDumpDir writes a dump directory: manifest.json and, when tensors is
// not empty, data.safetensors holding them (the layers' default file). It
// refuses to write into an existing directory's files.
func WriteDumpDir(dir string, m *Manifest, tensors []TensorData) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	text, err := MarshalManifest(m)
	if err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, "manifest.json"), func(w *bufio.Writer) error {
		_, err := w.Write(append(text, '\n'))
		return err
	}); err != nil {
		return err
	}
	if len(tensors) == 0 {
		return nil
	}
	return writeNew(filepath.Join(dir, "data.safetensors"), func(w *bufio.Writer) error {
		return WriteSafetensors(w, nil, tensors)
	})
}

// WriteRawFile writes data to a new file (a raw tensor source).
func WriteRawFile(path string, data []byte) error {
	return writeNew(path, func(w *bufio.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeNew creates path (which must not exist) and writes it through fill.
func writeNew(path string, fill func(*bufio.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := fill(w); err != nil {
		f.Close()
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("writing %q: %w", path, err)
	}
	return f.Close()
}
