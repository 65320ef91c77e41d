package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

// TestHelpFitsTheTerminal: every command's --help fits 80 columns into a
// pipe and on an 80-column terminal, and a 200-column terminal's width on
// one (flag descriptions of up to 279 characters wrapped mid-word), with
// every word of the help kept, in order; inject's kinds, of up to 22
// characters, never run into their descriptions.
func TestHelpFitsTheTerminal(t *testing.T) {
	for _, w := range []struct {
		width    int
		terminal bool
	}{{80, false}, {80, true}, {200, true}} {
		for _, c := range NewRootCmd(&Streams{}).Commands() {
			if c.Hidden || c.Name() == "completion" {
				continue
			}
			var out, errb strings.Builder
			s := &Streams{In: strings.NewReader(""), Out: &out, Err: &errb, NoColor: true, OutTerminal: w.terminal, Width: w.width}
			if code := Main([]string{c.Name(), "--help"}, s); code != 0 {
				t.Fatalf("%s --help: exit %d\n%s", c.Name(), code, errb.String())
			}
			longest := 0
			for l := range strings.SplitSeq(out.String(), "\n") {
				if n := ansi.StringWidth(l); n > w.width {
					t.Errorf("%s --help at %d columns: a line of %d: %q", c.Name(), w.width, n, l)
				}
				longest = max(longest, ansi.StringWidth(l))
			}
			if w.width == 200 && longest <= 80 {
				t.Errorf("%s --help on a 200-column terminal is wrapped at %d", c.Name(), longest)
			}
			// The words, as cobra writes them (on a terminal too wide
			// to wrap anything).
			var raw strings.Builder
			Main([]string{c.Name(), "--help"}, &Streams{Out: &raw, Err: &raw, NoColor: true, OutTerminal: true, Width: 1 << 20})
			words := func(s string) []string {
				var ws []string
				for l := range strings.SplitSeq(s, "\n") {
					f := strings.Fields(l)
					if len(f) > 0 && f[len(f)-1] == `\` {
						f = f[:len(f)-1] // a shell command's continuation
					}
					for _, w := range f {
						if w != "#" { // a comment's continuation
							ws = append(ws, w)
						}
					}
				}
				return ws
			}
			if got, want := words(out.String()), words(raw.String()); !slices.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Errorf("%s --help at %d columns changed its words at word %d: %q, want %q", c.Name(), w.width, i, got[i:min(i+5, len(got))], want[i:min(i+5, len(want))])
			}
		}
	}
	var out strings.Builder
	Main([]string{"inject", "--help"}, &Streams{Out: &out, Err: &out, NoColor: true})
	for _, kind := range []string{"store-missing-checksum", "xfer-remote-shift", "xfer-lapsed-lease"} {
		found := false
		for l := range strings.SplitSeq(out.String(), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == kind && strings.HasPrefix(l, "  "+kind+"  ") {
				found = true
			}
		}
		if !found {
			t.Errorf("inject --help: kind %s is not followed by two spaces before its description", kind)
		}
	}
}

// TestWrapHelp: a long line wraps at spaces under its description's
// column, an example's command continues with a backslash, and its
// comment with "# ".
func TestWrapHelp(t *testing.T) {
	in := "  --flag string   one two three four five six seven\n  $ kvaudit a b c d e f g h i j k l m n o p q r s t\n  # one two three four five six seven eight nine ten\nshort"
	want := "  --flag string   one two three four\n                  five six seven\n  $ kvaudit a b c d e f g h i j k l m \\\n      n o p q r s t\n  # one two three four five six seven\n  # eight nine ten\nshort"
	if got := wrapHelp(in, 40); got != want {
		t.Errorf("wrapHelp:\n%s\nwant\n%s", got, want)
	}
}
