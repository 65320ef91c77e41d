package safeio

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// The output rule. Every file kvaudit writes (--out, -o record, --junit,
// --html, fault.json, man pages, NIXL logs, the demo's files) is checked
// against the command's inputs, after their globs are expanded, before any
// work (CheckOutput, CheckOutputDir), and written by Write:
//
//   - never an input file, never inside an input directory, never through
//     a link to either (links are resolved on both sides, hard links
//     compared by inode);
//   - a character device, a FIFO or a socket, or a descriptor of this
//     process (/proc/self/fd/N, /dev/fd/N, /dev/stdout, /dev/stderr), is
//     written to as it is: opened, never created, replaced or renamed over;
//   - anything else is a regular file, written under a temporary name and
//     renamed into place when complete.
//
// The stream rule is for an output the user names (WriteOutput); a file
// kvaudit names itself inside an output directory is written by Write,
// which follows no link planted there, to a device or not.

// OutputError is an output refused by the output rule: it is an input, or
// lies among the inputs.
type OutputError struct {
	Path  string // the output as given
	Input string // the input it collides with, as given (after glob expansion)
	Why   string // "is", "is inside", "holds", "would replace"
}

func (e *OutputError) Error() string {
	switch e.Why {
	case "is":
		return fmt.Sprintf("%q is the input %q: kvaudit never writes over an input (write outputs elsewhere)", e.Path, e.Input)
	case "holds":
		return fmt.Sprintf("%q holds the input %q: write outputs elsewhere", e.Path, e.Input)
	case "would replace":
		return fmt.Sprintf("the input %q is inside %q, which would be replaced: write outputs elsewhere", e.Input, e.Path)
	}
	return fmt.Sprintf("%q is inside the input %q: kvaudit never writes among its inputs (write outputs elsewhere)", e.Path, e.Input)
}

// ExpandInputs returns the paths a command reads, given as the user gave
// them: a path that does not exist and holds *, ? or [ is the paths the
// pattern matches (as layout.FindDumps and transfer.FindLogs read it; a
// pattern that matches nothing is left out), any other path is kept as is.
func ExpandInputs(inputs []string) []string {
	var out []string
	for _, in := range inputs {
		if in == "" || in == "-" {
			continue
		}
		if _, err := os.Lstat(in); errors.Is(err, fs.ErrNotExist) && strings.ContainsAny(in, "*?[") {
			matches, _ := filepath.Glob(in)
			out = append(out, matches...)
			continue
		}
		out = append(out, in)
	}
	return out
}

// input is an input path resolved: its real path and what is there.
type input struct {
	given, real string
	info        fs.FileInfo // nil when nothing is there (payload text)
}

func resolveInputs(inputs []string) []input {
	var out []input
	for _, in := range ExpandInputs(inputs) {
		st, err := os.Stat(in)
		if err != nil {
			continue // not a path: payload text, or gone
		}
		real, err := RealPath(in)
		if err != nil {
			continue
		}
		out = append(out, input{given: in, real: real, info: st})
	}
	return out
}

func inside(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, string(filepath.Separator))+string(filepath.Separator))
}

// CheckOutput applies the output rule to the file path before any work:
// it is refused (an *OutputError) when it is one of inputs (globs
// expanded, links resolved, hard links compared), or lies inside an input
// directory. A stream (a character device, FIFO, socket or a descriptor
// of this process) is accepted unless it is an input; a directory is
// refused. Inputs that are not paths (payload text) are passed over.
func CheckOutput(path string, inputs []string) error {
	ins := resolveInputs(inputs)
	if fd, ok := descriptor(path); ok {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return fmt.Errorf("%q: descriptor %d of kvaudit is not open: %w", path, fd, err)
		}
		for _, in := range ins {
			if s, ok := in.info.Sys().(*syscall.Stat_t); ok && s.Dev == st.Dev && s.Ino == st.Ino {
				return &OutputError{Path: path, Input: in.given, Why: "is"}
			}
		}
		return nil
	}
	st, stErr := os.Stat(path)
	err := stErr
	if err == nil && st.IsDir() {
		return fmt.Errorf("%q is a directory: name a file", path)
	}
	if err == nil && st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0 {
		return fmt.Errorf("%q is a block device: kvaudit writes reports to files, character devices, FIFOs or its own descriptors", path)
	}
	if err == nil {
		for _, in := range ins {
			if os.SameFile(st, in.info) {
				return &OutputError{Path: path, Input: in.given, Why: "is"}
			}
		}
		// A hard link of a file inside an input directory is that file.
		if s, ok := st.Sys().(*syscall.Stat_t); ok && s.Nlink > 1 && st.Mode().IsRegular() {
			for _, in := range ins {
				if in.info.IsDir() && holds(in.real, st) {
					return &OutputError{Path: path, Input: in.given, Why: "is"}
				}
			}
		}
	}
	o, err := RealPath(path)
	if err != nil {
		return err
	}
	for _, in := range ins {
		switch {
		case o == in.real:
			return &OutputError{Path: path, Input: in.given, Why: "is"}
		case in.info.IsDir() && inside(o, in.real):
			return &OutputError{Path: path, Input: in.given, Why: "is inside"}
		}
	}
	if stErr == nil && isStream(st) {
		return nil
	}
	// The link itself, when path is one, is what a regular output replaces:
	// a link inside an input directory is refused above (its real path),
	// and so is one whose own directory is inside an input.
	if l, err := RealPath(filepath.Dir(path)); err == nil {
		for _, in := range ins {
			if in.info.IsDir() && inside(filepath.Join(l, filepath.Base(path)), in.real) {
				return &OutputError{Path: path, Input: in.given, Why: "is inside"}
			}
		}
	}
	return nil
}

// holds says whether the directory dir holds the file st (by inode),
// at any depth, links not followed.
func holds(dir string, st fs.FileInfo) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil && os.SameFile(info, st) {
				found = true
				return filepath.SkipAll
			}
		}
		return nil
	})
	return found
}

// CheckOutputDir applies the output rule to a directory kvaudit writes
// files into (synth, man, checksum -o record --out, inject --out, demo
// --out) before any work: refused when it is an input, lies inside an
// input directory, or is the directory holding an input file or
// directory (--out s for the side s/producer, where the outputs would
// read as part of a side); with replacing (a directory replaced whole,
// inject --force), an input anywhere inside it is refused too.
func CheckOutputDir(dir string, inputs []string, replacing bool) error {
	o, err := RealPath(dir)
	if err != nil {
		return err
	}
	for _, in := range resolveInputs(inputs) {
		d := in.real
		if !in.info.IsDir() {
			d = filepath.Dir(in.real)
		}
		switch {
		case inside(o, d):
			return &OutputError{Path: dir, Input: in.given, Why: "is inside"}
		case replacing && inside(in.real, o):
			return &OutputError{Path: dir, Input: in.given, Why: "would replace"}
		case o == filepath.Dir(in.real):
			return &OutputError{Path: dir, Input: in.given, Why: "holds"}
		}
	}
	return nil
}

// RealPath is path made absolute with its symlinks resolved, as far as it
// exists (an output may not exist yet); a dangling link is followed to
// where it points.
func RealPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	for range 40 {
		st, err := os.Lstat(abs)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			break
		}
		if _, err := os.Stat(abs); err == nil {
			break // EvalSymlinks resolves it below
		}
		target, err := os.Readlink(abs)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(abs), target)
		}
		abs = filepath.Clean(target)
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest), nil
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

func isStream(st fs.FileInfo) bool {
	m := st.Mode()
	return m&fs.ModeCharDevice != 0 || m&fs.ModeNamedPipe != 0 || m&fs.ModeSocket != 0
}

var fdPath = regexp.MustCompile(`^/proc/(self|thread-self|[0-9]+)(/task/[0-9]+)?/fd/([0-9]+)$`)

// descriptor says whether path names a file descriptor of this process
// (/proc/self/fd/N, /dev/fd/N, /dev/stdout, or a link to one), and which.
// Links are followed one at a time: the last one, to "pipe:[...]" or a
// deleted file, cannot be resolved as a path.
func descriptor(path string) (int, bool) {
	p, err := filepath.Abs(path)
	if err != nil {
		return 0, false
	}
	for range 40 {
		dir, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			return 0, false
		}
		p = filepath.Join(dir, filepath.Base(p))
		if m := fdPath.FindStringSubmatch(p); m != nil {
			if m[1] != "self" && m[1] != "thread-self" && m[1] != strconv.Itoa(os.Getpid()) {
				return 0, false
			}
			fd, err := strconv.Atoi(m[3])
			return fd, err == nil
		}
		st, err := os.Lstat(p)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			return 0, false
		}
		target, err := os.Readlink(p)
		if err != nil {
			return 0, false
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	return 0, false
}

// IsStream says whether path is written to as it is (Write): a descriptor
// of this process, or (links followed) a character device, FIFO or socket.
func IsStream(path string) bool {
	if _, ok := descriptor(path); ok {
		return true
	}
	st, err := os.Stat(path)
	return err == nil && isStream(st)
}

// WriteOutput writes an output file the user named (--junit FILE, --html
// FILE), checked before any work with CheckOutput: a stream (IsStream: a
// character device, FIFO, socket or a descriptor of this process, links
// followed) is written to as it is, never created, replaced or renamed
// over; anything else is written as Write does with force, replacing an
// earlier report (a link at path is replaced itself, never followed).
// Files kvaudit names itself inside an output directory (ranks, records,
// fault.json, man pages, logs) are written with Write, which follows
// nothing: a link planted there to a device is not written through.
func WriteOutput(path string, fill func(w io.Writer) error) error {
	if !IsStream(path) {
		return Write(path, true, fill)
	}
	return writeStream(path, func(f io.Writer) error {
		w := bufio.NewWriterSize(f, 1<<20)
		if err := fill(w); err != nil {
			return err
		}
		return w.Flush()
	})
}

// writeStream writes to a stream as it is: a descriptor of this process
// through a duplicate of it (at its offset, as the shell's redirection
// left it), anything else opened for writing, never created.
func writeStream(path string, fill func(w io.Writer) error) error {
	var f *os.File
	if fd, ok := descriptor(path); ok {
		d, err := syscall.Dup(fd)
		if err != nil {
			return fmt.Errorf("writing %q: %w", path, err)
		}
		f = os.NewFile(uintptr(d), path)
	} else {
		var err error
		if f, err = os.OpenFile(path, os.O_WRONLY, 0); err != nil {
			return fmt.Errorf("writing %q: %w", path, err)
		}
		if st, err := f.Stat(); err != nil || !isStream(st) {
			f.Close()
			return fmt.Errorf("writing %q: no longer a device, FIFO or socket", path)
		}
	}
	err := fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	return nil
}
