package jsonscan

import (
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"
)

// Strings: the fast loop over a string without escapes and the escapes,
// \uXXXX and surrogate pairs included.

// special marks the bytes a string's fast loop stops at: the quote, the
// backslash, control characters and non-ASCII bytes.
var special = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c == '"' || c == '\\' || c < 0x20 || c >= 0x80
	}
	return t
}()

// plainRun returns the index of the first 8-byte block of buf from i on
// that may hold a special byte (or of the last, shorter one): the bytes
// before it are none. It reads a block as one word: each of its tests
// flags every byte it looks for, and may flag wrongly only a byte above
// one rightly flagged.
func plainRun(buf []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(buf); i += 8 {
		w := binary.LittleEndian.Uint64(buf[i:])
		quote, backslash := w^(ones*'"'), w^(ones*'\\')
		if ((quote-ones)&^quote|(backslash-ones)&^backslash|(w-ones*0x20)&^w|w)&highs != 0 {
			break
		}
	}
	return i
}

// String reads the string that starts at the next unread byte (a '"',
// which Peek returned) and returns its decoded bytes, valid until the
// next call.
func (s *Scanner) String() ([]byte, error) {
	s.tokAt = s.Offset()
	s.i++ // the opening quote
	buf := s.buf
	start, j, ascii := s.i, plainRun(s.buf, s.i), true
	for j < len(buf) {
		c := buf[j]
		if !special[c] {
			j++
			continue
		}
		if c >= 0x80 {
			ascii = false
			j++
			continue
		}
		if c != '"' {
			break
		}
		// No escape, all in the buffer: the bytes themselves. Of a
		// string too long and one not UTF-8, the first error counts (at
		// the same byte, the UTF-8's, as stringSlow has it).
		b := buf[start:j]
		bad := len(b)
		if !ascii && !utf8.Valid(b) {
			bad = FirstInvalid(b)
		}
		if max := s.opt.MaxString; max > 0 && len(b) > max && max < bad {
			return nil, &Error{Code: ErrLongString, Offset: s.base + int64(start+max), Limit: uint64(max)}
		}
		if bad < len(b) {
			return nil, s.errAt(ErrUTF8, start+bad)
		}
		s.i = j + 1
		s.tok = b
		return b, nil
	}
	s.str = s.str[:0]
	return s.stringSlow()
}

// stringSlow reads the string from s.i on into s.str, across escapes and
// refills.
func (s *Scanner) stringSlow() ([]byte, error) {
	max := s.opt.MaxString
	for {
		if s.i >= len(s.buf) && !s.fill(1, s.i) {
			return nil, s.endErr()
		}
		c := s.buf[s.i]
		switch {
		case c == '"':
			s.i++
			s.tok = s.str
			return s.str, nil
		case c == '\\':
			// The escape's offset: escape may refill, moving the buffer.
			at, n := s.Offset(), len(s.str)
			if err := s.escape(); err != nil {
				return nil, err
			}
			if max > 0 && len(s.str) > max && n <= max {
				return nil, &Error{Code: ErrLongString, Offset: at, Limit: uint64(max)}
			}
		case c < 0x20:
			if c == '\n' && s.opt.Lines {
				return nil, s.errAt(ErrLineEnd, s.i)
			}
			return nil, s.errAt(ErrControl, s.i)
		default:
			// j ends the run, or is its invalid byte: the length's
			// error first if it comes before it.
			j, err := s.run()
			if max > 0 && len(s.str)+j-s.i > max {
				return nil, &Error{Code: ErrLongString, Offset: s.base + int64(s.i+max-len(s.str)), Limit: uint64(max)}
			}
			if err != nil {
				return nil, err
			}
			s.str = append(s.str, s.buf[s.i:j]...)
			s.i = j
		}
	}
}

// run returns the end of the run of plain string bytes at s.i (at least
// one rune), checking their UTF-8; it may refill the buffer first. At a
// byte that starts no valid rune it returns that byte's index and an
// ErrUTF8.
func (s *Scanner) run() (int, error) {
	j := s.i
	for j < len(s.buf) {
		c := s.buf[j]
		if c < 0x80 {
			if special[c] {
				break
			}
			j++
			continue
		}
		if !utf8.FullRune(s.buf[j:]) {
			if j > s.i {
				break // take what is complete, then refill
			}
			ok := s.fill(utf8.UTFMax, s.i)
			j = s.i // the bytes may have moved
			if !ok && !utf8.FullRune(s.buf[j:]) {
				s.i = len(s.buf)
				return 0, s.endErr()
			}
			continue
		}
		r, n := utf8.DecodeRune(s.buf[j:])
		if r == utf8.RuneError && n <= 1 {
			return j, s.errAt(ErrUTF8, j)
		}
		j += n
	}
	return j, nil
}

// FirstInvalid is the index of b's first byte that starts no valid rune
// (len(b) if b is valid UTF-8).
func FirstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// escape decodes the backslash escape at s.i into s.str.
func (s *Scanner) escape() error {
	if !s.fill(2, s.i) {
		return s.cut(s.i + 1)
	}
	e := s.buf[s.i+1]
	var d byte
	switch e {
	case '"', '\\', '/':
		d = e
	case 'b':
		d = '\b'
	case 'f':
		d = '\f'
	case 'n':
		d = '\n'
	case 'r':
		d = '\r'
	case 't':
		d = '\t'
	case 'u':
		return s.unicodeEscape()
	default:
		if e == '\n' && s.opt.Lines {
			return s.errAt(ErrLineEnd, s.i+1)
		}
		return s.errAt(ErrEscape, s.i+1)
	}
	s.str = append(s.str, d)
	s.i += 2
	return nil
}

// cut is the error for input that stops at buffer index i inside a token:
// an ErrLineEnd at a newline (Options.Lines), else the end's.
func (s *Scanner) cut(i int) error {
	if i < len(s.buf) && s.buf[i] == '\n' && s.opt.Lines {
		return s.errAt(ErrLineEnd, i)
	}
	s.i = i
	return s.endErr()
}

// hex4 reads the 4 hex digits at buffer index i, which hold (fill).
func (s *Scanner) hex4(i int) (rune, error) {
	var r rune
	for k := i; k < i+4; k++ {
		if k >= len(s.buf) {
			return 0, s.cut(k)
		}
		c := s.buf[k]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			if c == '\n' && s.opt.Lines {
				return 0, s.errAt(ErrLineEnd, k)
			}
			return 0, s.errAt(ErrHex, k)
		}
		r = r<<4 | rune(c)
	}
	return r, nil
}

// unicodeEscape decodes the \u escape at s.i (and the low half of a
// surrogate pair after it).
func (s *Scanner) unicodeEscape() error {
	s.fill(12, s.i)
	r, err := s.hex4(s.i + 2)
	if err != nil {
		return err
	}
	if !utf16.IsSurrogate(r) {
		s.str = utf8.AppendRune(s.str, r)
		s.i += 6
		return nil
	}
	if r < 0xDC00 && s.i+8 <= len(s.buf) && s.buf[s.i+6] == '\\' && s.buf[s.i+7] == 'u' {
		r2, err := s.hex4(s.i + 8)
		if err != nil {
			return err
		}
		if r2 >= 0xDC00 && r2 < 0xE000 {
			s.str = utf8.AppendRune(s.str, utf16.DecodeRune(r, r2))
			s.i += 12
			return nil
		}
	}
	if !s.opt.LoneSurrogates {
		return &Error{Code: ErrSurrogate, Offset: s.base + int64(s.i), Text: string(s.buf[s.i : s.i+6])}
	}
	s.str = utf8.AppendRune(s.str, utf8.RuneError)
	s.i += 6
	return nil
}
