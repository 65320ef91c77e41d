package mapped

import (
	"fmt"
	"io/fs"
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
