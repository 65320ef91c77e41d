package layout

import (
	"errors"
	"fmt"
	"io"

	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/internal/safetensors"
)

// Size limits of what kvaudit reads whole into memory. Data files are
// mapped, not read, so they have no limit of their own; a safetensors
// header is limited by safetensors.MaxHeader.
const (
	// MaxManifestSize bounds a dump directory's manifest.json: the bound of
	// an embedded manifest, safetensors.MaxHeader (decoded, a manifest takes
	// several times its size in memory).
	MaxManifestSize = safetensors.MaxHeader
	// sniffSize is how much of a *.json file in a side directory is read to
	// tell a record from any other JSON file.
	sniffSize = 4096
)

// A ReadError is an input file kvaudit refuses to read: not a regular
// file, larger than the limit for what it is, or named by a dump outside
// the dump's directory.
type ReadError = mapped.ReadError

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
