//go:build linux

package scrub

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// getxattr reads the extended attribute name of the open file f into buf
// and returns its length. A missing attribute is errNoAttr, a filesystem
// without extended attributes errNoXattrs.
func getxattr(f *os.File, name string, buf []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var xerr error
	if err := rc.Control(func(fd uintptr) { n, xerr = unix.Fgetxattr(int(fd), name, buf) }); err != nil {
		return 0, err
	}
	switch {
	case xerr == nil:
		return n, nil
	case errors.Is(xerr, unix.ENODATA):
		return 0, errNoAttr
	case errors.Is(xerr, unix.ENOTSUP) || errors.Is(xerr, unix.EOPNOTSUPP):
		return 0, errNoXattrs
	case errors.Is(xerr, unix.ERANGE):
		return len(buf) + 1, nil
	}
	return 0, xerr
}

// blockSize is the filesystem block size at dir (statvfs f_bsize, what
// LMCache pads an O_DIRECT trailer to), 0 when unknown.
func blockSize(dir string) int64 {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil || st.Bsize <= 0 || st.Bsize > 1<<20 {
		return 0
	}
	return int64(st.Bsize)
}
