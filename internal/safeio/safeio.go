// Package safeio is how kvaudit writes files: every output is written
// under a temporary name in its target directory, synced, and renamed into
// place only when complete, so an interrupted or failed write never leaves
// a complete-looking file. An existing file (or a symlink, or anything
// else) at the target is never replaced unless the caller forces it, and
// even then the rename replaces the link itself, never what it points to.
//
// Temporaries in progress, files and directories, are registered, so a
// signal handler can remove them all with Cleanup.
package safeio

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ExistsError is a target that exists and may not be replaced.
type ExistsError struct{ Path string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("%q exists: kvaudit does not overwrite files (--force replaces it)", e.Path)
}

// File is an output being written: a temporary file beside the target.
// Commit renames it into place; Abort (safe after Commit) removes it.
type File struct {
	*os.File
	target string
	force  bool
	done   bool
}

// Create starts writing the file path. Unless force, path must not exist
// (checked now and again, atomically, at Commit); a directory at path is
// refused even with force.
func Create(path string, force bool) (*File, error) {
	if err := checkTarget(path, force); err != nil {
		return nil, err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := createTemp(dir, "."+base+".kvaudit-tmp-")
	if err != nil {
		return nil, err
	}
	register(f.Name())
	return &File{File: f, target: path, force: force}, nil
}

// createTemp creates a new file dir/prefix<random> with mode 0644 less
// the umask (os.CreateTemp's files are 0600: too narrow for outputs).
func createTemp(dir, prefix string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("creating a temporary file in %q: too many collisions", dir)
}

func checkTarget(path string, force bool) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%q is a directory: cannot write a file there", path)
	}
	if !force {
		return &ExistsError{path}
	}
	return nil
}

// Commit syncs the file and renames it into place, then syncs the
// directory. Without force it fails, leaving nothing, if the target
// appeared in the meantime.
func (f *File) Commit() error {
	if f.done {
		return errors.New("safeio: commit of a finished file")
	}
	f.done = true
	tmp := f.Name()
	defer unregister(tmp)
	scratch := InScratch(f.target)
	var err error
	if !scratch {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %q: %w", f.target, err)
	}
	if err := place(tmp, f.target, f.force); err != nil {
		os.Remove(tmp)
		return err
	}
	if scratch {
		return nil
	}
	return syncDir(filepath.Dir(f.target))
}

// Abort removes the temporary file; after Commit it does nothing.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.Close()
	os.Remove(f.Name())
	unregister(f.Name())
}

// place renames tmp to target: over whatever is there with force (the
// link itself, if a symlink), else only if nothing is.
func place(tmp, target string, force bool) error {
	if force {
		if err := checkTarget(target, true); err != nil {
			return err
		}
		return os.Rename(tmp, target)
	}
	// A hard link fails if anything (a symlink included, dangling or not)
	// is at target, atomically; the temporary name is then removed.
	err := os.Link(tmp, target)
	if err == nil {
		return os.Remove(tmp)
	}
	if errors.Is(err, fs.ErrExist) {
		return &ExistsError{target}
	}
	// A file system without hard links: check, then rename.
	if err := checkTarget(target, false); err != nil {
		return err
	}
	return os.Rename(tmp, target)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	// Some file systems cannot sync a directory; the rename is done.
	_ = d.Sync()
	return nil
}

// Write writes the file path through fill (buffered) as Create and
// Commit do; on any error nothing is left at path. Nothing at path is
// followed, a stream included: WriteOutput is for a file the user names.
func Write(path string, force bool, fill func(w io.Writer) error) error {
	f, err := Create(path, force)
	if err != nil {
		return err
	}
	defer f.Abort()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := fill(w); err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	return f.Commit()
}

// WriteFile writes data to the file path as Write does.
func WriteFile(path string, data []byte, force bool) error {
	return Write(path, force, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// TempDir creates a scratch directory in parent (the system's when empty)
// and registers it for Cleanup. Remove it with RemoveTemp. Files written
// inside it are not synced: it is removed, or only read, afterwards.
func TempDir(parent, pattern string) (string, error) {
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", err
	}
	mu.Lock()
	pending[dir] = true
	mu.Unlock()
	return dir, nil
}

// StageDir creates a temporary directory in parent that becomes an output
// (PlaceDir): files written inside it are synced. It is registered for
// Cleanup; remove it with RemoveTemp.
func StageDir(parent, pattern string) (string, error) {
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", err
	}
	register(dir)
	return dir, nil
}

// InScratch says whether path lies inside a scratch directory (TempDir):
// a file written there need not be synced.
func InScratch(path string) bool {
	mu.Lock()
	defer mu.Unlock()
	abs := ""
	for dir, scratch := range pending {
		if !scratch {
			continue
		}
		if abs == "" {
			var err error
			if abs, err = filepath.Abs(path); err != nil {
				return false
			}
		}
		d, err := filepath.Abs(dir)
		if err == nil && strings.HasPrefix(abs, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// RemoveTemp removes a temporary directory or file and forgets it.
func RemoveTemp(path string) error {
	defer unregister(path)
	return os.RemoveAll(path)
}

// Forget stops tracking path (a temporary directory renamed into place,
// an output Track registered).
func Forget(path string) { unregister(path) }

// Track registers path, a file or directory the command is about to
// create, for Cleanup: an interrupted command removes it and all it
// holds. Forget it once the command is done with it. Never track a path
// that exists: it is not the command's to remove.
func Track(path string) { register(path) }

var (
	mu sync.Mutex
	// pending holds the temporaries in progress, true for a scratch
	// directory (TempDir).
	pending = map[string]bool{}
)

func register(path string) {
	mu.Lock()
	pending[path] = false
	mu.Unlock()
}

func unregister(path string) {
	mu.Lock()
	delete(pending, path)
	mu.Unlock()
}

// Pending returns the temporaries in progress.
func Pending() []string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	for p := range pending {
		out = append(out, p)
	}
	return out
}

// Cleanup removes every temporary in progress (an interrupted command).
func Cleanup() {
	mu.Lock()
	paths := make([]string, 0, len(pending))
	for p := range pending {
		paths = append(paths, p)
	}
	pending = map[string]bool{}
	mu.Unlock()
	for _, p := range paths {
		os.RemoveAll(p)
	}
}

// LinkError is an output directory that is a symbolic link: kvaudit
// never writes through links, files or directories.
type LinkError struct{ Path string }

func (e *LinkError) Error() string {
	return fmt.Sprintf("output %q is a symlink: kvaudit does not write through links (give the directory it points to)", e.Path)
}

// notLink refuses a symbolic link at path; nothing there is fine.
func notLink(path string) error {
	st, err := os.Lstat(path)
	if err == nil && st.Mode()&fs.ModeSymlink != 0 {
		return &LinkError{Path: path}
	}
	return nil
}

// MkdirOut makes sure the output directory dir exists, creating it and
// its parents as needed, and refuses a symbolic link at dir (before and
// after creating it): the one rule of every output directory kvaudit
// writes files into (synth, man, checksum -o record --out; inject's --out
// too, which it stages). A link among dir's parents is the user's own
// path and is followed.
func MkdirOut(dir string) error {
	if err := notLink(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return notLink(dir)
}

// CheckOutDir says, before any work, whether dir can be an output
// directory (MkdirOut): not a symlink, not a file; nothing there is fine.
func CheckOutDir(dir string) error {
	if err := notLink(dir); err != nil {
		return err
	}
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return fmt.Errorf("output %q exists and is not a directory", dir)
	}
	return nil
}

// CheckOutFile says, before any work, whether a file can be written at
// path (Create, Write): a stream (IsStream) can; else its directory exists and takes a new file (a
// temporary one is created and removed), and path is not a directory.
func CheckOutFile(path string) error {
	if IsStream(path) {
		return nil
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%q: the directory %q does not exist", path, dir)
	case err != nil:
		return fmt.Errorf("%q: %w", path, err)
	case !st.IsDir():
		return fmt.Errorf("%q: %q is not a directory", path, dir)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%q is a directory: cannot write a file there", path)
	}
	f, err := createTemp(dir, "."+filepath.Base(path)+".kvaudit-check-")
	if err != nil {
		return fmt.Errorf("%q: cannot write in %q: %w", path, dir, errors.Unwrap(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// PlaceDir renames the finished directory tmp (beside target) to target.
// Nothing, or an empty directory, at target is replaced. Anything else is
// refused unless force, and with force only a directory that replaceable
// accepts (nil error) is replaced: it is first moved aside, then removed
// once tmp is in place. A symlink at target is refused.
func PlaceDir(tmp, target string, force bool, replaceable func(dir string) error) error {
	st, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case st.Mode()&fs.ModeSymlink != 0:
		return &LinkError{Path: target}
	case !st.IsDir():
		return fmt.Errorf("%q exists and is not a directory", target)
	default:
		entries, err := os.ReadDir(target)
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			break
		}
		if !force {
			return fmt.Errorf("%q exists and is not empty: kvaudit does not overwrite it (--force replaces it)", target)
		}
		if err := replaceable(target); err != nil {
			return err
		}
		old, err := os.MkdirTemp(filepath.Dir(target), "."+filepath.Base(target)+".kvaudit-old-*")
		if err != nil {
			return err
		}
		register(old)
		defer RemoveTemp(old)
		aside := filepath.Join(old, "d")
		if err := os.Rename(target, aside); err != nil {
			return err
		}
		if err := os.Rename(tmp, target); err != nil {
			os.Rename(aside, target)
			return err
		}
		unregister(tmp)
		return syncDir(filepath.Dir(target))
	}
	// Nothing or an empty directory at target: rename(2) replaces an empty
	// directory atomically (and fails if it is no longer empty); os.Rename
	// refuses any directory at target, so the system call is made itself.
	if err := syscall.Rename(tmp, target); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("%q exists and is not empty: kvaudit does not overwrite it (--force replaces it)", target)
		}
		return &os.LinkError{Op: "rename", Old: tmp, New: target, Err: err}
	}
	unregister(tmp)
	return syncDir(filepath.Dir(target))
}
