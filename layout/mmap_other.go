//go:build !linux && !darwin

package layout

import (
	"fmt"
	"os"
)

// MapFile reads the regular file at path into memory (this system has no
// supported mmap). A zero-length file is an error wrapping ErrEmptyFile, as
// on systems with mmap; so is a file that is not a regular file.
func MapFile(path string) (*Mapping, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("mapping %q: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("mapping %q: not a regular file (%s)", path, fi.Mode().Type())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mapping %q: %w", path, err)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("mapping %q: %w", path, ErrEmptyFile)
	}
	return &Mapping{Path: path, Data: data}, nil
}

// Close releases the file's contents. Closing a closed or nil Mapping does
// nothing.
func (m *Mapping) Close() error {
	if m != nil {
		m.Data = nil
	}
	return nil
}

// Advise does nothing on this system: the file is already in memory.
func (m *Mapping) Advise(offset, length int64, sequential bool) {}
