package cli

import (
	"errors"
	"fmt"
	"github.com/kvaudit/kvaudit/parse"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/safeio"
)

// A panic in a command is an internal error, exit 4, not a verdict's
// 1 or 2 nor a crash; temporaries in progress are removed.
func TestPanicIsInternalError(t *testing.T) {
	tmpParent := t.TempDir()
	var tmp string
	// The command tree with two commands added.
	run := func(t *testing.T, args ...string) (code int, stdout, stderr string) {
		var out, errb strings.Builder
		s := &Streams{In: strings.NewReader(""), Out: &out, Err: &errb, NoColor: true}
		root := NewRootCmd(s)
		root.AddCommand(&cobra.Command{Use: "boom", RunE: func(*cobra.Command, []string) error {
			var err error
			if tmp, err = safeio.TempDir(tmpParent, "kvaudit-boom-"); err != nil {
				return err
			}
			panic("boom: a bug in a command")
		}}, &cobra.Command{Use: "oops", RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("inject: %w", checksum.Internalf("an edit of %q is past its end", "x"))
		}})
		code = execute(root, args, s)
		return code, out.String(), errb.String()
	}
	code, _, stderr := run(t, "boom")
	if code != ExitInternal {
		t.Errorf("a panic exits %d, want %d", code, ExitInternal)
	}
	if !strings.Contains(stderr, "kvaudit: internal error: boom: a bug in a command") || !strings.Contains(stderr, "please report it") {
		t.Errorf("stderr:\n%s", stderr)
	}
	if _, err := os.Stat(tmp); tmp == "" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory %q left behind (%v)", tmp, err)
	}
	if code, _, _ := run(t, "oops"); code != ExitInternal {
		t.Errorf("an internal error exits %d, want %d", code, ExitInternal)
	}
	entries, _ := os.ReadDir(tmpParent)
	for _, e := range entries {
		t.Errorf("left behind: %s", filepath.Join(tmpParent, e.Name()))
	}
}

// TestExitCodeInternalByType: an internal error is known by its type
// (checksum.InternalError, however deeply wrapped), not by its text: a
// recovered panic and a failed check exit 4; bad input whose message
// mentions "internal error" (a file of that name) exits 3.
func TestExitCodeInternalByType(t *testing.T) {
	var panicked error
	func() {
		defer func() { panicked = checksum.Recovered("checksum worker", recover()) }()
		var s []int
		_ = s[len(os.Args)+2]
	}()
	for _, c := range []struct {
		err  error
		want int
	}{
		{checksum.Internalf("an edit names %q", "x"), ExitInternal},
		{fmt.Errorf("campaign: pair %q: %w", "p", fmt.Errorf("consumer: %w", checksum.Internalf("a check failed"))), ExitInternal},
		{fmt.Errorf("consumer: %w", panicked), ExitInternal},
		{&UsageError{fmt.Errorf("%w", checksum.Internalf("x"))}, ExitInternal},
		{fmt.Errorf("open %q: no such file or directory", "internal error: x.safetensors"), ExitInvalid},
		{fmt.Errorf("%q: not a dump: internal error", "out/internal error"), ExitInvalid},
		{errors.New("internal error: spelled out, but not one"), ExitInvalid},
		{&ResultError{Code: ExitUnverified, Msg: "nothing checksummed: group 0 skipped: internal error"}, ExitUnverified},
		{fmt.Errorf("consumer: %w", &parse.Error{Format: parse.Manifest, File: "m.json", Field: "groups", Msg: "internal error"}), ExitInvalid},
		{&parse.Error{Format: parse.Dump, File: "d", Err: checksum.Internalf("a check failed")}, ExitInternal},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%q) = %d, want %d", c.err, got, c.want)
		}
	}
	if !strings.HasPrefix(panicked.Error(), "internal error: checksum worker: runtime error: index out of range") || !strings.Contains(panicked.Error(), "TestExitCodeInternalByType") {
		t.Errorf("a recovered panic reads %q, want the message and its stack", panicked)
	}
	if re := runtime.Error(nil); !errors.As(panicked, &re) {
		t.Errorf("a recovered runtime error does not unwrap to it: %v", panicked)
	}
}

// The help text lists every exit code of the table, the internal error
// and the signals included.
func TestExitCodesInHelp(t *testing.T) {
	_, out, _ := run(t, "--help")
	for _, want := range []string{"0    verified", "1    mismatch", "2    unverified", "3    invalid input", "4    internal error", "130  interrupted by SIGINT", "143  terminated by SIGTERM"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
}

// TestErrorLinesEscaped: whatever a command's error or verdict line
// holds (names from an untrusted dump), the stderr line and the -q line
// carry no control character: a CR and an erase-line cannot make the
// terminal show another verdict.
func TestErrorLinesEscaped(t *testing.T) {
	run := func(args ...string) (code int, stdout, stderr string) {
		var out, errb strings.Builder
		s := &Streams{In: strings.NewReader(""), Out: &out, Err: &errb, NoColor: true}
		root := NewRootCmd(s)
		root.AddCommand(&cobra.Command{Use: "bad", RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("layer %s of %q: broken", "evil\r\x1b[2Kverified", "q\x1b")
		}}, &cobra.Command{Use: "verdict", RunE: func(*cobra.Command, []string) error {
			return &ResultError{Code: ExitMismatch, Msg: "mismatch: request r\u202e\x1b]0;x\x07"}
		}})
		return execute(root, args, s), out.String(), errb.String()
	}
	code, _, stderr := run("bad")
	if code != ExitInvalid || stderr != "kvaudit: layer evil\\r\\x1b[2Kverified of \"q\\x1b\": broken\n" {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	for _, args := range [][]string{{"verdict"}, {"verdict", "-q"}} {
		code, stdout, stderr := run(args...)
		line := stderr + stdout
		if code != ExitMismatch || !strings.Contains(line, `mismatch: request r\u202e\x1b]0;x\x07`) || strings.ContainsAny(line, "\x1b\x07\u202e") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}
