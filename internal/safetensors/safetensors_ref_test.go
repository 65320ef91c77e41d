package safetensors

// The safetensors header parser kvaudit had before internal/jsonscan, on
// encoding/json's tokenizer, kept as the reference the scanner-based
// parser is fuzzed against (FuzzHeaderReference).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvaudit/kvaudit/parse"
)

// A refHeaderParser walks the header's JSON tokens. The accepted grammar has
// fixed depth (object of objects of arrays of numbers), so any deeper
// nesting is rejected at its first token, without recursion.
type refHeaderParser struct {
	path string
	dec  *json.Decoder
}

func (p *refHeaderParser) fail(field, format string, args ...any) *parse.Error {
	return &parse.Error{Format: parse.Safetensors, File: p.path, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// next returns the next token; a syntax error is reported against "header".
func (p *refHeaderParser) next() (json.Token, *parse.Error) {
	off := p.dec.InputOffset()
	tok, err := p.dec.Token()
	if err == nil {
		return tok, nil
	}
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return nil, p.fail("header", "invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, p.fail("header", "invalid JSON: unexpected end of the header after byte %d", off)
	default:
		return nil, p.fail("header", "invalid JSON at byte %d: %s", off, strings.TrimPrefix(err.Error(), "json: "))
	}
}

// key returns the next object key, or "" and false at the object's end
// (having consumed the closing brace).
func (p *refHeaderParser) key() (string, bool, *parse.Error) {
	tok, serr := p.next()
	if serr != nil {
		return "", false, serr
	}
	if tok == json.Delim('}') {
		return "", false, nil
	}
	k, ok := tok.(string)
	if !ok { // json.Decoder enforces string keys; keep the check anyway
		return "", false, p.fail("header", "object key is %s, want a string", refDescribe(tok))
	}
	return k, true, nil
}

func refParseHeader(path string, header []byte) (*File, *parse.Error) {
	p := &refHeaderParser{path: path}
	switch {
	case !utf8.Valid(header):
		return nil, p.fail("header", "not valid UTF-8 (at byte %d)", refInvalidUTF8At(header))
	case bytes.HasPrefix(header, []byte("\uFEFF")):
		return nil, p.fail("header", "not a JSON object: starts with a byte order mark")
	case len(header) == 0:
		return nil, p.fail("header", "not a JSON object: the header is empty")
	case header[0] != '{':
		return nil, p.fail("header", "not a JSON object: starts with %q", refPrefix(header))
	}
	if msg := refCheckSurrogates(header); msg != "" {
		return nil, p.fail("header", "%s", msg)
	}
	p.dec = json.NewDecoder(bytes.NewReader(header))
	p.dec.UseNumber()
	if _, serr := p.next(); serr != nil { // the '{' checked above
		return nil, serr
	}
	s := &File{Path: path}
	seen := make(map[string]bool)
	sawMetadata := false
	for {
		name, ok, serr := p.key()
		if serr != nil {
			return nil, serr
		}
		if !ok {
			break
		}
		if name == "__metadata__" {
			if sawMetadata {
				return nil, p.fail("metadata", "duplicate key \"__metadata__\"")
			}
			sawMetadata = true
			if s.Metadata, serr = p.metadata(); serr != nil {
				return nil, serr
			}
			continue
		}
		if strings.EqualFold(name, "__metadata__") {
			return nil, p.fail(fmt.Sprintf("tensors[%q]", name), "keys are case-sensitive: metadata goes under \"__metadata__\"")
		}
		if seen[name] {
			return nil, p.fail(fmt.Sprintf("tensors[%q]", name), "duplicate tensor name")
		}
		seen[name] = true
		t, serr := p.tensor(name)
		if serr != nil {
			return nil, serr
		}
		s.Tensors = append(s.Tensors, t)
	}
	end := p.dec.InputOffset()
	if _, err := p.dec.Token(); err != io.EOF {
		return nil, p.fail("header", "trailing data after the header object, which ends at byte %d (only spaces may pad the header)", end)
	}
	return s, nil
}

// metadata parses the value of "__metadata__": null or an object of strings.
func (p *refHeaderParser) metadata() (map[string]string, *parse.Error) {
	tok, serr := p.next()
	if serr != nil {
		return nil, serr
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('{') {
		return nil, p.fail("metadata", "got %s, want an object of strings", refDescribe(tok))
	}
	m := make(map[string]string)
	for {
		k, ok, serr := p.key()
		if serr != nil {
			return nil, serr
		}
		if !ok {
			return m, nil
		}
		field := fmt.Sprintf("metadata[%q]", k)
		if _, dup := m[k]; dup {
			return nil, p.fail(field, "duplicate key")
		}
		tok, serr := p.next()
		if serr != nil {
			return nil, serr
		}
		v, ok := tok.(string)
		if !ok {
			return nil, p.fail(field, "got %s, want a string", refDescribe(tok))
		}
		m[k] = v
	}
}

// tensor parses one tensor entry: an object with exactly the keys dtype,
// shape and data_offsets.
func (p *refHeaderParser) tensor(name string) (TensorInfo, *parse.Error) {
	t := TensorInfo{Name: name}
	entry := fmt.Sprintf("tensors[%q]", name)
	tok, serr := p.next()
	if serr != nil {
		return t, serr
	}
	if tok != json.Delim('{') {
		return t, p.fail(entry, "got %s, want an object with dtype, shape and data_offsets", refDescribe(tok))
	}
	var sawDtype, sawShape, sawOffsets bool
	for {
		k, ok, serr := p.key()
		if serr != nil {
			return t, serr
		}
		if !ok {
			break
		}
		field := entry + "." + k
		dup := false
		switch k {
		case "dtype":
			dup, sawDtype = sawDtype, true
		case "shape":
			dup, sawShape = sawShape, true
		case "data_offsets":
			dup, sawOffsets = sawOffsets, true
		default:
			msg := fmt.Sprintf("unknown key %q", k)
			for _, want := range []string{"dtype", "shape", "data_offsets"} {
				if strings.EqualFold(k, want) {
					msg += fmt.Sprintf(" (keys are case-sensitive: did you mean %q?)", want)
				}
			}
			return t, p.fail(entry, "%s", msg)
		}
		if dup {
			return t, p.fail(entry, "duplicate key %q", k)
		}
		switch k {
		case "dtype":
			tok, serr := p.next()
			if serr != nil {
				return t, serr
			}
			s, ok := tok.(string)
			if !ok {
				return t, p.fail(field, "got %s, want a dtype name", refDescribe(tok))
			}
			d, err := ParseDtype(s)
			if err != nil {
				return t, p.fail(field, "%v", err)
			}
			t.Dtype = d
		case "shape":
			if t.Shape, serr = p.ints(field, -1); serr != nil {
				return t, serr
			}
		case "data_offsets":
			off, serr := p.ints(field, 2)
			if serr != nil {
				return t, serr
			}
			t.Begin, t.End = off[0], off[1]
		}
	}
	switch {
	case !sawDtype:
		return t, p.fail(entry, "missing key \"dtype\"")
	case !sawShape:
		return t, p.fail(entry, "missing key \"shape\"")
	case !sawOffsets:
		return t, p.fail(entry, "missing key \"data_offsets\"")
	}
	return t, nil
}

// ints parses an array of integers in [0, 2^63-1]; with want >= 0 it must
// hold exactly want of them.
func (p *refHeaderParser) ints(field string, want int) ([]int64, *parse.Error) {
	tok, serr := p.next()
	if serr != nil {
		return nil, serr
	}
	if tok != json.Delim('[') {
		return nil, p.fail(field, "got %s, want an array of non-negative integers", refDescribe(tok))
	}
	vals := []int64{}
	for {
		tok, serr := p.next()
		if serr != nil {
			return nil, serr
		}
		if tok == json.Delim(']') {
			break
		}
		if want >= 0 && len(vals) == want {
			return nil, p.fail(field, "want exactly %d values [begin, end], got more", want)
		}
		num, ok := tok.(json.Number)
		if !ok {
			if tok == json.Delim('[') || tok == json.Delim('{') {
				return nil, p.fail(field, "got %s nested in the array, want a non-negative integer", refDescribe(tok))
			}
			return nil, p.fail(field, "got %s, want a non-negative integer", refDescribe(tok))
		}
		v, msg := refParseInt(string(num))
		if msg != "" {
			return nil, p.fail(field, "%s", msg)
		}
		vals = append(vals, v)
	}
	if want >= 0 && len(vals) != want {
		return nil, p.fail(field, "want exactly %d values [begin, end], got %d", want, len(vals))
	}
	return vals, nil
}

// refParseInt parses a JSON number that must be an integer in [0, 2^63-1];
// it returns a message saying why not otherwise.
func refParseInt(s string) (int64, string) {
	if strings.ContainsAny(s, ".eE") {
		return 0, fmt.Sprintf("got %s, want a non-negative integer (not a float)", s)
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Sprintf("got negative %s, want a non-negative integer", s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Sprintf("%s exceeds 2^63-1", s)
		}
		return 0, fmt.Sprintf("got %s, want a non-negative integer", s)
	}
	return v, ""
}

func refDescribe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' || v == '}' {
			return "an object"
		}
		return "an array"
	case string:
		return fmt.Sprintf("string %q", refTruncate(v))
	case json.Number:
		return "number " + refTruncate(string(v))
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

func refTruncate(s string) string {
	if len(s) <= 40 {
		return s
	}
	i := 40
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// refPrefix returns the first few bytes of b for an error message.
func refPrefix(b []byte) string {
	return refTruncate(string(b[:min(len(b), 16)]))
}

func refInvalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// refCheckSurrogates rejects \u escapes that encode a lone UTF-16 surrogate,
// which encoding/json silently turns into U+FFFD but the reference loader
// (serde_json) rejects. A backslash is only valid JSON inside a string, so
// scanning every backslash escape needs no string tracking.
func refCheckSurrogates(b []byte) string {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // skip the escaped character (a quote or backslash)
			continue
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if r2, ok := hex4(i + 6); !ok || r2 < 0xDC00 || r2 >= 0xE000 {
				return fmt.Sprintf("invalid JSON at byte %d: lone UTF-16 surrogate %s in a string", i, b[i:i+6])
			}
			i += 11
		case r >= 0xDC00 && r < 0xE000:
			return fmt.Sprintf("invalid JSON at byte %d: lone UTF-16 surrogate %s in a string", i, b[i:i+6])
		default:
			i += 5
		}
	}
	return ""
}
