//go:build !linux && !darwin

package mapped

import (
	"errors"
	"fmt"
	"os"
)

// Map reads the regular file at path into memory (this system has no
// supported mmap): the bytes its size at open counts, as a mapping holds
// them (readWhole). A zero-length file is an error wrapping ErrEmpty, as
// on systems with mmap; a file that is not a regular file is a *ReadError.
func Map(path string) (*Mapping, error) {
	return MapIn(nil, path, path)
}

// MapIn reads the regular file name, confined to root when root is not
// nil; display names it in errors.
func MapIn(root *os.Root, name, display string) (*Mapping, error) {
	f, fi, err := OpenRegular(root, name, display)
	if err != nil {
		var re *ReadError
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, fmt.Errorf("mapping %q: %w", display, err)
	}
	defer f.Close()
	data, err := readWhole(f, fi.Size(), display)
	if err != nil {
		return nil, err
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
