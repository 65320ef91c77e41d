package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/kvaudit/kvaudit/internal/synth"
)

// runTerm runs kvaudit with stdout as a terminal of width columns (0:
// a pipe) and NO_COLOR as given.
func runTerm(t *testing.T, width int, noColor bool, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	s := &Streams{In: strings.NewReader(""), Out: &out, Err: &errb, OutTerminal: width > 0, Width: width, NoColor: noColor}
	code := Main(args, s)
	return code, out.String(), errb.String()
}

// TestColorModes: NO_COLOR on a terminal keeps the aligned table without
// color codes; --color always colors a pipe; --color never on a terminal
// is the aligned table; a pipe is tab-separated; tables on a terminal fit
// its width; a bad --color value is a usage error.
func TestColorModes(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Config{Preset: "swa", TP: 2}); err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(dir, "producer")
	esc := func(s string) bool { return strings.Contains(s, "\x1b[") }
	for _, c := range []struct {
		name    string
		width   int
		noColor bool
		args    []string
		color   bool
		border  string // "" for tab-separated
	}{
		{"NO_COLOR on a terminal", 80, true, nil, false, "┌"},
		{"--color never on a terminal", 80, false, []string{"--color", "never"}, false, "┌"},
		{"--color always on a pipe", 0, false, []string{"--color", "always"}, true, "╭"},
		{"a pipe", 0, false, nil, false, ""},
		{"NO_COLOR on a pipe", 0, true, nil, false, ""},
	} {
		args := append([]string{"inspect", side}, c.args...)
		code, out, stderr := runTerm(t, c.width, c.noColor, args...)
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", c.name, code, stderr)
		}
		if esc(out) != c.color {
			t.Errorf("%s: color codes %v, want %v:\n%s", c.name, esc(out), c.color, out)
		}
		switch {
		case c.border == "" && (strings.Contains(out, "│") || !strings.Contains(out, "\tfull_attention\t")):
			t.Errorf("%s: not tab-separated:\n%s", c.name, out)
		case c.border != "" && !strings.Contains(out, c.border):
			t.Errorf("%s: no %q border:\n%s", c.name, c.border, out)
		}
		if c.width > 0 {
			for _, l := range strings.Split(out, "\n") {
				if w := ansi.StringWidth(l); w > c.width {
					t.Errorf("%s: a line of %d cells on a %d-column terminal: %q", c.name, w, c.width, l)
				}
			}
			if !strings.Contains(out, "left out to fit 80 columns") {
				t.Errorf("%s: nothing left out of inspect's table on 80 columns:\n%s", c.name, out)
			}
		}
	}
	if code, _, stderr := runTerm(t, 0, false, "inspect", side, "--color", "sometimes"); code != ExitInvalid || !strings.Contains(stderr, `--color "sometimes": want one of auto, always, never`) {
		t.Errorf("--color sometimes: exit %d, %q", code, stderr)
	}
}
