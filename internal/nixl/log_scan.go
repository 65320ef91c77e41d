package nixl

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

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

// byteAt reads one byte; end of input inside a line is an error.
func (r *Reader) byteAt(field string) (byte, error) {
	c, err := r.r.ReadByte()
	if err == io.EOF {
		return 0, r.errf(field, "the line ends early (a truncated log?)")
	}
	if err != nil {
		return 0, err
	}
	if c == '\n' {
		return 0, r.errf(field, "the line ends early")
	}
	return c, nil
}

// ws skips JSON whitespace within a line and returns the next byte.
func (r *Reader) ws(field string) (byte, error) {
	for {
		c, err := r.byteAt(field)
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\r' {
			return c, nil
		}
	}
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
	if err := r.expect('"', field); err != nil {
		return "", err
	}
	return r.strBody(field)
}

// strBody reads the rest of a JSON string after its opening quote.
func (r *Reader) strBody(field string) (string, error) {
	b, err := r.strBytes(field)
	if err != nil {
		return "", err
	}
	return string(b), nil
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
	if err := r.expect('"', ""); err != nil {
		return "", err
	}
	b, err := r.strBytes("")
	if err != nil {
		return "", err
	}
	if k, ok := knownKeys[string(b)]; ok {
		return k, nil
	}
	return string(b), nil
}

// strBytes reads the rest of a JSON string after its opening quote into
// the reader's buffer (valid until the next read).
func (r *Reader) strBytes(field string) ([]byte, error) {
	b := r.sb[:0]
	defer func() { r.sb = b[:0] }()
	for {
		c, err := r.byteAt(field)
		if err != nil {
			return nil, err
		}
		switch {
		case c == '"':
			if !utf8.Valid(b) {
				return nil, r.errf(field, "a string that is not valid UTF-8")
			}
			return b, nil
		case c < 0x20:
			return nil, r.errf(field, "a control character (0x%02x) inside a string", c)
		case c == '\\':
			e, err := r.byteAt(field)
			if err != nil {
				return nil, err
			}
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				v, err := r.hex4(field)
				if err != nil {
					return nil, err
				}
				ch := rune(v)
				if utf16.IsSurrogate(ch) {
					// A pair, or a lone surrogate (as Python writes one).
					if p, _ := r.r.Peek(2); len(p) == 2 && p[0] == '\\' && p[1] == 'u' {
						r.r.Discard(2)
						lo, err := r.hex4(field)
						if err != nil {
							return nil, err
						}
						if d := utf16.DecodeRune(ch, rune(lo)); d != utf8.RuneError {
							b = utf8.AppendRune(b, d)
							break
						}
						b = utf8.AppendRune(b, utf8.RuneError)
						ch = rune(lo)
						if utf16.IsSurrogate(ch) {
							ch = utf8.RuneError
						}
					} else {
						ch = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, ch)
			default:
				return nil, r.errf(field, "unknown escape \\%c in a string", e)
			}
		default:
			b = append(b, c)
		}
		if len(b) > MaxString {
			return nil, r.errf(field, "a string longer than %d bytes", MaxString)
		}
	}
}

func (r *Reader) hex4(field string) (uint16, error) {
	var v uint16
	for range 4 {
		c, err := r.byteAt(field)
		if err != nil {
			return 0, err
		}
		d, ok := hexDigit(c)
		if !ok {
			return 0, r.errf(field, "a \\u escape with %q, not 4 hex digits", c)
		}
		v = v<<4 | uint16(d)
	}
	return v, nil
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

// uint reads a JSON non-negative integer (no fraction, exponent or
// leading zero) of at most max; first is its first byte, already read.
func (r *Reader) uintFrom(first byte, field string, max uint64) (uint64, error) {
	if first == '-' {
		return 0, r.errf(field, "a negative number")
	}
	if first < '0' || first > '9' {
		return 0, r.errf(field, "want a number, got %q", first)
	}
	v := uint64(first - '0')
	for {
		p, err := r.r.Peek(1)
		if err != nil || len(p) == 0 {
			break
		}
		c := p[0]
		if c == '.' || c == 'e' || c == 'E' {
			return 0, r.errf(field, "a number with a fraction or an exponent: want an integer")
		}
		if c < '0' || c > '9' {
			break
		}
		if first == '0' {
			return 0, r.errf(field, "a number with a leading zero")
		}
		r.r.Discard(1)
		if v > (max-uint64(c-'0'))/10 {
			return 0, r.errf(field, "a number larger than %d", max)
		}
		v = v*10 + uint64(c-'0')
	}
	return v, nil
}

func (r *Reader) int(field string, max uint64) (int, error) {
	c, err := r.ws(field)
	if err != nil {
		return 0, err
	}
	v, err := r.uintFrom(c, field, max)
	return int(v), err
}

// handle reads a handle number or null (0).
func (r *Reader) handle(field string) (int, error) {
	c, err := r.ws(field)
	if err != nil {
		return 0, err
	}
	if c == 'n' {
		for _, want := range []byte("ull") {
			c, err := r.byteAt(field)
			if err != nil {
				return 0, err
			}
			if c != want {
				return 0, r.errf(field, "want a handle number or null")
			}
		}
		return 0, nil
	}
	v, err := r.uintFrom(c, field, 1<<62)
	if err == nil && v == 0 {
		return 0, r.errf(field, "handle 0: handles are numbered from 1")
	}
	return int(v), err
}

// array reads a JSON array, calling elem for each element (after the
// reader has skipped whitespace up to it); at most MaxArray elements.
func (r *Reader) array(field string, elem func(i int, first byte) error) error {
	if err := r.expect('[', field); err != nil {
		return err
	}
	c, err := r.ws(field)
	if err != nil {
		return err
	}
	if c == ']' {
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
			if c, err = r.ws(field); err != nil {
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

// desc reads one descriptor; errors name its field "[]..." (descs fills
// in the index).
func (r *Reader) desc(first byte, add func(Desc)) error {
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

// hexAddr reads an address string: "0x" and 1 to 16 hex digits, on a fast
// path when the bytes are there; otherwise as a string, for the error to
// quote it (s, "" on the fast path).
func (r *Reader) hexAddr(field string) (addr uint64, s string, err error) {
	c, err := r.ws(field)
	if err != nil {
		return 0, "", err
	}
	if c == '"' {
		if p, _ := r.r.Peek(19); len(p) >= 4 && p[0] == '0' && p[1] == 'x' {
			var v uint64
			for i := 2; i < len(p) && i < 19; i++ {
				if p[i] == '"' && i > 2 {
					r.r.Discard(i + 1)
					return v, "", nil
				}
				d, ok := hexDigit(p[i])
				if !ok || i == 18 {
					break
				}
				v = v<<4 | uint64(d)
			}
		}
	} else {
		return 0, "", r.errf(field, "want '\"', got %q", c)
	}
	if s, err = r.strBody(field); err != nil {
		return 0, "", err
	}
	if addr, err = layout.ParseHex64(s); err != nil {
		return 0, "", r.errf(field, "address %v", err)
	}
	return addr, s, nil
}

// ids reads an array of indices into dst.
func (r *Reader) ids(field string, dst []int) ([]int, error) {
	dst = dst[:0]
	err := r.array(field, func(i int, first byte) error {
		v, err := r.uintFrom(first, field+"[]", MaxArray*64)
		if le := parse.As(err, parse.NIXLLog); le != nil {
			le.Field = fmt.Sprintf("%s[%d]", field, i)
		}
		dst = append(dst, int(v))
		return err
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
	for {
		c, err := r.r.ReadByte()
		if err == io.EOF {
			r.eof = true
			return nil
		}
		if err != nil {
			return err
		}
		switch c {
		case '\n':
			return nil
		case ' ', '\t', '\r':
			continue
		}
		return r.errf("", "%q after the line's object (one object per line)", c)
	}
}
