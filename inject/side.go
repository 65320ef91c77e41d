package inject

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
)

// edit replaces bytes of an input file in the copy: data (computed from
// the input, never aliasing mapped memory that another edit writes) at
// offset off of file.
type edit struct {
	file   string // absolute input path
	off    int64
	data   []byte
	tensor string // the layer, or "manifest"
}

// rankFiles are the files of one rank's dump and where they go.
type rankFiles struct {
	rank  Rank
	files []string // absolute input paths
	rel   []string // output paths relative to the output directory
}

// dumpFiles returns every file a dump reads: a dump directory's whole tree,
// or a .safetensors dump and the files its layers name beside it. Each is
// placed in the output under its path relative to the dump's parent
// directory.
func dumpFiles(d *layout.Dump) (rankFiles, error) {
	pp, tp := d.Rank()
	rf := rankFiles{rank: Rank{PP: pp, TP: tp}}
	path, err := filepath.Abs(d.Path)
	if err != nil {
		return rf, err
	}
	root := filepath.Dir(path)
	st, err := os.Stat(path)
	if err != nil {
		return rf, err
	}
	add := func(p string) error {
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("dump %q: file %q is outside %q: cannot copy it beside the dump", d.Path, p, root)
		}
		if !slices.Contains(rf.files, p) {
			rf.files = append(rf.files, p)
			rf.rel = append(rf.rel, filepath.ToSlash(rel))
		}
		return nil
	}
	if st.IsDir() {
		err := filepath.WalkDir(path, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			if !e.Type().IsRegular() {
				return fmt.Errorf("dump %q: %q is not a regular file", d.Path, p)
			}
			return add(p)
		})
		return rf, err
	}
	if err := add(path); err != nil {
		return rf, err
	}
	for _, g := range d.Manifest.Groups {
		for _, l := range g.Layers {
			for _, name := range []string{l.File, sourceFile(l.Source)} {
				if name != "" {
					if err := add(filepath.Join(root, filepath.FromSlash(name))); err != nil {
						return rf, err
					}
				}
			}
		}
	}
	return rf, nil
}

func sourceFile(s *layout.Source) string {
	if s == nil {
		return ""
	}
	return s.File
}

// manifestFile returns the file that holds a dump's manifest.
func manifestFile(d *layout.Dump) (string, error) {
	path, err := filepath.Abs(d.Path)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return filepath.Join(path, "manifest.json"), nil
	}
	return path, nil
}

// prepareOut creates the output directory, which must not exist or be
// empty.
func prepareOut(out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("output directory %q is not empty", out)
	}
	return nil
}

// materialize writes the copy of a side into out: every file of every rank
// (or, with changedOnly, of the ranks an edit changes) hard-linked from the
// input (copied where links fail), and every file an edit changes written
// as a fresh file with the edits applied. It returns the byte ranges that
// differ from the input, exactly.
func materialize(dumps []*layout.Dump, out string, edits []edit, changedOnly bool) ([]Change, error) {
	byFile := map[string][]edit{}
	for _, e := range edits {
		byFile[e.file] = append(byFile[e.file], e)
	}
	var ranks []rankFiles
	taken := map[string]string{}
	for _, d := range dumps {
		rf, err := dumpFiles(d)
		if err != nil {
			return nil, err
		}
		for _, rel := range rf.rel {
			if prev, dup := taken[rel]; dup {
				return nil, fmt.Errorf("dumps %q and %q both write %q into the copy: give the ranks of one side", prev, d.Path, rel)
			}
			taken[rel] = d.Path
		}
		ranks = append(ranks, rf)
	}
	for f := range byFile {
		if _, ok := taken[relOf(ranks, f)]; !ok {
			return nil, fmt.Errorf("internal error: an edit names %q, which no dump of the side reads", f)
		}
	}
	var changes []Change
	for _, rf := range ranks {
		changed := slices.ContainsFunc(rf.files, func(f string) bool { return len(byFile[f]) > 0 })
		if changedOnly && !changed {
			continue
		}
		for i, src := range rf.files {
			dst := filepath.Join(out, filepath.FromSlash(rf.rel[i]))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return nil, err
			}
			es := byFile[src]
			if len(es) == 0 {
				if err := linkOrCopy(src, dst); err != nil {
					return nil, err
				}
				continue
			}
			c, err := writeEdited(src, dst, es)
			if err != nil {
				return nil, err
			}
			for j := range c {
				c[j].File, c[j].Rank = rf.rel[i], rf.rank
			}
			changes = append(changes, c...)
		}
	}
	return changes, nil
}

func relOf(ranks []rankFiles, f string) string {
	for _, rf := range ranks {
		if i := slices.Index(rf.files, f); i >= 0 {
			return rf.rel[i]
		}
	}
	return ""
}

// linkOrCopy hard-links src to dst, or copies it when a link is not
// possible (another file system). Neither ever writes to src.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}

// writeEdited writes dst, a new file, as src with the edits applied, and
// returns the ranges that differ from src (Offset and Length, Tensor).
func writeEdited(src, dst string, edits []edit) ([]Change, error) {
	orig, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	data := slices.Clone(orig)
	for _, e := range edits {
		if e.off < 0 || e.off+int64(len(e.data)) > int64(len(data)) {
			return nil, fmt.Errorf("internal error: an edit of %q at %d+%d is past its end (%d bytes)", src, e.off, len(e.data), len(data))
		}
		copy(data[e.off:], e.data)
	}
	sorted := slices.Clone(edits)
	slices.SortFunc(sorted, func(a, b edit) int { return cmp.Compare(a.off, b.off) })
	var changes []Change
	for _, e := range sorted {
		end := e.off + int64(len(e.data))
		for i := e.off; i < end; {
			if orig[i] == data[i] {
				i++
				continue
			}
			j := i
			for j < end && orig[j] != data[j] {
				j++
			}
			if n := len(changes); n > 0 && changes[n-1].Tensor == e.tensor && changes[n-1].Offset+changes[n-1].Length >= i {
				changes[n-1].Length = max(changes[n-1].Length, j-changes[n-1].Offset)
			} else {
				changes = append(changes, Change{Tensor: e.tensor, Offset: i, Length: j - i})
			}
			i = j
		}
	}
	if err := writeNew(dst, data); err != nil {
		return nil, err
	}
	return changes, nil
}

// writeNew writes data to a file that must not exist yet.
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %q: %w", path, err)
	}
	return f.Close()
}

// replaceText returns the edit that replaces the one occurrence of old in
// a file with new (of the same length).
func replaceText(file string, data []byte, old, new string) (edit, error) {
	if len(old) != len(new) {
		return edit{}, errors.New("internal error: a text replacement changes the length")
	}
	if n := bytes.Count(data, []byte(old)); n != 1 {
		return edit{}, fmt.Errorf("%q holds %q %d times, want once", file, old, n)
	}
	i := bytes.Index(data, []byte(old))
	return edit{file: file, off: int64(i), data: []byte(new), tensor: "manifest"}, nil
}
