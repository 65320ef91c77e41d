//go:build !unix

package scrub

import (
	"fmt"
	"io/fs"
	"os"
)

// dirHandle is an open directory of a store, an os.Root: every open is
// confined to it.
type dirHandle struct{ r *os.Root }

func openTop(path string) (*dirHandle, error) {
	r, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	return &dirHandle{r}, nil
}

func (h *dirHandle) list(n int) ([]fs.DirEntry, error) {
	f, err := h.r.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(n)
}

func (h *dirHandle) sub(name string) (*dirHandle, error) {
	r, err := h.r.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	return &dirHandle{r}, nil
}

func (h *dirHandle) open(name string) (*os.File, fs.FileInfo, error) {
	f, err := h.r.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
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

func (h *dirHandle) size(name string) (int64, error) {
	st, err := h.r.Lstat(name)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (h *dirHandle) close() { h.r.Close() }
