package nixl

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/jsonscan"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
)

// The Reader's token level: the bytes, strings, numbers, handles, arrays
// and objects of one JSON line, each bounded, each error naming the line
// and field (log.go reads records from them).

// errf is a *parse.Error (parse.NIXLLog) at the current line.
func (r *Reader) errf(field, format string, args ...any) error {
	return &parse.Error{Format: parse.NIXLLog, File: r.name, Line: r.line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// scanErr words an error of the scanner as the reader does, naming field;
// the underlying reader's errors are returned as they are.
func (r *Reader) scanErr(field string, err error) error {
	e, ok := err.(*jsonscan.Error)
	if !ok {
		return err
	}
	switch e.Code {
	case jsonscan.ErrEOF:
		return r.errf(field, "the line ends early (a truncated log?)")
	case jsonscan.ErrLineEnd:
		return r.errf(field, "the line ends early")
	case jsonscan.ErrControl:
		return r.errf(field, "a control character (0x%02x) inside a string", e.Char)
	case jsonscan.ErrEscape:
		return r.errf(field, "unknown escape \\%c in a string", e.Char)
	case jsonscan.ErrHex:
		return r.errf(field, "a \\u escape with %q, not 4 hex digits", e.Char)
	case jsonscan.ErrUTF8:
		return r.errf(field, "a string that is not valid UTF-8")
	case jsonscan.ErrLongString:
		return r.errf(field, "a string longer than %d bytes", MaxString)
	case jsonscan.ErrNegative:
		return r.errf(field, "a negative number")
	case jsonscan.ErrFraction:
		return r.errf(field, "a number with a fraction or an exponent: want an integer")
	case jsonscan.ErrLeadingZero:
		return r.errf(field, "a number with a leading zero")
	case jsonscan.ErrRange:
		return r.errf(field, "a number larger than %d", e.Limit)
	case jsonscan.ErrChar: // Uint's first byte
		return r.errf(field, "want a number, got %q", e.Char)
	}
	return r.errf(field, "%v", e)
}

// peek skips whitespace within a line and returns the next byte,
// unconsumed.
func (r *Reader) peek(field string) (byte, error) {
	c, err := r.sc.Peek()
	if err != nil {
		return 0, r.scanErr(field, err)
	}
	return c, nil
}

// ws skips whitespace within a line and returns the next byte, consumed.
func (r *Reader) ws(field string) (byte, error) {
	c, err := r.peek(field)
	if err == nil {
		r.sc.Advance()
	}
	return c, err
}

func (r *Reader) expect(want byte, field string) error {
	c, err := r.ws(field)
	if err != nil {
		return err
	}
	if c != want {
		return r.errf(field, "want %q, got %q", want, c)
	}
	return nil
}

// str reads a JSON string (after whitespace), at most MaxString bytes.
func (r *Reader) str(field string) (string, error) {
	b, err := r.strBytes(field)
	return string(b), err
}

// strBytes reads a JSON string (after whitespace) into the scanner's
// bytes (valid until the next read).
func (r *Reader) strBytes(field string) ([]byte, error) {
	c, err := r.peek(field)
	if err != nil {
		return nil, err
	}
	if c != '"' {
		r.sc.Advance()
		return nil, r.errf(field, "want %q, got %q", '"', c)
	}
	b, err := r.sc.String()
	if err != nil {
		return nil, r.scanErr(field, err)
	}
	return b, nil
}

// knownKeys are the keys of the format, returned without a copy.
var knownKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"format", "agent", "tp_rank", "pp_rank", "lease_s", "engine_id", "t_mono_ns", "t_wall_ns",
		"op", "mem", "descs", "handle", "id", "kind", "local", "local_ids", "remote", "remote_ids", "local_descs",
		"remote_descs", "remote_agent", "notif", "request", "state", "msg", "notifs", "call"} {
		m[k] = k
	}
	return m
}()

// keyStr reads an object's key (after whitespace).
func (r *Reader) keyStr() (string, error) {
	b, err := r.strBytes("")
	if err != nil {
		return "", err
	}
	if k, ok := knownKeys[string(b)]; ok {
		return k, nil
	}
	return string(b), nil
}

// uint reads a JSON non-negative integer (no fraction, exponent or
// leading zero) of at most max, after whitespace.
func (r *Reader) uint(field string, max uint64) (uint64, error) {
	if _, err := r.peek(field); err != nil {
		return 0, err
	}
	v, err := r.sc.Uint(max)
	if err != nil {
		return 0, r.scanErr(field, err)
	}
	return v, nil
}

func (r *Reader) int(field string, max uint64) (int, error) {
	v, err := r.uint(field, max)
	return int(v), err
}

// null reads null, the next byte being its 'n'; any other word is
// refused with msg.
func (r *Reader) null(field, msg string) error {
	if _, err := r.sc.Literal(); err != nil {
		if e, ok := err.(*jsonscan.Error); ok && e.Code != jsonscan.ErrEOF && e.Code != jsonscan.ErrLineEnd {
			return r.errf(field, "%s", msg)
		}
		return r.scanErr(field, err)
	}
	return nil
}

// handle reads a handle number or null (0).
func (r *Reader) handle(field string) (int, error) {
	c, err := r.peek(field)
	if err != nil {
		return 0, err
	}
	if c == 'n' {
		return 0, r.null(field, "want a handle number or null")
	}
	v, err := r.uint(field, 1<<62)
	if err == nil && v == 0 {
		return 0, r.errf(field, "handle 0: handles are numbered from 1")
	}
	return int(v), err
}

// array reads a JSON array, calling elem for each element with its first
// byte (after whitespace, not consumed); at most MaxArray elements.
func (r *Reader) array(field string, elem func(i int, first byte) error) error {
	if err := r.expect('[', field); err != nil {
		return err
	}
	c, err := r.peek(field)
	if err != nil {
		return err
	}
	if c == ']' {
		r.sc.Advance()
		return nil
	}
	for i := 0; ; i++ {
		if i >= MaxArray {
			return r.errf(field, "more than %d elements", MaxArray)
		}
		if err := elem(i, c); err != nil {
			return err
		}
		c, err = r.ws(field)
		if err != nil {
			return err
		}
		switch c {
		case ']':
			return nil
		case ',':
			if c, err = r.peek(field); err != nil {
				return err
			}
		default:
			return r.errf(field, "want ',' or ']' after element %d, got %q", i, c)
		}
	}
}

// descs reads an array of [ADDR, LEN, DEV] descriptors, handing each to
// add. Its elements' field names are built only for an error.
func (r *Reader) descs(field string, add func(Desc)) error {
	return r.array(field, func(i int, first byte) error {
		err := r.desc(first, add)
		if le := parse.As(err, parse.NIXLLog); le != nil {
			le.Field = field + fmt.Sprintf("[%d]", i) + strings.TrimPrefix(le.Field, "[]")
		}
		return err
	})
}

// desc reads one descriptor, first being its first byte; errors name its
// field "[]..." (descs fills in the index).
func (r *Reader) desc(first byte, add func(Desc)) error {
	r.sc.Advance()
	if first != '[' {
		return r.errf("[]", "want a descriptor [ADDR, LEN, DEV], got %q", first)
	}
	addr, s, err := r.hexAddr("[][0]")
	if err != nil {
		return err
	}
	if err := r.expect(',', "[]"); err != nil {
		return err
	}
	n, err := r.int("[][1]", 1<<62)
	if err != nil {
		return err
	}
	if err := r.expect(',', "[]"); err != nil {
		return err
	}
	dev, err := r.int("[][2]", 1<<31)
	if err != nil {
		return err
	}
	if err := r.expect(']', "[]"); err != nil {
		return err
	}
	if uint64(n) > ^uint64(0)-addr {
		if s == "" {
			s = "0x" + strconv.FormatUint(addr, 16)
		}
		return r.errf("[]", "address %q and length %d pass the end of the address space", s, n)
	}
	add(Desc{Addr: addr, Len: uint64(n), Dev: uint32(dev)})
	return nil
}

// hexAddr reads an address string: "0x" and 1 to 16 hex digits, without
// a copy when it is one; otherwise the string is parsed again for the
// error, which quotes it (s, "" on the fast path).
func (r *Reader) hexAddr(field string) (addr uint64, s string, err error) {
	b, err := r.strBytes(field)
	if err != nil {
		return 0, "", err
	}
	if len(b) > 2 && len(b) <= 18 && b[0] == '0' && b[1] == 'x' {
		var v uint64
		ok := true
		for _, c := range b[2:] {
			d, isHex := hexDigit(c)
			if !isHex {
				ok = false
				break
			}
			v = v<<4 | uint64(d)
		}
		if ok {
			return v, "", nil
		}
	}
	s = string(b)
	if addr, err = layout.ParseHex64(s); err != nil {
		return 0, "", r.errf(field, "address %v", err)
	}
	return addr, s, nil
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ids reads an array of indices into dst.
func (r *Reader) ids(field string, dst []int) ([]int, error) {
	dst = dst[:0]
	err := r.array(field, func(i int, first byte) error {
		v, err := r.sc.Uint(MaxArray * 64)
		if err != nil {
			return r.scanErr(fmt.Sprintf("%s[%d]", field, i), err)
		}
		dst = append(dst, int(v))
		return nil
	})
	return dst, err
}

// object reads a line's object: each key (the first must be first) is
// read and handed to value, which reads its value; a key twice is an
// error. After the object comes the end of the line or of the input.
func (r *Reader) object(first string, value func(key string) error) error {
	if err := r.expect('{', ""); err != nil {
		return err
	}
	r.keys = r.keys[:0]
	for i := 0; ; i++ {
		key, err := r.keyStr()
		if err != nil {
			return err
		}
		if i == 0 && key != first {
			return r.errf(key, "the first key is %q, want %q", key, first)
		}
		if r.keys.has(key) {
			return r.errf(key, "the key appears twice")
		}
		r.keys = append(r.keys, key)
		if err := r.expect(':', key); err != nil {
			return err
		}
		if err := value(key); err != nil {
			return err
		}
		c, err := r.ws(key)
		if err != nil {
			return err
		}
		if c == '}' {
			break
		}
		if c != ',' {
			return r.errf(key, "want ',' or '}' after the value, got %q", c)
		}
	}
	c, eof, err := r.sc.EndLine()
	switch {
	case err != nil:
		return err
	case eof:
		r.eof = true
	case c != '\n':
		return r.errf("", "%q after the line's object (one object per line)", c)
	}
	return nil
}
