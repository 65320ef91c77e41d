//go:build !linux && !darwin

package layout

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// mapFile reads the regular file at path into memory (this system has no
// supported mmap). A zero-length file is an error wrapping errEmptyFile, as
// on systems with mmap; a file that is not a regular file is a *ReadError.
func mapFile(path string) (*Mapping, error) {
	return mapIn(nil, path, path)
}

func mapIn(root *os.Root, name, display string) (*Mapping, error) {
	f, _, err := openRegular(root, name, display)
	if err != nil {
		var re *ReadError
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, fmt.Errorf("mapping %q: %w", display, err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("mapping %q: %w", display, err)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("mapping %q: %w", display, errEmptyFile)
	}
	return &Mapping{Path: display, Data: data}, nil
}

// Close releases the file's contents. Closing a closed or nil Mapping does
// nothing.
func (m *Mapping) Close() error {
	if m != nil {
		m.Data = nil
	}
	return nil
}
