//go:build linux || darwin

package mapped

import (
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// Map maps the regular file at path read-only and shared. A zero-length
// file is an error wrapping ErrEmpty (mmap of zero bytes is invalid);
// a file that is not a regular file (a FIFO, a device) is a *ReadError,
// refused without blocking. The file descriptor is closed before Map
// returns; the mapping stays valid until Close.
func Map(path string) (*Mapping, error) {
	return MapIn(nil, path, path)
}

// MapIn maps the regular file name, confined to root when root is not nil;
// display names it in errors.
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
	size := fi.Size()
	if size == 0 {
		return nil, fmt.Errorf("mapping %q: %w", display, ErrEmpty)
	}
	if size < 0 || size > math.MaxInt {
		return nil, fmt.Errorf("mapping %q: file size %d cannot be mapped", display, size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %q: %w", display, err)
	}
	return &Mapping{Path: display, Data: data}, nil
}

// Close unmaps the file. Closing a closed or nil Mapping does nothing.
func (m *Mapping) Close() error {
	if m == nil || m.Data == nil {
		return nil
	}
	data := m.Data
	m.Data = nil
	if err := unix.Munmap(data); err != nil {
		return fmt.Errorf("unmapping %q: %w", m.Path, err)
	}
	return nil
}
