package checksum

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pyStr returns Python's repr of a str: single quotes unless the string
// holds a single quote and no double quote; backslash, the quote, \t, \n
// and \r escaped; other non-printable characters as \xhh, \uhhhh or
// \Uhhhhhhhh (str.isprintable: everything but the categories Cc, Cf, Cs, Co,
// Cn, Zl, Zp and the Zs other than the ASCII space). Invalid UTF-8 bytes,
// which a Python str cannot hold, are written as U+FFFD, as decoding with
// errors="replace" would.
func pyStr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == '\\' || r == rune(quote):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x`)
			b.WriteString(hex2(uint32(r), 2))
		case r < 0x7f:
			b.WriteRune(r)
		case !pyPrintable(r):
			switch {
			case r < 0x100:
				b.WriteString(`\x`)
				b.WriteString(hex2(uint32(r), 2))
			case r < 0x10000:
				b.WriteString(`\u`)
				b.WriteString(hex2(uint32(r), 4))
			default:
				b.WriteString(`\U`)
				b.WriteString(hex2(uint32(r), 8))
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(quote)
	return b.String()
}

func hex2(v uint32, width int) string {
	s := strconv.FormatUint(uint64(v), 16)
	return strings.Repeat("0", width-len(s)) + s
}

// pyPrintable mirrors Python's str.isprintable for one character.
func pyPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	if r == utf8.RuneError {
		return true // U+FFFD is a symbol (So), printable
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co, unicode.Zl, unicode.Zp, unicode.Zs) {
		return false
	}
	// Unassigned code points (Cn) are not printable.
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S)
}

// pyTuple returns Python's repr of a tuple of already-repr'd items: "(a,)"
// for one item.
func pyTuple(items ...string) string {
	if len(items) == 1 {
		return "(" + items[0] + ",)"
	}
	return "(" + strings.Join(items, ", ") + ")"
}
