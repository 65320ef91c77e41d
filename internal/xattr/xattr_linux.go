//go:build linux

package xattr

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// List returns the extended attributes of the file at path with their
// values (none where the filesystem keeps none).
func List(path string) (map[string][]byte, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(path, buf)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 64<<10)
		k, err := unix.Lgetxattr(path, name, v)
		if err != nil {
			return nil, err
		}
		out[name] = v[:k]
	}
	return out, nil
}

// Set sets (value not nil) or removes (nil) the extended attribute name
// of the open file f; setting one where the filesystem keeps none is
// ErrUnsupported.
func Set(f *os.File, name string, value []byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var xerr error
	if err := rc.Control(func(fd uintptr) {
		if value == nil {
			xerr = unix.Fremovexattr(int(fd), name)
		} else {
			xerr = unix.Fsetxattr(int(fd), name, value, 0)
		}
	}); err != nil {
		return err
	}
	if value != nil && (errors.Is(xerr, unix.ENOTSUP) || errors.Is(xerr, unix.EOPNOTSUPP)) {
		return ErrUnsupported
	}
	return xerr
}
