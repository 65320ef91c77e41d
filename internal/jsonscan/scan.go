// Package jsonscan is kvaudit's one JSON scanner: every reader of a JSON
// format (the manifest and record check, the safetensors header, the NIXL
// descriptor log) reads its bytes through it.
//
// A Scanner reads a document held in memory (New) or streamed from an
// io.Reader through a fixed buffer (NewReader). It has two levels:
//
//   - The lexer (Peek, Advance, String, Number, Uint, Literal, EndLine)
//     reads one lexical element at a time for a reader that knows what
//     comes next and words its own errors (the log reader).
//   - The token level (Next) follows the grammar: it checks commas, colons
//     and brackets, refuses nesting deeper than the limit, and hands out
//     one token at a time (the manifest key check, the safetensors header).
//
// Everything is bounded: nesting depth, a decoded string's length, a
// number's length; memory is the buffer, the decoded string and the
// nesting stack. A string or number is returned as bytes that stay valid
// until the next call; a string without escapes is not copied. Errors are
// *Error values carrying the exact byte offset of the offending byte, and
// read errors of the underlying reader are returned as they are.
package jsonscan

import (
	"fmt"
	"io"
	"strconv"
)

// Defaults for the zero values of Options' limits.
const (
	DefaultMaxDepth  = 64
	DefaultMaxNumber = 4096
)

// Options set a Scanner's limits and dialect.
type Options struct {
	// MaxDepth bounds the nesting of objects and arrays (Next); 0 means
	// DefaultMaxDepth.
	MaxDepth int
	// MaxString bounds a decoded string in bytes; 0 means no bound beyond
	// the input's length.
	MaxString int
	// MaxNumber bounds a number's text in bytes (Number); 0 means
	// DefaultMaxNumber.
	MaxNumber int
	// Lines reads JSON Lines: a newline is not whitespace but the end of
	// a line, which inside a value is an ErrLineEnd (EndLine consumes
	// it after one).
	Lines bool
	// Stream lets Next read several top-level values one after the
	// other; otherwise only whitespace may follow the first.
	Stream bool
	// LoneSurrogates decodes a \u escape of an unpaired UTF-16 surrogate
	// as U+FFFD, as encoding/json and Python do; otherwise it is an
	// ErrSurrogate, as serde_json has it.
	LoneSurrogates bool
}

// Code says what an Error is.
type Code uint8

// The error codes.
const (
	ErrEOF         Code = iota + 1 // the input ends inside a value
	ErrLineEnd                     // a newline inside a value (Options.Lines)
	ErrChar                        // a byte the grammar does not allow here
	ErrControl                     // a control character inside a string
	ErrEscape                      // an unknown backslash escape
	ErrHex                         // a \u escape without 4 hex digits
	ErrSurrogate                   // a lone UTF-16 surrogate escape
	ErrUTF8                        // a string that is not valid UTF-8
	ErrLongString                  // a decoded string over Options.MaxString
	ErrLongNumber                  // a number over Options.MaxNumber
	ErrDepth                       // nesting over Options.MaxDepth
	ErrNegative                    // Uint: a negative number
	ErrFraction                    // Uint: a fraction or an exponent
	ErrLeadingZero                 // Uint: a leading zero
	ErrRange                       // Uint: a number over the maximum
)

// Error is a syntax error or a limit passed.
type Error struct {
	Code Code
	// Offset is the offending byte's offset in the input (the input's
	// length at its end); for ErrSurrogate, the escape's.
	Offset int64
	// Char is the offending byte (ErrChar, ErrControl, ErrEscape, ErrHex,
	// the number errors).
	Char byte
	// Context says, for ErrChar, what was expected, in encoding/json's
	// words ("looking for beginning of value").
	Context string
	// Limit is the limit passed (ErrLongString, ErrLongNumber, ErrDepth,
	// ErrRange).
	Limit uint64
	// Text is the escape of an ErrSurrogate (`\ud800`).
	Text string
}

// Error words the error as encoding/json does where it has the case,
// without the offset.
func (e *Error) Error() string {
	q := quoteChar(e.Char)
	switch e.Code {
	case ErrEOF:
		return "unexpected end of JSON input"
	case ErrLineEnd:
		return "unexpected end of line"
	case ErrChar:
		return "invalid character " + q + " " + e.Context
	case ErrControl:
		return "invalid character " + q + " in string literal"
	case ErrEscape:
		return "invalid character " + q + " in string escape code"
	case ErrHex:
		return "invalid character " + q + ` in \u hexadecimal character escape`
	case ErrSurrogate:
		return "lone UTF-16 surrogate " + e.Text + " in a string"
	case ErrUTF8:
		return "invalid UTF-8 in string"
	case ErrLongString:
		return fmt.Sprintf("string longer than %d bytes", e.Limit)
	case ErrLongNumber:
		return fmt.Sprintf("number longer than %d bytes", e.Limit)
	case ErrDepth:
		return fmt.Sprintf("nested deeper than %d levels", e.Limit)
	case ErrNegative:
		return "negative number"
	case ErrFraction:
		return "number with a fraction or an exponent, want an integer"
	case ErrLeadingZero:
		return "number with a leading zero"
	case ErrRange:
		return fmt.Sprintf("number larger than %d", e.Limit)
	}
	return "invalid JSON"
}

// quoteChar quotes a byte as encoding/json's syntax errors do.
func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

// Scanner reads one JSON input. The zero value is not usable: make one
// with New or NewReader.
type Scanner struct {
	buf  []byte
	i    int   // the next unread byte of buf
	base int64 // the input offset of buf[0]
	r    io.Reader
	rerr error // what r returned last, when not nil (io.EOF at the end)
	opt  Options
	str  []byte // a string decoded (escapes or a refill)
	tok  []byte // the last String or Number

	// The token level.
	stack  []byte // '{' or '[' per open container
	state  state
	opened bool // the innermost container was just opened (or a key wanted first)
	key    bool // the last String was an object's key
	tokAt  int64
}

type state uint8

const (
	stValue state = iota // a value (or the end of a just-opened array)
	stKey                // a key (or the end of a just-opened object)
	stColon              // the colon after a key
	stComma              // a comma or the end of the container
	stTop                // after a top-level value
)

// bufSize is a streaming Scanner's buffer: a refill costs one Read.
const bufSize = 64 << 10

// New scans data, which it reads in place and does not copy.
func New(data []byte, opt Options) *Scanner {
	s := &Scanner{buf: data, rerr: io.EOF}
	s.setOptions(opt)
	return s
}

// NewReader scans what r yields, through a buffer of 64 KiB (more only
// for a number longer than the buffer, within Options.MaxNumber).
func NewReader(r io.Reader, opt Options) *Scanner {
	s := &Scanner{buf: make([]byte, 0, bufSize), r: r}
	s.setOptions(opt)
	return s
}

func (s *Scanner) setOptions(opt Options) {
	if opt.MaxDepth <= 0 {
		opt.MaxDepth = DefaultMaxDepth
	}
	if opt.MaxNumber <= 0 {
		opt.MaxNumber = DefaultMaxNumber
	}
	s.opt = opt
}

// Offset is the input offset of the next unread byte.
func (s *Scanner) Offset() int64 { return s.base + int64(s.i) }

// fill makes n bytes available from s.i unless the input ends first, and
// says whether it did. A streaming Scanner keeps the bytes from keep (<=
// s.i) on; earlier ones are dropped.
func (s *Scanner) fill(n, keep int) bool {
	if s.i+n <= len(s.buf) {
		return true
	}
	if s.r == nil || s.rerr != nil {
		return false
	}
	if keep > 0 {
		m := copy(s.buf, s.buf[keep:])
		s.buf = s.buf[:m]
		s.base += int64(keep)
		s.i -= keep
	}
	if need := s.i + n; need > cap(s.buf) {
		nb := make([]byte, len(s.buf), max(need, 2*cap(s.buf)))
		copy(nb, s.buf)
		s.buf = nb
	}
	for empty := 0; s.i+n > len(s.buf); {
		m, err := s.r.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+m]
		if err != nil {
			s.rerr = err
			break
		}
		if m == 0 {
			if empty++; empty >= 100 {
				s.rerr = io.ErrNoProgress
				break
			}
		}
	}
	return s.i+n <= len(s.buf)
}

// endErr is the error for input that ends at s.i: the reader's error, or
// an ErrEOF.
func (s *Scanner) endErr() error {
	if s.rerr != nil && s.rerr != io.EOF {
		return s.rerr
	}
	return &Error{Code: ErrEOF, Offset: s.Offset()}
}

func (s *Scanner) errAt(code Code, i int) *Error {
	e := &Error{Code: code, Offset: s.base + int64(i)}
	if i < len(s.buf) {
		e.Char = s.buf[i]
	}
	return e
}

func (s *Scanner) charErr(i int, context string) *Error {
	e := s.errAt(ErrChar, i)
	e.Context = context
	return e
}

// AtEnd says whether the input ends at the next unread byte (whitespace
// not skipped); not at a read error, which the next read returns.
func (s *Scanner) AtEnd() bool {
	return !s.fill(1, s.i) && (s.rerr == nil || s.rerr == io.EOF)
}

// Peek skips whitespace and returns the next byte, which it does not
// consume. At the end of the input it returns an ErrEOF (or the reader's
// error); with Options.Lines, at a newline an ErrLineEnd.
func (s *Scanner) Peek() (byte, error) {
	c, ok := s.skipSpace()
	if !ok {
		return 0, s.spaceErr()
	}
	return c, nil
}

// skipSpace is Peek without the error: false at the end of the input (or
// of a line).
func (s *Scanner) skipSpace() (byte, bool) {
	for {
		buf := s.buf
		for i := s.i; i < len(buf); i++ {
			c := buf[i]
			if c > ' ' { // no whitespace byte is above the space
				s.i = i
				return c, true
			}
			switch c {
			case ' ', '\t', '\r':
			case '\n':
				if s.opt.Lines {
					s.i = i
					return 0, false
				}
			default:
				s.i = i
				return c, true
			}
		}
		s.i = len(buf)
		if !s.fill(1, s.i) {
			return 0, false
		}
	}
}

// spaceErr is the error of skipSpace's false.
func (s *Scanner) spaceErr() error {
	if s.i < len(s.buf) {
		return s.errAt(ErrLineEnd, s.i)
	}
	return s.endErr()
}

// Advance consumes the byte Peek returned.
func (s *Scanner) Advance() { s.i++ }

// EndLine ends a line after its value (Options.Lines): it skips spaces,
// tabs and carriage returns, then consumes a newline and returns '\n', or
// returns eof at the end of the input, or returns the next byte,
// unconsumed. Its error is only the reader's.
func (s *Scanner) EndLine() (c byte, eof bool, err error) {
	for {
		for ; s.i < len(s.buf); s.i++ {
			switch c := s.buf[s.i]; c {
			case ' ', '\t', '\r':
			case '\n':
				s.i++
				return c, false, nil
			default:
				return c, false, nil
			}
		}
		if !s.fill(1, s.i) {
			if s.rerr != nil && s.rerr != io.EOF {
				return 0, false, s.rerr
			}
			return 0, true, nil
		}
	}
}

// Number reads the number that starts at the next unread byte and
// returns its text, valid until the next call. It follows the JSON
// grammar; the byte after the number is not read.
func (s *Scanner) Number() ([]byte, error) {
	s.tokAt = s.Offset()
	if j, ok := s.intEnd(s.buf, s.i); ok {
		s.tok = s.buf[s.i:j]
		s.i = j
		return s.tok, nil
	}
	n := 0               // the number's bytes read so far, from s.i
	peek := func() int { // the byte at s.i+n, or -1 at the end
		if s.i+n >= len(s.buf) && !s.fill(n+1, s.i) {
			return -1
		}
		return int(s.buf[s.i+n])
	}
	digits := func() int {
		k := 0
		for n <= s.opt.MaxNumber {
			if c := peek(); c < '0' || c > '9' {
				break
			}
			n++
			k++
		}
		return k
	}
	bad := func(context string) error {
		switch c := peek(); {
		case c < 0:
			s.i += n
			return s.endErr()
		case c == '\n' && s.opt.Lines:
			return s.errAt(ErrLineEnd, s.i+n)
		}
		return s.charErr(s.i+n, context)
	}
	if peek() == '-' {
		n++
	}
	switch c := peek(); {
	case c == '0':
		n++
	case c >= '1' && c <= '9':
		digits()
	default:
		return nil, bad("in numeric literal")
	}
	if peek() == '.' {
		n++
		if digits() == 0 {
			return nil, bad("after decimal point in numeric literal")
		}
	}
	if c := peek(); c == 'e' || c == 'E' {
		n++
		if c := peek(); c == '+' || c == '-' {
			n++
		}
		if digits() == 0 {
			return nil, bad("in exponent of numeric literal")
		}
	}
	if n > s.opt.MaxNumber {
		return nil, &Error{Code: ErrLongNumber, Offset: s.tokAt + int64(s.opt.MaxNumber), Limit: uint64(s.opt.MaxNumber)}
	}
	s.tok = s.buf[s.i : s.i+n]
	s.i += n
	return s.tok, nil
}

// intEnd is Number's fast path: the end of the integer at buf[i] (buf is
// s.buf), when it is one (no fraction, no exponent), well formed, within
// Options.MaxNumber, and held whole in the buffer (a streaming Scanner's
// may go on after a refill). Otherwise it returns false and Number reads
// the number slowly.
func (s *Scanner) intEnd(buf []byte, i int) (int, bool) {
	j := i
	if j < len(buf) && buf[j] == '-' {
		j++
	}
	switch {
	case j >= len(buf) || buf[j] < '0' || buf[j] > '9':
		return 0, false
	case buf[j] == '0':
		j++
	default:
		for j++; j < len(buf) && buf[j] >= '0' && buf[j] <= '9'; j++ {
		}
	}
	if j >= len(buf) {
		return j, s.r == nil && j-i <= s.opt.MaxNumber
	}
	if c := buf[j]; c == '.' || c == 'e' || c == 'E' || j-i > s.opt.MaxNumber {
		return 0, false
	}
	return j, true
}

// Uint reads a non-negative integer of at most max that starts at the
// next unread byte: digits only, without a leading zero; a sign, a
// fraction or an exponent is an error of its own (ErrNegative,
// ErrFraction), as is another first byte (ErrChar).
func (s *Scanner) Uint(max uint64) (uint64, error) {
	if !s.fill(1, s.i) {
		return 0, s.endErr()
	}
	first := s.buf[s.i]
	if first == '-' {
		return 0, s.errAt(ErrNegative, s.i)
	}
	if first < '0' || first > '9' {
		return 0, s.charErr(s.i, "looking for beginning of an integer")
	}
	v := uint64(first - '0')
	s.i++
	for {
		if s.i >= len(s.buf) && !s.fill(1, s.i) {
			return v, nil
		}
		c := s.buf[s.i]
		if c < '0' || c > '9' {
			if c == '.' || c == 'e' || c == 'E' {
				return 0, s.errAt(ErrFraction, s.i)
			}
			return v, nil
		}
		if first == '0' {
			return 0, s.errAt(ErrLeadingZero, s.i)
		}
		if d := uint64(c - '0'); v > (max-d)/10 {
			e := s.errAt(ErrRange, s.i)
			e.Limit = max
			return 0, e
		} else {
			v = v*10 + d
		}
		s.i++
	}
}

// Literal reads the null, true or false that starts at the next unread
// byte.
func (s *Scanner) Literal() (Kind, error) {
	if !s.fill(1, s.i) {
		return 0, s.endErr()
	}
	s.tokAt = s.Offset()
	var word string
	var k Kind
	switch s.buf[s.i] {
	case 'n':
		word, k = "null", Null
	case 't':
		word, k = "true", True
	case 'f':
		word, k = "false", False
	default:
		return 0, s.charErr(s.i, "looking for beginning of value")
	}
	s.fill(len(word), s.i)
	for n := 1; n < len(word); n++ {
		if s.i+n >= len(s.buf) {
			return 0, s.cut(s.i + n)
		}
		if c := s.buf[s.i+n]; c != word[n] {
			if c == '\n' && s.opt.Lines {
				return 0, s.errAt(ErrLineEnd, s.i+n)
			}
			return 0, s.charErr(s.i+n, fmt.Sprintf("in literal %s (expecting %s)", word, quoteChar(word[n])))
		}
	}
	s.i += len(word)
	return k, nil
}
