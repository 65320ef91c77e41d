package wire

import "fmt"

// pythonB64Decode is CPython's binascii.a2b_base64 in non-strict mode, as
// base64.b64decode(s) (validate=False) calls it: non-ASCII text is an
// error; other characters outside the alphabet are skipped; '=' before the
// third character of a quad is skipped; a quad completed by padding ends
// the input (what follows is ignored); a last quad of 1 character, or of 2
// or 3 without its padding, is an error ("Incorrect padding").
func pythonB64Decode(s string) ([]byte, []string, error) {
	out := make([]byte, len(s)/4*3+3)
	n, notes, err := pythonB64DecodeInto(out, s)
	if err != nil {
		return nil, nil, err
	}
	return out[:n], notes, nil
}

// pythonB64DecodeInto is pythonB64Decode writing into out (at least
// len(s)*3/4+3 bytes, or s itself: the output never passes the input).
func pythonB64DecodeInto[T string | []byte](out []byte, s T) (int, []string, error) {
	base := topField("base64")
	lo, hi := 0, len(s)
	for lo < hi && isSpace(s[lo]) {
		lo++
	}
	for hi > lo && isSpace(s[hi-1]) {
		hi--
	}
	for i := lo; i < hi; i++ {
		if s[i] >= 0x80 {
			return 0, nil, payloadErrorf(base, "non-ASCII byte 0x%02x at offset %d (Python's b64decode refuses the text)", s[i], i)
		}
	}
	n := 0
	var quad, pads, skipped int
	var left byte
	stopped := -1
	for i := lo; i < hi; i++ {
		c := s[i]
		if c == '=' {
			if quad >= 2 {
				pads++
				if quad+pads >= 4 {
					stopped = i + 1
					break
				}
			} else {
				skipped++
			}
			continue
		}
		v := b64Value(c)
		if v < 0 {
			skipped++
			continue
		}
		pads = 0
		switch quad {
		case 0:
			left, quad = byte(v), 1
		case 1:
			out[n] = left<<2 | byte(v)>>4
			n++
			left, quad = byte(v)&0x0f, 2
		case 2:
			out[n] = left<<4 | byte(v)>>2
			n++
			left, quad = byte(v)&0x03, 3
		case 3:
			out[n] = left<<6 | byte(v)
			n++
			quad = 0
		}
	}
	if stopped < 0 && quad != 0 {
		if quad == 1 {
			return 0, nil, payloadErrorf(base, "one character past a multiple of 4 (text truncated)")
		}
		return 0, nil, payloadErrorf(base, "incorrect padding (padding missing or text truncated)")
	}
	if n == 0 {
		return 0, nil, payloadErrorf(base, "empty input")
	}
	var notes []string
	if skipped > 0 {
		notes = append(notes, fmt.Sprintf("%d characters outside the base64 alphabet discarded, as Python's b64decode does", skipped))
	}
	if stopped >= 0 && stopped < hi {
		notes = append(notes, fmt.Sprintf("%d characters after the padding ignored, as Python's b64decode does", hi-stopped))
	}
	return n, notes, nil
}

// b64Value is the value of a character of the standard alphabet, or -1.
func b64Value(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '+':
		return 62
	case c == '/':
		return 63
	}
	return -1
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}
