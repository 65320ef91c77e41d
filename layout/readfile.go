package layout

import (
	"errors"
	"fmt"
	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"io"
	"io/fs"
	"os"
)

// Size limits of what kvaudit reads whole into memory. Data files are
// mapped, not read, so they have no limit of their own; a safetensors
// header is limited by safetensors.MaxHeader.
const (
	// MaxManifestSize bounds a dump directory's manifest.json: the bound of
	// an embedded manifest, safetensors.MaxHeader (decoded, a manifest takes
	// several times its size in memory).
	MaxManifestSize = safetensors.MaxHeader
	// MaxRecordSize bounds a record file (`checksum -o record`), and
	// MaxPayloadSize a payload or kv_transfer_params file, or payloads on
	// stdin.
	MaxRecordSize  = 1 << 30
	MaxPayloadSize = 1 << 30
	// sniffSize is how much of a *.json file in a side directory is read to
	// tell a record from any other JSON file.
	sniffSize = 4096
)

// A ReadError is an input file kvaudit refuses to read: not a regular
// file, larger than the limit for what it is, or named by a dump outside
// the dump's directory.
type ReadError = mapped.ReadError

// OpenRegular opens the regular file at path for reading, refusing (with
// a *ReadError) a FIFO, device, socket or directory without blocking on
// it. It returns the file's information from the open descriptor.
func OpenRegular(path string) (*os.File, fs.FileInfo, error) {
	return mapped.OpenRegular(nil, path, path)
}

// ReadRegularFile reads the whole regular file at path, refusing (with a
// *ReadError) anything that is not a regular file and any file of more
// than limit bytes; what names the kind of file in the error ("record",
// "payload file"). It never blocks on a FIFO and never reads more than
// limit+1 bytes, even from a file that grows while it is read.
func ReadRegularFile(path string, limit int64, what string) ([]byte, error) {
	f, fi, err := mapped.OpenRegular(nil, path, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readCapped(f, fi.Size(), path, limit, what)
}

// readCapped reads f whole (size is its size at open), at most limit
// bytes.
func readCapped(f io.Reader, size int64, path string, limit int64, what string) ([]byte, error) {
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

// readHead returns up to n bytes from the start of the regular file at
// path.
func readHead(path string, n int) ([]byte, error) {
	f, _, err := mapped.OpenRegular(nil, path, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	k, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading %q: %w", path, err)
	}
	return buf[:k], nil
}
