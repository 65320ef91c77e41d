//go:build !linux && !darwin

package mapped

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Map reads the regular file at path into memory (this system has no
// supported mmap). A zero-length file is an error wrapping ErrEmpty, as
// on systems with mmap; a file that is not a regular file is a *ReadError.
func Map(path string) (*Mapping, error) {
	return MapIn(nil, path, path)
}

func MapIn(root *os.Root, name, display string) (*Mapping, error) {
	f, _, err := OpenRegular(root, name, display)
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
		return nil, fmt.Errorf("mapping %q: %w", display, ErrEmpty)
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
