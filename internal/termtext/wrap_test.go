package termtext

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestWrapExact(t *testing.T) {
	for _, c := range []struct {
		in    string
		width int
		want  string
	}{
		// Flags, request ids and hyphenated words stay whole.
		{"pass --request req-0 to name it", 10, "pass\n--request\nreq-0 to\nname it"},
		{"the block-size is TP-independent here", 16, "the block-size\nis\nTP-independent\nhere"},
		{"run kvaudit diff --request chatcmpl-7 again", 22, "run kvaudit diff\n--request chatcmpl-7\nagain"},
		{"use --no-color", 10, "use\n--no-color"},
		{"use --no-color", 8, "use\n--no-col\nor"},
		// A word ending in a hyphen keeps it, where the input had it.
		{"pre- and post-fill", 10, "pre- and\npost-fill"},
		// Fits: unchanged, spacing included.
		{"a  b", 4, "a  b"},
		{"short", 0, "short"},
		// Indentation kept on the first line; newlines kept.
		{"  one two three", 9, "  one two\nthree"},
		{"ab cd\nef gh", 2, "ab\ncd\nef\ngh"},
		// An over-long word alone is broken, on lines of its own.
		{"see /a/very/long/path now", 8, "see\n/a/very/\nlong/pat\nh now"},
		// After indentation, it fills the line's rest.
		{"  /a/very/long/path", 8, "  /a/ver\ny/long/p\nath"},
		// A word that fits a line but not after the indentation moves.
		{"      word", 8, "word"},
	} {
		if got := Wrap(c.in, c.width); got != c.want {
			t.Errorf("Wrap(%q, %d) = %q, want %q", c.in, c.width, got, c.want)
		}
	}
}

// TestWrapProperties checks Wrap against what a wrap at spaces must do,
// on text of words made of letters and hyphens: no line is wider than
// the width; the lines' words, in order, are the input's words, a word
// wider than the width cut into width-long pieces (so a line ends in '-'
// only where an input word did, or inside such a cut word); and each
// break was needed (the next line's first word would not fit after the
// line before it).
func TestWrapProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		width := rapid.IntRange(1, 30).Draw(t, "width")
		words := rapid.SliceOfN(rapid.StringMatching(`[a-z-]{1,14}`), 1, 20).Draw(t, "words")
		seps := rapid.SliceOfN(rapid.SampledFrom([]string{" ", " ", "  "}), len(words), len(words)).Draw(t, "seps")
		var b strings.Builder
		for i, w := range words {
			if i > 0 {
				b.WriteString(seps[i])
			}
			b.WriteString(w)
		}
		in := b.String()
		lines := strings.Split(Wrap(in, width), "\n")

		var want []string // the words as they may appear
		cut := map[int]bool{}
		sep := map[int]string{} // the spaces before each word in the input
		for i, w := range words {
			sep[len(want)] = seps[i]
			if len(w) <= width {
				want = append(want, w)
				continue
			}
			for len(w) > width {
				cut[len(want)] = true
				want = append(want, w[:width])
				w = w[width:]
			}
			cut[len(want)] = true
			want = append(want, w)
		}
		var got []string
		for i, l := range lines {
			if len(l) > width {
				t.Fatalf("line %d %q is %d wide, over %d (input %q)", i, l, len(l), width, in)
			}
			if strings.TrimSpace(l) != l {
				t.Fatalf("line %d %q starts or ends with a space (input %q)", i, l, in)
			}
			f := strings.Fields(l)
			if len(f) == 0 {
				t.Fatalf("line %d is empty (input %q)", i, in)
			}
			got = append(got, f...)
			if strings.HasSuffix(l, "-") {
				k := len(got) - 1
				if k >= len(want) || !(cut[k] || strings.HasSuffix(want[k], "-")) {
					t.Fatalf("line %d %q ends in '-' inside a word that fits (input %q, width %d)", i, l, in, width)
				}
			}
			if i > 0 && len(lines[i-1])+len(sep[len(got)-len(f)])+len(f[0]) <= width && !cut[len(got)-len(f)] {
				t.Fatalf("break before line %d %q not needed: %q fits after %q (width %d)", i, l, f[0], lines[i-1], width)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("words %q, want %q (input %q, width %d)", got, want, in, width)
		}
	})
}
