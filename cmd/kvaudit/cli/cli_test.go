package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/internal/testfiles"
)

// run runs kvaudit in-process and returns its exit code and output.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb strings.Builder
	code = Main(args, &Streams{In: strings.NewReader(""), Out: &out, Err: &errb, NoColor: true})
	return code, out.String(), errb.String()
}

// TestInputsNeverWritten: checksum and inspect leave every input byte as it
// was.
func TestInputsNeverWritten(t *testing.T) {
	dir := t.TempDir()
	for _, f := range synth.Formats {
		if _, err := synth.Write(filepath.Join(dir, f), synth.Config{Preset: "swa", TP: 2, PP: 2, Format: f}); err != nil {
			t.Fatal(err)
		}
	}
	before := testfiles.HashTree(t, dir)
	for _, f := range synth.Formats {
		side := filepath.Join(dir, f, "producer")
		for _, args := range [][]string{
			{"checksum", side}, {"checksum", "-o", "json", "--engine", "ref", side},
			{"checksum", "-o", "record", side}, {"inspect", side},
		} {
			if code, _, stderr := run(t, args...); code != ExitOK {
				t.Fatalf("%v: exit %d: %s", args, code, stderr)
			}
		}
	}
	testfiles.AssertUnchanged(t, dir, before)
}

// TestConfigPrecedence: a flag beats KVAUDIT_*, which beats the command's
// section of kvaudit.yaml, which beats a top-level key.
func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Config{Preset: "tiny"}); err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(dir, "producer")
	cfg := filepath.Join(dir, "kvaudit.yaml")
	write := func(s string) {
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	isJSON := func(out string) bool { return strings.HasPrefix(out, "{") }

	write("output: json\n")
	if _, out, _ := run(t, "checksum", "--config", cfg, side); !isJSON(out) {
		t.Errorf("top-level key ignored: %q", out)
	}
	write("output: table\nchecksum:\n  output: json\n")
	if _, out, _ := run(t, "checksum", "--config", cfg, side); !isJSON(out) {
		t.Errorf("command section ignored: %q", out)
	}
	t.Setenv("KVAUDIT_OUTPUT", "table")
	if _, out, _ := run(t, "checksum", "--config", cfg, side); isJSON(out) {
		t.Errorf("environment ignored: %q", out)
	}
	if _, out, _ := run(t, "checksum", "--config", cfg, "-o", "json", side); !isJSON(out) {
		t.Errorf("flag ignored: %q", out)
	}
	if code, _, stderr := run(t, "checksum", "--config", filepath.Join(dir, "none.yaml"), side); code != ExitInvalid || !strings.Contains(stderr, "reading configuration") {
		t.Errorf("a missing --config file: exit %d, %q", code, stderr)
	}
}

// TestHelpDocumentsExitCodes: the root help is written from the exit-code
// table; a command's help lists only the codes it can end with: inject
// and campaign have no --allow-unverified and never exit 2.
func TestHelpDocumentsExitCodes(t *testing.T) {
	_, out, _ := run(t, "--help")
	for _, e := range exitCodes {
		if !strings.Contains(out, e.meaning) {
			t.Errorf("help lacks exit code %d (%s)", e.code, e.meaning)
		}
	}
	for _, c := range []struct {
		cmd       string
		want, not []string
	}{
		{"diff", []string{"\n  2    unverified", "--allow-unverified", "\n  130 "}, nil},
		{"inject", []string{"\n  0    success", "\n  3 ", "\n  130 "}, []string{"allow-unverified", "\n  1 ", "\n  2 "}},
		{"campaign", []string{"\n  1    a fault was missed", "\n  143 "}, []string{"allow-unverified", "\n  2 "}},
		{"checksum", []string{"\n  2    nothing could be checksummed"}, []string{"allow-unverified"}},
	} {
		_, out, _ := run(t, c.cmd, "--help")
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %q", c.cmd, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(out, w) {
				t.Errorf("%s --help has %q", c.cmd, w)
			}
		}
	}
}

// TestEveryCommandDocumented: every command has a one-line summary, a
// paragraph of purpose and examples ("# what it does" then "$ kvaudit ...").
func TestEveryCommandDocumented(t *testing.T) {
	root := NewRootCmd(&Streams{Out: io.Discard, Err: io.Discard})
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c == root || c.Name() == "help" || c.HasParent() && c.Parent().Name() == "completion" || c.Name() == "completion" {
			return
		}
		if c.Short == "" || strings.Contains(c.Short, "\n") || strings.HasSuffix(c.Short, ".") {
			t.Errorf("%s: Short %q is not a one-line summary", c.CommandPath(), c.Short)
		}
		if len(c.Long) < 80 {
			t.Errorf("%s: Long is not a paragraph of purpose: %q", c.CommandPath(), c.Long)
		}
		if !strings.Contains(c.Example, "# ") || !strings.Contains(c.Example, "$ kvaudit "+c.Name()) {
			t.Errorf("%s: Example lacks '# what it does' and '$ kvaudit %s ...' lines", c.CommandPath(), c.Name())
		}
	}
	walk(root)
}

// TestManPages: kvaudit man writes a page per command.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := run(t, "man", dir); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, name := range []string{"kvaudit.1", "kvaudit-checksum.1", "kvaudit-synth.1", "kvaudit-demo.1"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.Contains(string(b), ".TH") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestConfigFileInWorkingDirectory: ./kvaudit.yaml is read; a file called
// plain "kvaudit" (the binary beside it) is not taken for configuration.
func TestConfigFileInWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Config{Preset: "tiny"}); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if err := os.WriteFile("kvaudit", []byte("\x7fELF\x00\x01binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := run(t, "checksum", "producer"); code != ExitOK || strings.HasPrefix(out, "{") {
		t.Fatalf("exit %d, %q, %q", code, out, stderr)
	}
	if err := os.WriteFile("kvaudit.yaml", []byte("output: json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := run(t, "checksum", "producer"); code != ExitOK || !strings.HasPrefix(out, "{") {
		t.Fatalf("./kvaudit.yaml ignored: exit %d, %q, %q", code, out, stderr)
	}
}
