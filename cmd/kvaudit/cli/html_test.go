package cli

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestShellQuote: an argument comes back from a POSIX shell as it was
// given, quoted only where it has to be.
func TestShellQuote(t *testing.T) {
	args := []string{"x3/nixl", "--consumer", "a b", "it's", "", "$HOME", "*.json", "--html=r.html", "chatcmpl-0a1b", "é", "a\nb", `back\slash`, "~user"}
	var quoted []string
	for _, a := range args {
		quoted = append(quoted, shellQuote(a))
	}
	for i, want := range map[int]string{0: "x3/nixl", 1: "--consumer", 2: "'a b'", 3: `'it'\''s'`, 4: "''", 7: "--html=r.html", 8: "chatcmpl-0a1b"} {
		if quoted[i] != want {
			t.Errorf("shellQuote(%q) = %s, want %s", args[i], quoted[i], want)
		}
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	out, err := exec.Command(sh, "-c", `for a in `+strings.Join(quoted, " ")+`; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"); strings.Join(got, "|") != strings.Join(args, "|") {
		t.Errorf("sh read back %q, want %q", got, args)
	}
}

// TestReportCommandLine: a report's command line is what Main was given,
// quoted for a shell, not cobra's flags (--consumer=[x3]); run without
// Main, a command's line is written from its flags (in their names'
// order), a list flag once per value.
func TestReportCommandLine(t *testing.T) {
	argv := []string{"transfers", "--consumer", "x3", "--producer", "nx/producer", "--producer", "nx/p 2", "--html", "out.html", "x3/nixl"}
	for _, c := range []struct {
		name string
		argv []string
		want string
	}{
		{"Main", argv, "kvaudit transfers --consumer x3 --producer nx/producer --producer 'nx/p 2' --html out.html x3/nixl"},
		{"flags", nil, "kvaudit transfers --consumer x3 --html out.html --producer nx/producer --producer 'nx/p 2' x3/nixl"},
	} {
		var got string
		s := &Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}, argv: c.argv}
		root := &cobra.Command{Use: "kvaudit"}
		root.AddCommand(NewCmdTransfers(s, func(_ context.Context, o *TransfersOptions) error { got = o.command; return nil }))
		root.SetArgs(argv)
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	s := &Streams{argv: []string{"diff", "--html=r.html", "p", "c"}}
	if got := commandLine(s, &cobra.Command{Use: "kvaudit"}, nil); got != "kvaudit diff --html=r.html p c" {
		t.Errorf("as typed: %q", got)
	}
}
