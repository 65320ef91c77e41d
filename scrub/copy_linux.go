//go:build linux

package scrub

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Xattrs lists the extended attributes of the file at path with their
// values (none where the filesystem keeps none).
func Xattrs(path string) (map[string][]byte, error) {
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

// SetXattr sets (value not nil) or removes (nil) an extended attribute of
// a file kvaudit writes.
func SetXattr(f *os.File, name string, value []byte) error {
	if value == nil {
		rc, err := f.SyscallConn()
		if err != nil {
			return err
		}
		var xerr error
		if err := rc.Control(func(fd uintptr) { xerr = unix.Fremovexattr(int(fd), name) }); err != nil {
			return err
		}
		return xerr
	}
	return setxattr(f, name, value)
}
