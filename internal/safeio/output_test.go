package safeio

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree makes dir/in/a.bin, dir/in/sub/b.bin and dir/log.jsonl.
func tree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"in/a.bin", "in/sub/b.bin", "log.jsonl"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The output rule on files: an input, a file inside an input directory,
// a link or hard link to either, after the inputs' globs are expanded,
// is an *OutputError; an output beside the inputs is not.
func TestCheckOutput(t *testing.T) {
	dir := tree(t)
	t.Chdir(dir)
	l := t.TempDir()
	mk := func(name string, f func(p string) error) string {
		p := filepath.Join(l, name)
		if err := f(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := mk("link", func(p string) error { return os.Symlink(filepath.Join(dir, "in/sub/b.bin"), p) })
	dlink := mk("dlink", func(p string) error { return os.Symlink(filepath.Join(dir, "in/new.xml"), p) })
	hard := mk("hard", func(p string) error { return os.Link(filepath.Join(dir, "in/sub/b.bin"), p) })
	hardLog := mk("hardlog", func(p string) error { return os.Link(filepath.Join(dir, "log.jsonl"), p) })
	inLink := mk("inlink", func(p string) error { return os.Symlink(filepath.Join(dir, "in"), p) })
	for _, c := range []struct {
		out    string
		inputs []string
		bad    bool
	}{
		{"in/a.bin", []string{"in"}, true},
		{"in/new.xml", []string{"in"}, true},
		{"in/sub/new.xml", []string{"i?"}, true},
		{"in/a.bin", []string{"in/*.bin"}, true},
		{"log.jsonl", []string{"*.jsonl"}, true},
		{"log.jsonl", []string{"log.jsonl"}, true},
		{link, []string{"in"}, true},
		{dlink, []string{"in"}, true},
		{hard, []string{"in"}, true},
		{hardLog, []string{"log.jsonl"}, true},
		{filepath.Join(inLink, "x.xml"), []string{"in"}, true},
		{"in/x.xml", []string{inLink}, true},
		{"report.xml", []string{"in", "log.jsonl", "*.jsonl"}, false},
		{"log.xml", []string{"log.jsonl"}, false}, // beside an input file, not inside a directory given
		{"in/a.bin", []string{"log.jsonl", "payload text, not a path", "-"}, false},
		{"in/a.bin", []string{"no-match-*"}, false},
	} {
		err := CheckOutput(c.out, c.inputs)
		var oe *OutputError
		if got := errors.As(err, &oe); got != c.bad {
			t.Errorf("CheckOutput(%q, %q) = %v, want refused %v", c.out, c.inputs, err, c.bad)
		}
	}
	if err := CheckOutput("in", nil); err == nil {
		t.Error("a directory as an output file is not refused")
	}
}

// The output rule on directories: an input, inside one, the directory
// holding one, or (replacing) holding one anywhere.
func TestCheckOutputDir(t *testing.T) {
	dir := tree(t)
	t.Chdir(dir)
	other := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		out       string
		inputs    []string
		replacing bool
		bad       bool
	}{
		{"in", []string{"in"}, false, true},
		{"in", []string{"i*"}, false, true},
		{"in/sub/x", []string{"in"}, false, true},
		{"in", []string{"in/sub"}, false, true},         // holds it
		{".", []string{"log.jsonl"}, false, true},       // holds it
		{".", []string{"in/sub/b.bin"}, true, true},     // replacing: anywhere inside
		{"in/sub/x", []string{"in/a.bin"}, false, true}, // inside the directory of an input file
		{other, []string{"in", "log.jsonl"}, false, false},
		{".", []string{"in/sub/b.bin"}, false, false},
	} {
		err := CheckOutputDir(c.out, c.inputs, c.replacing)
		var oe *OutputError
		if got := errors.As(err, &oe); got != c.bad {
			t.Errorf("CheckOutputDir(%q, %q, %v) = %v, want refused %v", c.out, c.inputs, c.replacing, err, c.bad)
		}
	}
}

// ExpandInputs expands a path as layout.FindDumps does: only one that does
// not exist and holds a metacharacter, in name order.
func TestExpandInputs(t *testing.T) {
	dir := tree(t)
	t.Chdir(dir)
	if err := os.WriteFile("lit[1]", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := ExpandInputs([]string{"in/*/b.bin", "*.jsonl", "lit[1]", "none-*", "plain", "-"})
	want := []string{"in/sub/b.bin", "log.jsonl", "lit[1]", "plain"}
	if !slices.Equal(got, want) {
		t.Errorf("ExpandInputs = %q, want %q", got, want)
	}
}

// A stream is written as it is: a pipe's descriptor as /proc/self/fd/N and
// through a link (as /dev/stdout is one), a link to /dev/null; the link
// stays a link, nothing is created beside it.
func TestWriteStream(t *testing.T) {
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fd := fmt.Sprintf("/proc/self/fd/%d", w.Fd())
	if _, err := os.Stat(fd); err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	stdout := filepath.Join(dir, "stdout")
	null := filepath.Join(dir, "null")
	for _, l := range [][2]string{{fd, stdout}, {"/dev/null", null}} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan string)
	go func() { b, _ := io.ReadAll(r); got <- string(b) }()
	for _, p := range []string{fd, stdout, null} {
		if !IsStream(p) {
			t.Errorf("%s is not a stream", p)
		}
		if err := CheckOutput(p, []string{dir}); p != null && err != nil {
			t.Errorf("CheckOutput(%s): %v", p, err)
		}
		if err := WriteOutput(p, func(w io.Writer) error { _, err := io.WriteString(w, "<"+filepath.Base(p)+">"); return err }); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if s := <-got; s != fmt.Sprintf("<%d><stdout>", w.Fd()) && !strings.HasSuffix(s, "><stdout>") {
		t.Errorf("the pipe read %q", s)
	}
	for _, p := range []string{stdout, null} {
		if st, err := os.Lstat(p); err != nil || st.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s was replaced: %v", p, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d entries in %s, want the 2 links", len(entries), dir)
	}
	if IsStream(filepath.Join(dir, "regular")) || IsStream(dir) {
		t.Error("a missing file or a directory is a stream")
	}
	// A file kvaudit names itself (Write) follows no link, to a device or
	// not: without force refused, with force the link itself replaced.
	if err := WriteFile(null, []byte("x"), false); err == nil {
		t.Error("Write followed a link planted at its target")
	}
	if err := WriteFile(null, []byte("x"), true); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(null); err != nil || !st.Mode().IsRegular() {
		t.Errorf("Write with force did not replace the link itself: %v", err)
	}
}
