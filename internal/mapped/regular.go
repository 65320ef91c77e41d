package mapped

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
)

// A ReadError is an input file kvaudit refuses to read: not a regular
// file, larger than the limit for what it is, or named by a dump outside
// the dump's directory.
type ReadError struct {
	Path string
	Msg  string
}

func (e *ReadError) Error() string { return fmt.Sprintf("%q: %s", e.Path, e.Msg) }

// OpenRegular opens name for reading without blocking and checks that it
// is a regular file: a FIFO, a device (/dev/zero), a socket or a directory
// is refused at once, never read. root, when not nil, confines name to it.
func OpenRegular(root *os.Root, name, display string) (*os.File, fs.FileInfo, error) {
	var f *os.File
	var err error
	if root != nil {
		f, err = root.OpenFile(name, os.O_RDONLY|oNonblock, 0)
	} else {
		f, err = os.OpenFile(name, os.O_RDONLY|oNonblock, 0)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &ReadError{Path: display, Msg: fmt.Sprintf("not a regular file (%s)", describeMode(fi.Mode()))}
	}
	return f, fi, nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}

// ReadRegularFile reads the whole regular file at path, refusing (with a
// *ReadError) anything that is not a regular file and any file of more
// than limit bytes; what names the kind of file in the error ("record",
// "payload file"). It never blocks on a FIFO and never reads more than
// limit+1 bytes, even from a file that grows while it is read.
func ReadRegularFile(path string, limit int64, what string) ([]byte, error) {
	f, fi, err := OpenRegular(nil, path, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadCapped(f, fi.Size(), path, limit, what)
}

// ReadCapped reads f whole (size is its size at open), at most limit
// bytes.
func ReadCapped(f io.Reader, size int64, path string, limit int64, what string) ([]byte, error) {
	if size > limit {
		return nil, &ReadError{Path: path, Msg: fmt.Sprintf("%d bytes is more than the %d-byte limit for a %s", size, limit, what)}
	}
	data, err := readAllCapped(f, limit, size)
	if errors.Is(err, errTooLarge) {
		return nil, &ReadError{Path: path, Msg: fmt.Sprintf("more than the %d-byte limit for a %s", limit, what)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", path, err)
	}
	return data, nil
}

// errTooLarge is returned by readAllCapped for input beyond its limit.
var errTooLarge = errors.New("input exceeds the size limit")

// readAllCapped reads r to its end, or returns errTooLarge as soon as more
// than limit bytes arrive (it reads at most limit+1 bytes). hint, when
// positive, sizes the buffer (a file's size).
func readAllCapped(r io.Reader, limit, hint int64) ([]byte, error) {
	buf := make([]byte, 0, min(max(hint+1, 512), limit+1))
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), int(limit+1))])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, errTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readWhole reads, for Map on a system without mmap, the size bytes a
// file had when it was opened, as a mapping holds them: never more (the
// bytes of a file that grew are not read), into one buffer of that size.
// A file that ends before them was truncated while read: an error naming
// it, as reading a truncated mapping is (FaultError).
func readWhole(r io.Reader, size int64, display string) ([]byte, error) {
	switch {
	case size == 0:
		return nil, fmt.Errorf("mapping %q: %w", display, ErrEmpty)
	case size < 0 || size > math.MaxInt:
		return nil, fmt.Errorf("mapping %q: file size %d cannot be mapped", display, size)
	}
	data := make([]byte, size)
	n, err := io.ReadFull(r, data)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("mapping %q: the file ends after %d of its %d bytes at open: it was truncated while read", display, n, size)
	}
	if err != nil {
		return nil, fmt.Errorf("mapping %q: %w", display, err)
	}
	return data, nil
}
