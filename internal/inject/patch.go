package inject

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"slices"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/safeio"
)

// This file holds the edits a fault makes and their patching into the
// copies, measuring the byte ranges that change.

// edit replaces bytes of an input file in the copy: data (computed from
// the input, never aliasing mapped memory that another edit writes) at
// offset off of file.
type edit struct {
	file   string // absolute input path
	off    int64
	data   []byte
	tensor string // the layer, or "manifest"
}

// patch applies the edits, which name files of ranks (copies being
// written), in place, and returns the ranges that now differ from what the
// files held (Offset and Length, Tensor, File as the rank's relative path,
// Rank). Only the edited ranges are read.
func patch(ranks []rankFiles, edits []edit) ([]Change, error) {
	byFile := map[string][]edit{}
	for _, e := range edits {
		byFile[e.file] = append(byFile[e.file], e)
	}
	var changes []Change
	for _, rf := range ranks {
		for i, file := range rf.files {
			es := byFile[file]
			if len(es) == 0 {
				continue
			}
			c, err := patchFile(file, es)
			if err != nil {
				return nil, err
			}
			for j := range c {
				c[j].File, c[j].Rank = rf.rel[i], rf.rank
			}
			changes = append(changes, c...)
			delete(byFile, file)
		}
	}
	for f := range byFile {
		return nil, checksum.Internalf("an edit names %q, which no dump of the side reads", f)
	}
	return changes, nil
}

// patchFile applies edits (in order: a later edit of the same bytes wins)
// to file in place, syncs it unless it is scratch (as copyFile), and returns the ranges that
// differ from what it held.
func patchFile(file string, edits []edit) ([]Change, error) {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	sorted := slices.Clone(edits)
	slices.SortStableFunc(sorted, func(a, b edit) int { return cmp.Compare(a.off, b.off) })
	// Merge the edits' ranges into spans; each span is read, edited and
	// compared in memory (edits are cells and manifest text: small).
	type span struct {
		lo, hi     int64
		orig, data []byte
	}
	var spans []*span
	for _, e := range sorted {
		end := e.off + int64(len(e.data))
		if e.off < 0 || end > size {
			return nil, checksum.Internalf("an edit of %q at %d+%d is past its end (%d bytes)", file, e.off, len(e.data), size)
		}
		if n := len(spans); n > 0 && e.off <= spans[n-1].hi {
			spans[n-1].hi = max(spans[n-1].hi, end)
			continue
		}
		spans = append(spans, &span{lo: e.off, hi: end})
	}
	spanOf := func(off int64) *span {
		i, _ := slices.BinarySearchFunc(spans, off, func(s *span, off int64) int {
			if s.hi <= off {
				return -1
			}
			if s.lo > off {
				return 1
			}
			return 0
		})
		return spans[i]
	}
	for _, sp := range spans {
		sp.orig = make([]byte, sp.hi-sp.lo)
		if _, err := f.ReadAt(sp.orig, sp.lo); err != nil {
			return nil, fmt.Errorf("reading %q: %w", file, err)
		}
		sp.data = slices.Clone(sp.orig)
	}
	for _, e := range edits {
		sp := spanOf(e.off)
		copy(sp.data[e.off-sp.lo:], e.data)
	}
	var changes []Change
	for _, e := range sorted {
		sp := spanOf(e.off)
		orig, data := sp.orig[e.off-sp.lo:], sp.data[e.off-sp.lo:]
		n := int64(len(e.data))
		for i := int64(0); i < n; {
			if orig[i] == data[i] {
				i++
				continue
			}
			j := i
			for j < n && orig[j] != data[j] {
				j++
			}
			at := e.off + i
			if k := len(changes); k > 0 && changes[k-1].Tensor == e.tensor && changes[k-1].Offset+changes[k-1].Length >= at {
				changes[k-1].Length = max(changes[k-1].Length, e.off+j-changes[k-1].Offset)
			} else {
				changes = append(changes, Change{Tensor: e.tensor, Offset: at, Length: j - i})
			}
			i = j
		}
	}
	for _, sp := range spans {
		if _, err := f.WriteAt(sp.data, sp.lo); err != nil {
			return nil, fmt.Errorf("writing %q: %w", file, err)
		}
	}
	if !safeio.InScratch(file) {
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("writing %q: %w", file, err)
		}
	}
	return changes, f.Close()
}

// replaceText returns the edit that replaces the one occurrence of old in
// a file with new (of the same length).
func replaceText(file string, data []byte, old, new string) (edit, error) {
	if len(old) != len(new) {
		return edit{}, checksum.Internalf("a text replacement changes the length")
	}
	if n := bytes.Count(data, []byte(old)); n != 1 {
		return edit{}, fmt.Errorf("%q holds %q %d times, want once", file, old, n)
	}
	i := bytes.Index(data, []byte(old))
	return edit{file: file, off: int64(i), data: []byte(new), tensor: "manifest"}, nil
}
