// Package termtext makes untrusted text (request ids, layer names, file
// names, reasons from dumps, records and payloads) safe to print where a
// person reads it: a table, a note, the -q verdict line, an error on
// stderr. A crafted string can then neither move the cursor, clear the
// screen, start a new line nor reorder what follows it, so it cannot
// forge a verdict.
package termtext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape makes an untrusted string safe to print on a terminal or in
// markdown: control characters (C0 including tab, CR and LF, DEL, C1),
// bidirectional overrides and isolates, and invalid UTF-8 are written as
// Go escapes (\x1b, \r, \n, \u202e, ...), so a crafted request id or
// layer name can neither move the cursor, clear the screen, start a new
// line nor reorder what follows it. A backslash is doubled, so escaped
// text cannot be forged either (a name spelling out `\x1b` prints as
// `\\x1b`). Other text is unchanged.
func Escape(s string) string { return escape(s, true) }

// escape is Escape, doubling backslashes only with backslash (Line
// leaves them alone).
func escape(s string, backslash bool) string {
	clean := true
	for i, r := range s {
		if (needsEscape(r) && (backslash || r != '\\')) || (r == utf8.RuneError && !validAt(s, i)) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\\' && backslash:
			b.WriteString(`\\`)
		case r == '\\':
			b.WriteByte('\\')
		case r < 0x80 && needsEscape(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func validAt(s string, i int) bool {
	_, n := utf8.DecodeRuneInString(s[i:])
	return n == 3 // a literal U+FFFD, not a bad byte
}

func needsEscape(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == '\\':
		return true // so that an escape in the output is always one
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true // bidi marks, embeddings, overrides, isolates
	case r == 0x2028, r == 0x2029:
		return true // line and paragraph separators
	}
	return false
}

// Line makes a whole line safe to print as Escape does, but leaves
// backslashes alone: a line may hold strings already quoted (%q) or
// escaped (Escape), whose backslashes must stay single. Every control
// character, bidi mark and invalid byte is still escaped, so no part of
// the line can rewrite the screen.
func Line(s string) string { return escape(s, false) }

// shown is how many names a bounded list (Requests, Some) shows.
const shown = 3

// Some lists items for a line of text, bounded: up to three, joined by
// sep, then "... and N more" for the rest, so that a verdict line over
// thousands of requests stays one line.
func Some(items []string, sep string) string {
	if len(items) <= shown {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s%s... and %d more", strings.Join(items[:shown], sep), sep, len(items)-shown)
}

// Requests names requests in a verdict line, bounded: "request a, b" for
// up to three ids, else "300 requests (a, b, c, ... and 297 more)".
func Requests(ids []string) string {
	if len(ids) <= shown {
		return "request " + strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%d requests (%s)", len(ids), Some(ids, ", "))
}
