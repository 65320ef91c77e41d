package inject

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/safeio"
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

// prepareOut creates a scratch output directory (the campaign's trials,
// Prepare's copy), which must not exist or be empty.
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

// checkOut refuses, before anything is copied, an output directory that
// Inject would not be allowed to replace.
func checkOut(out string, force bool) error {
	st, err := os.Lstat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("output %q is a symlink: kvaudit does not write through links", out)
	}
	if !st.IsDir() {
		return fmt.Errorf("output %q exists and is not a directory", out)
	}
	entries, err := os.ReadDir(out)
	if err != nil || len(entries) == 0 {
		return err
	}
	if !force {
		return fmt.Errorf("output directory %q is not empty (--force replaces a previous kvaudit inject output)", out)
	}
	return injectOutput(out)
}

// injectOutput accepts a directory that a previous injection wrote (it
// holds fault.json): the only kind --force replaces.
func injectOutput(dir string) error {
	if st, err := os.Lstat(filepath.Join(dir, FaultFile)); err == nil && st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("output directory %q holds no %s: --force replaces only a previous kvaudit inject output", dir, FaultFile)
}

// staged runs fill on a new temporary directory beside out and renames it
// to out when fill succeeds; otherwise (an error, a signal) the
// temporary directory is removed and out is left as it was.
func staged(out string, force bool, fill func(stage string) error) error {
	parent := filepath.Dir(out)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	stage, err := safeio.StageDir(parent, "."+filepath.Base(out)+".kvaudit-tmp-")
	if err != nil {
		return err
	}
	defer safeio.RemoveTemp(stage)
	if err := os.Chmod(stage, 0o755); err != nil { // it becomes out
		return err
	}
	if err := fill(stage); err != nil {
		return err
	}
	return safeio.PlaceDir(stage, out, force, injectOutput)
}

// sideFiles returns the files of every dump and checks that no two land on
// the same output path.
func sideFiles(dumps []*layout.Dump) ([]rankFiles, error) {
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
	return ranks, nil
}

// copySide copies every file of every dump into dir (streamed, never
// linked) and returns the copies' files (absolute paths in dir), as
// dumpFiles would find them in the copies.
func copySide(ctx context.Context, dumps []*layout.Dump, dir string) ([]rankFiles, error) {
	ranks, err := sideFiles(dumps)
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	copies := make([]rankFiles, len(ranks))
	for r, rf := range ranks {
		copies[r] = rankFiles{rank: rf.rank, rel: rf.rel}
		for i, src := range rf.files {
			dst := filepath.Join(dir, filepath.FromSlash(rf.rel[i]))
			if err := copyFile(ctx, src, dst); err != nil {
				return nil, err
			}
			copies[r].files = append(copies[r].files, dst)
		}
	}
	return copies, nil
}

// materialize writes into out the files of the ranks the edits change
// (with changedOnly; every rank without), copied from the input and
// patched, and returns the byte ranges that differ from the input.
func materialize(ctx context.Context, dumps []*layout.Dump, out string, edits []edit, changedOnly bool) ([]Change, error) {
	ranks, err := sideFiles(dumps)
	if err != nil {
		return nil, err
	}
	byFile := map[string][]edit{}
	for _, e := range edits {
		if relOf(ranks, e.file) == "" {
			return nil, checksum.Internalf("an edit names %q, which no dump of the side reads", e.file)
		}
		byFile[e.file] = append(byFile[e.file], e)
	}
	var copied []rankFiles
	dstOf := map[string]string{}
	for _, rf := range ranks {
		changed := slices.ContainsFunc(rf.files, func(f string) bool { return len(byFile[f]) > 0 })
		if changedOnly && !changed {
			continue
		}
		c := rankFiles{rank: rf.rank, rel: rf.rel}
		for i, src := range rf.files {
			dst := filepath.Join(out, filepath.FromSlash(rf.rel[i]))
			if err := copyFile(ctx, src, dst); err != nil {
				return nil, err
			}
			c.files = append(c.files, dst)
			dstOf[src] = dst
		}
		copied = append(copied, c)
	}
	moved := make([]edit, len(edits)) // in the planner's order: later edits of the same bytes win
	for i, e := range edits {
		moved[i] = e
		moved[i].file = dstOf[e.file]
	}
	return patch(copied, moved)
}

func relOf(ranks []rankFiles, f string) string {
	for _, rf := range ranks {
		if i := slices.Index(rf.files, f); i >= 0 {
			return rf.rel[i]
		}
	}
	return ""
}

// copyHook, when set (tests), runs after each chunk copyFile writes.
var copyHook func(ctx context.Context)

func init() {
	if os.Getenv("KVAUDIT_TESTHOOK_STALL_COPY") != "" {
		// Tests of interruption: block after the first chunk of every
		// copy until the command is cancelled.
		copyHook = func(ctx context.Context) { <-ctx.Done() }
	}
}

// copyFile copies the regular file src to dst, which must not exist, in
// chunks, stopping when ctx is cancelled, and syncs it unless it lies in
// a scratch directory (safeio.InScratch: the campaign's trials, Prepare's
// copy). The caller's
// temporary directory holds dst, so a partial copy is never left under a
// final name.
func copyFile(ctx context.Context, src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil {
		return err
	} else if !st.Mode().IsRegular() {
		return fmt.Errorf("%q is not a regular file", src)
	}
	o, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer o.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.CopyN(o, in, 16<<20)
		if copyHook != nil && n > 0 {
			copyHook(ctx)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("copying %q to %q: %w", src, dst, err)
		}
	}
	if !safeio.InScratch(dst) {
		if err := o.Sync(); err != nil {
			return fmt.Errorf("writing %q: %w", dst, err)
		}
	}
	return o.Close()
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

// writeNew writes data to a file that must not exist yet, complete or not
// at all.
func writeNew(path string, data []byte) error {
	return safeio.WriteFile(path, data, false)
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
