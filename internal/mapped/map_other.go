//go:build !linux && !darwin

package mapped

import "os"

// mapFile reads f, whose size at open is size, into memory (this system
// has no supported mmap): the bytes its size at open counts, as a mapping
// holds them (readWhole).
func mapFile(f *os.File, size int64, display string) ([]byte, error) {
	return readWhole(f, size, display)
}

// Close releases the file's contents. Closing a closed or nil Mapping does
// nothing.
func (m *Mapping) Close() error {
	if m != nil {
		m.Data = nil
	}
	return nil
}
