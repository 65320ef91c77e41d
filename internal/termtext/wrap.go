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
	return WrapWords(text, width, hardBreak)
}

// WrapWords wraps text as Wrap does, but breaks a word wider than width
// with breakWord (a table cell breaks an identifier after its hyphens
// and other breakpoints before it cuts it anywhere). breakWord returns
// the word's pieces, in order, joined the word: the first at most room
// cells, the cells left on the line (width when the line is empty), or
// "" to start the word on the next line; the others at most width cells.
func WrapWords(text string, width int, breakWord func(word string, room, width int) []string) string {
	if width <= 0 {
		return text
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = wrapLine(l, width, breakWord)
	}
	return strings.Join(lines, "\n")
}

// hardBreak cuts a word into pieces of width cells, on lines of its
// own: the first piece is "" (start on the next line) unless room is a
// whole line.
func hardBreak(w string, room, width int) []string {
	p := strings.Split(ansi.Hardwrap(w, width, false), "\n")
	if room < width {
		return append([]string{""}, p...)
	}
	return p
}

// wrapLine wraps one line of text (no newline) as WrapWords does.
func wrapLine(l string, width int, breakWord func(string, int, int) []string) string {
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
		sw := ansi.StringWidth(sep)
		var pieces []string
		switch {
		case ww > width && hasWord:
			// A word wider than a whole line, after words: breakWord
			// says whether it starts in the line's rest.
			pieces = breakWord(w, max(0, width-curW-sw), width)
			if pieces[0] != "" {
				pieces[0] = sep + pieces[0]
			}
		case ww > width && curW+sw > 0 && curW+sw < width:
			// Only indentation so far: keep it, the word's first piece
			// fills the line's rest.
			first := hardBreak(w, width-curW-sw, width-curW-sw)
			pieces = append([]string{sep + first[0]}, breakWord(strings.Join(first[1:], ""), width, width)...)
		case ww > width:
			cur.Reset()
			curW = 0
			pieces = breakWord(w, width, width)
		default:
			// w fits a line of its own.
			pieces = []string{"", w}
		}
		sep = ""
		if pieces[0] == "" {
			if hasWord {
				out = append(out, cur.String())
			}
			cur.Reset()
			curW = 0
			pieces = pieces[1:]
		} else {
			cur.WriteString(pieces[0])
			if len(pieces) > 1 {
				out = append(out, cur.String())
				cur.Reset()
				curW = 0
			}
			pieces = pieces[1:]
		}
		for k, c := range pieces {
			if k == len(pieces)-1 {
				cur.WriteString(c)
				break
			}
			out = append(out, c)
		}
		curW, hasWord = ansi.StringWidth(cur.String()), true
	}
	out = append(out, cur.String())
	return strings.Join(out, "\n")
}
