package main

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/testlong"
)

// installCommands returns the shell lines of the ```sh blocks of
// README.md's Install section, comments cut.
func installCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Install\n")
	if !ok {
		t.Fatal(`README.md has no "## Install" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var lines []string
	in := false
	for _, l := range strings.Split(section, "\n") {
		switch {
		case l == "```sh":
			in = true
		case strings.HasPrefix(l, "```"):
			in = false
		case in:
			l, _, _ = strings.Cut(l, "#")
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
	}
	return lines
}

// staticELF returns nil if path is an ELF executable that needs no
// dynamic loader and no shared library, else what it needs.
func staticELF(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("it has an interpreter (a dynamic loader)")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil {
		return err
	} else if len(libs) > 0 {
		return fmt.Errorf("it needs %q", libs)
	}
	return nil
}

// TestReadmeInstall runs the Install section's commands for a clone, as
// written, in the repository's root (with GOBIN and -o pointed at a
// temporary directory): `go install ./cmd/kvaudit` installs a kvaudit that
// runs, and the `CGO_ENABLED=0 go build` line makes the static binary the
// section promises: built with CGO_ENABLED=0 (`go version -m`), and, on
// Linux, an ELF file with no interpreter and no shared library (checked by
// the same test that finds /bin/sh dynamic).
func TestReadmeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kvaudit")
	}
	testlong.Skip(t, "go install and go build of kvaudit")
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var install, static []string
	for _, l := range installCommands(t) {
		switch {
		case strings.HasPrefix(l, "go install ./"):
			install = strings.Fields(l)
		case strings.HasPrefix(l, "CGO_ENABLED=0 go build "):
			static = strings.Fields(l)
		}
	}
	if install == nil || static == nil {
		t.Fatalf("README.md's Install section has no `go install ./cmd/kvaudit` or no `CGO_ENABLED=0 go build` line for a clone: %q", installCommands(t))
	}
	dir := t.TempDir()
	run := func(env []string, args []string) {
		t.Helper()
		cmd := exec.Command(goTool, args[1:]...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	version := func(bin string) {
		t.Helper()
		out, err := exec.Command(bin, "version").Output()
		if err != nil || !strings.HasPrefix(string(out), "kvaudit ") {
			t.Errorf("%s version: %v, %q", bin, err, out)
		}
	}

	run([]string{"GOBIN=" + filepath.Join(dir, "bin")}, install)
	version(filepath.Join(dir, "bin", "kvaudit"))

	// CGO_ENABLED=0 go build ... -o FILE ...: the environment as written,
	// FILE moved into dir.
	var env []string
	for len(static) > 0 && strings.Contains(static[0], "=") {
		env, static = append(env, static[0]), static[1:]
	}
	bin := ""
	for i, w := range static {
		if w == "-o" && i+1 < len(static) {
			bin = filepath.Join(dir, filepath.Base(static[i+1]))
			static[i+1] = bin
		}
	}
	if bin == "" {
		t.Fatalf("%q: no -o FILE", static)
	}
	run(env, static)
	version(bin)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	cgo := ""
	for _, s := range info.Settings {
		if s.Key == "CGO_ENABLED" {
			cgo = s.Value
		}
	}
	if cgo != "0" {
		t.Errorf("%s: built with CGO_ENABLED=%q, want 0", bin, cgo)
	}
	if runtime.GOOS != "linux" {
		return
	}
	if err := staticELF(bin); err != nil {
		t.Errorf("%s is not static: %v", bin, err)
	}
	if err := staticELF("/bin/sh"); err == nil {
		t.Error("staticELF finds /bin/sh static: the check proves nothing")
	}
}
