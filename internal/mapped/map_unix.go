//go:build linux || darwin

package mapped

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps f, whose size at open is size, read-only and shared; the
// descriptor may be closed once it returns.
func mapFile(f *os.File, size int64, display string) ([]byte, error) {
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
	return data, nil
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
