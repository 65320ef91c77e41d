//go:build unix

package scrub

import (
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// dirHandle is an open directory of a store. Its entries are opened
// relative to it by their names alone (one openat each, O_NOFOLLOW: a
// symlink is refused, never followed), so no read can leave the path
// given: names come from the directory's own listing and never hold "/".
type dirHandle struct{ f *os.File }

func openTop(path string) (*dirHandle, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &dirHandle{os.NewFile(uintptr(fd), path)}, nil
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%q: not a name in its directory", name)
	}
	return nil
}

func (h *dirHandle) fd() int { return int(h.f.Fd()) }

func (h *dirHandle) list(n int) ([]fs.DirEntry, error) { return h.f.ReadDir(n) }

func (h *dirHandle) sub(name string) (*dirHandle, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(h.fd(), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &dirHandle{os.NewFile(uintptr(fd), name)}, nil
}

// open opens the regular file name for reading, without blocking on a
// FIFO and without following a symlink.
func (h *dirHandle) open(name string) (*os.File, fs.FileInfo, error) {
	if err := checkName(name); err != nil {
		return nil, nil, err
	}
	fd, err := unix.Openat(h.fd(), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%q: not a regular file", name)
	}
	return f, st, nil
}

// size is the size of the entry name (not followed).
func (h *dirHandle) size(name string) (int64, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(h.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return st.Size, nil
}

func (h *dirHandle) close() { h.f.Close() }
