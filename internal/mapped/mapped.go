// Package mapped opens kvaudit's input files safely: regular files only
// (a FIFO or a device is refused without blocking), mapped read-only, and
// reads of mapped memory guarded, so that a file truncated while mapped is
// an error (FaultError) instead of a crash.
package mapped

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// A Mapping is a file mapped read-only into memory (on systems without
// mmap, read into memory). Data must never be written: on Linux and macOS
// a write faults. After Close, Data is nil and slices taken from it must
// not be used. A Mapping is not safe for concurrent Close.
type Mapping struct {
	Path string // the path given to Map
	Data []byte // the whole file, read-only
}

// Map maps the regular file at path read-only and shared (on a system
// without mmap, reads the bytes its size at open counts into memory). A
// zero-length file is an error wrapping ErrEmpty (mmap of zero bytes is
// invalid); a file that is not a regular file (a FIFO, a device) is a
// *ReadError, refused without blocking. The file descriptor is closed
// before Map returns; the mapping stays valid until Close.
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
	data, err := mapFile(f, fi.Size(), display)
	if err != nil {
		return nil, err
	}
	return &Mapping{Path: display, Data: data}, nil
}

// ErrEmpty is returned (wrapped, naming the file) by Map for a file
// of zero bytes, which cannot be mapped.
var ErrEmpty = errors.New("empty file")

// A FaultError reports that reading mapped memory faulted, which happens
// when a mapped file is truncated (or its storage fails) while it is mapped.
type FaultError struct {
	What string  // what was being read, usually the file path
	Addr uintptr // the faulting address
}

func (e *FaultError) Error() string {
	return fmt.Sprintf("reading %q: memory fault at %#x, the file was truncated or changed while mapped", e.What, e.Addr)
}

// Guard runs fn on the calling goroutine with debug.SetPanicOnFault(true),
// restoring the previous setting afterwards, and returns fn's error. A fault
// on memory inside fn (a read past the end of a mapped file that was
// truncated while mapped: SIGBUS) becomes a *FaultError naming what, instead
// of crashing the program. Any other panic, including a nil pointer
// dereference, is re-panicked. Only fn's own goroutine is protected:
// goroutines fn starts need their own Guard.
func Guard(what string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		r := recover()
		if r == nil {
			return
		}
		if re, ok := r.(runtime.Error); ok {
			// Faults turned into panics by SetPanicOnFault carry the faulting
			// address; nil dereferences (addresses below one page) do not.
			if fa, ok := re.(interface{ Addr() uintptr }); ok {
				err = &FaultError{What: what, Addr: fa.Addr()}
				return
			}
		}
		panic(r)
	}()
	return fn()
}
