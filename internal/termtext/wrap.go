package termtext

import (
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// Wrap wraps text to width terminal cells for a person to read: a note,
// a title, a paragraph. It breaks lines at spaces only, never after a
// hyphen, so "--request", "req-0", "block-size" and "TP-independent"
// stay whole on one line; a word wider than width (a long path) is the
// only thing broken, at width cells, starting on a line of its own. The
// spaces at a break are dropped; other spacing, a line's indentation and
// the text's own newlines are kept. Width is measured in cells
// (ansi.StringWidth: escape sequences take none, wide runes two). A
// width of zero or less leaves text as it is.
func Wrap(text string, width int) string {
	if width <= 0 {
		return text
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = wrapLine(l, width)
	}
	return strings.Join(lines, "\n")
}

// wrapLine wraps one line of text (no newline) as Wrap does.
func wrapLine(l string, width int) string {
	if ansi.StringWidth(l) <= width {
		return l
	}
	var out []string
	var cur strings.Builder
	curW := 0
	hasWord := false // cur holds a word, not only indentation
	sep := ""        // the spaces before the next word
	for i := 0; i < len(l); {
		j := i
		for j < len(l) && l[j] == ' ' {
			j++
		}
		sep += l[i:j]
		if j == len(l) {
			break // trailing spaces go with the break
		}
		k := j
		for k < len(l) && l[k] != ' ' {
			k++
		}
		w, ww := l[j:k], ansi.StringWidth(l[j:k])
		i = k
		if !hasWord && curW+ansi.StringWidth(sep)+ww <= width {
			cur.WriteString(sep + w) // the first word after the indentation
			curW += ansi.StringWidth(sep) + ww
			hasWord, sep = true, ""
			continue
		}
		if hasWord && curW+ansi.StringWidth(sep)+ww <= width {
			cur.WriteString(sep + w)
			curW += ansi.StringWidth(sep) + ww
			sep = ""
			continue
		}
		// w does not fit after what cur holds: end the line.
		if hasWord {
			out = append(out, cur.String())
			cur.Reset()
			curW, hasWord = 0, false
		} else if curW+ansi.StringWidth(sep) < width {
			// Only indentation so far, and w is wider than the rest of
			// the line: keep the indentation, w is broken below.
			cur.WriteString(sep)
			curW += ansi.StringWidth(sep)
		} else {
			cur.Reset()
			curW = 0
		}
		sep = ""
		if curW+ww <= width {
			cur.WriteString(w)
			curW += ww
			hasWord = true
			continue
		}
		// A word wider than a whole line: break it at width cells.
		room := width - curW
		chunks := strings.Split(ansi.Hardwrap(w, room, false), "\n")
		if curW > 0 && len(chunks) > 1 {
			// The rest after the indentation's first piece fills whole lines.
			rest := strings.Join(chunks[1:], "")
			chunks = append(chunks[:1], strings.Split(ansi.Hardwrap(rest, width, false), "\n")...)
		}
		for _, c := range chunks[:len(chunks)-1] {
			cur.WriteString(c)
			out = append(out, cur.String())
			cur.Reset()
		}
		last := chunks[len(chunks)-1]
		cur.WriteString(last)
		curW, hasWord = ansi.StringWidth(last), true
	}
	out = append(out, cur.String())
	return strings.Join(out, "\n")
}
