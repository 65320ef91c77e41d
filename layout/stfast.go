package layout

import (
	"bytes"
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// parseHeaderFast parses a well-formed safetensors header without
// encoding/json: one pass over the bytes, no token per value, strings
// allocated once (tensor names, metadata). It accepts a strict subset of
// what parseSafetensorsHeader accepts and returns the same result for it;
// on anything else (a syntax error, a duplicate or unknown key, a dtype it
// does not know, a number that is not a plain integer) it returns ok false
// and the caller parses again the careful way, for its precise error. A
// 62 MB header is so parsed with little beyond the result itself
// (BenchmarkSafetensorsBigHeader).
func parseHeaderFast(path string, h []byte) (s *Safetensors, ok bool) {
	p := stFast{b: h}
	s = &Safetensors{Path: path}
	n := bytes.Count(h, []byte(`"data_offsets"`))
	s.Tensors = make([]TensorInfo, 0, n)
	s.index = make(map[string]int, n)
	if !p.eat('{') { // no leading space, as the careful parser wants
		return nil, false
	}
	sawMetadata := false
	p.ws()
	if !p.eat('}') {
		for {
			p.ws()
			name, ok := p.str()
			if !ok {
				return nil, false
			}
			p.ws()
			if !p.eat(':') {
				return nil, false
			}
			p.ws()
			if name == "__metadata__" {
				if sawMetadata {
					return nil, false
				}
				sawMetadata = true
				if s.Metadata, ok = p.metadata(); !ok {
					return nil, false
				}
			} else {
				if _, dup := s.index[name]; dup || stEqualFoldMetadata(name) {
					return nil, false
				}
				t, ok := p.tensor(name)
				if !ok {
					return nil, false
				}
				s.index[name] = len(s.Tensors)
				s.Tensors = append(s.Tensors, t)
			}
			p.ws()
			if p.eat('}') {
				break
			}
			if !p.eat(',') {
				return nil, false
			}
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, false
	}
	return s, true
}

func stEqualFoldMetadata(name string) bool {
	return len(name) == len("__metadata__") && bytes.EqualFold([]byte(name), []byte("__metadata__"))
}

type stFast struct {
	b []byte
	i int
}

func (p *stFast) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *stFast) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// lit consumes the literal word.
func (p *stFast) lit(word string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(word)) {
		p.i += len(word)
		return true
	}
	return false
}

// str parses a JSON string (the header is valid UTF-8, checked before).
// A lone surrogate escape is left to the careful parser.
func (p *stFast) str() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, true
		case c == '\\':
			return p.strEscaped(start)
		case c < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

// strEscaped continues str from the first backslash.
func (p *stFast) strEscaped(start int) (string, bool) {
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(buf), true
		case c < 0x20:
			return "", false
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", false
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xDC00 || !p.lit(`\u`) {
					return "", false
				}
				r2, ok := p.hex4()
				if !ok || r2 < 0xDC00 || r2 >= 0xE000 {
					return "", false
				}
				r = utf16.DecodeRune(r, r2)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", false
		}
	}
	return "", false
}

func (p *stFast) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// metadata parses null or an object of strings without duplicate keys.
func (p *stFast) metadata() (map[string]string, bool) {
	if p.lit("null") {
		return nil, true
	}
	if !p.eat('{') {
		return nil, false
	}
	m := make(map[string]string)
	p.ws()
	if p.eat('}') {
		return m, true
	}
	for {
		p.ws()
		k, ok := p.str()
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		p.ws()
		if !p.eat(':') {
			return nil, false
		}
		p.ws()
		v, ok := p.str()
		if !ok {
			return nil, false
		}
		m[k] = v
		p.ws()
		if p.eat('}') {
			return m, true
		}
		if !p.eat(',') {
			return nil, false
		}
	}
}

// tensor parses {"dtype": ..., "shape": [...], "data_offsets": [b, e]}
// in any order, each key exactly once.
func (p *stFast) tensor(name string) (TensorInfo, bool) {
	t := TensorInfo{Name: name}
	if !p.eat('{') {
		return t, false
	}
	var sawDtype, sawShape, sawOffsets bool
	for {
		p.ws()
		switch {
		case p.lit(`"dtype"`) && !sawDtype:
			sawDtype = true
			p.ws()
			if !p.eat(':') {
				return t, false
			}
			p.ws()
			if !p.eat('"') {
				return t, false
			}
			end := bytes.IndexByte(p.b[p.i:], '"')
			if end < 0 {
				return t, false
			}
			d, ok := stFastDtype(p.b[p.i : p.i+end])
			if !ok {
				return t, false
			}
			t.Dtype = d
			p.i += end + 1
		case p.lit(`"shape"`) && !sawShape:
			sawShape = true
			var ok bool
			if t.Shape, ok = p.ints(-1); !ok {
				return t, false
			}
		case p.lit(`"data_offsets"`) && !sawOffsets:
			sawOffsets = true
			off, ok := p.ints(2)
			if !ok {
				return t, false
			}
			t.Begin, t.End = off[0], off[1]
		default:
			return t, false
		}
		p.ws()
		if p.eat('}') {
			break
		}
		if !p.eat(',') {
			return t, false
		}
	}
	return t, sawDtype && sawShape && sawOffsets
}

// stFastDtype looks a dtype name up without allocating.
func stFastDtype(name []byte) (Dtype, bool) {
	for _, d := range safetensorsDtypes {
		if string(name) == d.Name {
			return d, true
		}
	}
	return Dtype{}, false
}

// ints parses `: [n, ...]` of plain non-negative integers (no sign,
// fraction, exponent or leading zero) up to 2^63-1; with want >= 0,
// exactly want of them.
func (p *stFast) ints(want int) ([]int64, bool) {
	p.ws()
	if !p.eat(':') {
		return nil, false
	}
	p.ws()
	if !p.eat('[') {
		return nil, false
	}
	var small [8]int64
	vals := small[:0]
	p.ws()
	if !p.eat(']') {
		for {
			p.ws()
			v, ok := p.uint()
			if !ok {
				return nil, false
			}
			vals = append(vals, v)
			p.ws()
			if p.eat(']') {
				break
			}
			if !p.eat(',') {
				return nil, false
			}
		}
	}
	if want >= 0 && len(vals) != want {
		return nil, false
	}
	return append(make([]int64, 0, len(vals)), vals...), true
}

func (p *stFast) uint() (int64, bool) {
	start := p.i
	var v int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		d := int64(p.b[p.i] - '0')
		if v > (math.MaxInt64-d)/10 {
			return 0, false
		}
		v = v*10 + d
		p.i++
	}
	n := p.i - start
	if n == 0 || (n > 1 && p.b[start] == '0') {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return v, true
}
