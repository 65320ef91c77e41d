package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
)

// sideInput is what one side given on the command line holds: dumps to
// checksum and records computed elsewhere.
type sideInput struct {
	dumps   []*layout.Dump
	records []*checksum.Record
	// rest are paths that are neither dumps nor records (payloads, for
	// diff).
	rest []string
}

func (s *sideInput) Close() { layout.CloseAll(s.dumps) }

// openSide opens the dumps and reads the records among paths (files,
// dump directories, or directories holding either). Paths that are
// neither are returned in rest when keepRest, else they are an error.
func openSide(paths []string, keepRest bool) (*sideInput, error) {
	for _, p := range paths {
		if err := checkSidePath(p); err != nil {
			return nil, err
		}
	}
	dumpPaths, rest, err := layout.FindDumps(paths)
	if err != nil {
		return nil, err
	}
	in := &sideInput{}
	for _, p := range rest {
		// Regular files only (a FIFO or /dev/zero is refused at once), at
		// most layout.MaxRecordSize bytes.
		data, err := layout.ReadRegularFile(p, layout.MaxRecordSize, "record")
		if err != nil {
			return nil, err
		}
		recs, rerr := checksum.ParseRecords(p, data)
		if rerr != nil {
			if keepRest && !looksLikeRecord(data) {
				in.rest = append(in.rest, p)
				continue
			}
			return nil, rerr
		}
		in.records = append(in.records, recs...)
	}
	if in.dumps, err = layout.OpenSide(dumpPaths); err != nil {
		return nil, err
	}
	return in, nil
}

// checkSidePath explains the two ways a side's path goes wrong before it
// is read: it does not exist (a usage error), or it is a directory that
// holds no dump itself but whose subdirectories do (a root such as synth
// --out writes, holding producer/ and consumer/): it names them.
func checkSidePath(p string) error {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return usageErrorf("%q does not exist: want a dump (a .safetensors file, or a directory with manifest.json), a directory of dumps, or a record file", p)
	}
	if err != nil || !st.IsDir() || layout.IsDump(p) {
		return nil // read as usual
	}
	if _, _, err := layout.FindDumps([]string{p}); err == nil || !strings.Contains(err.Error(), "holds no dump") {
		return nil // dumps found, or an error of its own
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil
	}
	var sides []string
	for _, e := range entries {
		q := filepath.Join(p, e.Name())
		if e.IsDir() {
			if dumps, _, err := layout.FindDumps([]string{q}); err == nil && len(dumps) > 0 {
				sides = append(sides, q)
			}
		}
	}
	if len(sides) > 0 {
		return usageErrorf("%q holds no dump itself; the dumps are in %s: give one of them", p, orList(quoteAll(sides)))
	}
	return nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}

// looksLikeRecord says whether a file means to be a record (and so must be
// a valid one).
func looksLikeRecord(data []byte) bool {
	return bytes.Contains(data, []byte(checksum.RecordFormat))
}

// records checksums the side's dumps and returns them with the side's
// records.
func (s *sideInput) allRecords(ctx context.Context, opts checksum.Options) ([]*checksum.Record, error) {
	recs, err := checksum.Records(ctx, s.dumps, opts)
	if err != nil {
		return nil, err
	}
	return append(recs, s.records...), nil
}

// describeRanks says which ranks of a side are present, for errors.
func describeRanks(recs []*checksum.Record) string {
	if len(recs) == 0 {
		return "no ranks"
	}
	return fmt.Sprintf("%d of %d ranks (tp %d x pp %d)", len(recs), recs[0].TPSize*recs[0].PPSize, recs[0].TPSize, recs[0].PPSize)
}
