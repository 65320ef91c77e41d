package inject

import (
	"context"
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

// This file holds the copying of a side's files: which files a dump
// reads, and the streamed copies (never links) Inject and Prepare write.

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

// copyProgressKey holds, in a context, the function copyFile tells of each
// chunk it copies (Options.Progress): it reaches every copy, however deep,
// without a parameter through each.
type copyProgressKey struct{}

// withCopyProgress returns ctx carrying progress, when set.
func withCopyProgress(ctx context.Context, progress func(int64)) context.Context {
	if progress == nil {
		return ctx
	}
	return context.WithValue(ctx, copyProgressKey{}, progress)
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
		if n > 0 {
			if p, ok := ctx.Value(copyProgressKey{}).(func(int64)); ok {
				p(n)
			}
			if err := chunkCopied(ctx); err != nil {
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
