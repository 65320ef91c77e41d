package layout

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvaudit/kvaudit/parse"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxSafetensorsHeader is the largest header, in bytes, that
// ParseSafetensors accepts (the reference loader's limit).
const MaxSafetensorsHeader = 100_000_000

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name       string
	Dtype      Dtype
	Shape      []int64
	Begin, End int64  // byte offsets in the data section (after the header)
	Data       []byte // the tensor's bytes: a sub-slice of the file, never copied
}

// Safetensors is a parsed, fully validated safetensors file.
type Safetensors struct {
	Path       string
	Metadata   map[string]string // the header's "__metadata__"; nil when absent or null
	Tensors    []TensorInfo      // sorted by Begin (then End, then Name)
	DataOffset int64             // file offset of the data section: 8 + the header length

	index   map[string]int
	mapping *Mapping
}

// OpenSafetensors maps the file at path read-only and parses it with
// ParseSafetensors. The tensors' Data slices point into the mapping and are
// valid until Close. A malformed file (including an empty one) is a
// *parse.Error (parse.Safetensors); failing to open or map the file is an error from
// mapFile; a file truncated while it is parsed is a *FaultError.
func OpenSafetensors(path string) (*Safetensors, error) {
	m, err := mapFile(path)
	if err != nil && !errors.Is(err, errEmptyFile) {
		return nil, err
	}
	return openSafetensorsMapping(path, m)
}

// openSafetensorsMapping parses a mapped file (nil for an empty one) and
// takes ownership of the mapping.
func openSafetensorsMapping(path string, m *Mapping) (*Safetensors, error) {
	if m == nil {
		return ParseSafetensors(path, nil)
	}
	var s *Safetensors
	err := Guard(path, func() error {
		var perr error
		s, perr = ParseSafetensors(path, m.Data)
		return perr
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	s.mapping = m
	return s, nil
}

// ParseSafetensors parses and validates a whole safetensors file held in
// file, making every check of the reference loader and more: the header
// length, UTF-8 and JSON syntax of the header, no duplicate or unknown keys
// at any level (keys are exact-case), known dtypes, integer shapes and
// offsets, offsets contiguous from 0 without gap or overlap, each tensor's
// size matching its shape and dtype, and the data section ending exactly
// at the end of the file. path is used only in errors. The result refers to
// file without copying it. On error it returns a nil *Safetensors and a
// *parse.Error (parse.Safetensors).
func ParseSafetensors(path string, file []byte) (*Safetensors, error) {
	s, serr := parseSafetensors(path, file)
	if serr != nil {
		return nil, serr
	}
	return s, nil
}

func parseSafetensors(path string, file []byte) (*Safetensors, *parse.Error) {
	fail := func(field, format string, args ...any) *parse.Error {
		return &parse.Error{Format: parse.Safetensors, File: path, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if len(file) < 8 {
		return nil, fail("", "file is %d bytes, too short to hold the 8-byte header length", len(file))
	}
	n := binary.LittleEndian.Uint64(file)
	if n > MaxSafetensorsHeader {
		return nil, fail("", "header length %d exceeds the %d-byte limit", n, MaxSafetensorsHeader)
	}
	if n > uint64(len(file)-8) {
		return nil, fail("", "header length %d runs past the end of the file (8+%d > %d bytes)", n, n, len(file))
	}
	header := file[8 : 8+n]
	data := file[8+n:]

	s, ok := (*Safetensors)(nil), false
	if utf8.Valid(header) && stCheckSurrogates(header) == "" {
		s, ok = parseHeaderFast(path, header)
	}
	if !ok {
		var serr *parse.Error
		if s, serr = parseSafetensorsHeader(path, header); serr != nil {
			return nil, serr
		}
	}
	slices.SortFunc(s.Tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), strings.Compare(a.Name, b.Name))
	})
	var pos int64 // end of the previous tensor
	prev := ""
	for i := range s.Tensors {
		t := &s.Tensors[i]
		if t.Begin != pos || t.Begin > t.End {
			field := fmt.Sprintf("tensors[%q].data_offsets", t.Name)
			switch {
			case t.Begin > t.End:
				return nil, fail(field, "begin %d is after end %d", t.Begin, t.End)
			case i == 0:
				return nil, fail(field, "data must start at offset 0, the first tensor begins at %d", t.Begin)
			case t.Begin > pos:
				return nil, fail(field, "gap: tensor %q ends at %d, this one begins at %d", prev, pos, t.Begin)
			default:
				return nil, fail(field, "overlaps tensor %q, which ends at %d, this one begins at %d", prev, pos, t.Begin)
			}
		}
		size, err := t.Dtype.ByteSize(t.Shape)
		if err != nil {
			return nil, fail(fmt.Sprintf("tensors[%q].shape", t.Name), "%v", err)
		}
		if size != t.End-t.Begin {
			return nil, fail(fmt.Sprintf("tensors[%q]", t.Name), "shape %v of %s needs %d bytes, data_offsets [%d, %d] hold %d",
				t.Shape, t.Dtype.Name, size, t.Begin, t.End, t.End-t.Begin)
		}
		pos, prev = t.End, t.Name
	}
	if dataLen := int64(len(data)); pos < dataLen {
		return nil, fail("data", "%d trailing bytes after the last tensor (tensors end at %d, the data section holds %d bytes)", dataLen-pos, pos, dataLen)
	} else if pos > dataLen {
		return nil, fail("data", "tensors need %d bytes but the data section holds only %d (past the end of the file: truncated?)", pos, dataLen)
	}
	s.DataOffset = int64(8 + n)
	if s.index == nil {
		s.index = make(map[string]int, len(s.Tensors))
	}
	for i := range s.Tensors {
		t := &s.Tensors[i]
		t.Data = data[t.Begin:t.End:t.End]
		s.index[t.Name] = i
	}
	return s, nil
}

// Tensor returns the tensor with exactly the given name.
func (s *Safetensors) Tensor(name string) (TensorInfo, bool) {
	i, ok := s.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return s.Tensors[i], true
}

// Close unmaps a file opened with OpenSafetensors; the tensors' Data slices
// must not be used afterwards. For a result of ParseSafetensors, and when
// called again, it does nothing.
func (s *Safetensors) Close() error {
	if s == nil || s.mapping == nil {
		return nil
	}
	m := s.mapping
	s.mapping = nil
	return m.Close()
}

// A stHeaderParser walks the header's JSON tokens. The accepted grammar has
// fixed depth (object of objects of arrays of numbers), so any deeper
// nesting is rejected at its first token, without recursion.
type stHeaderParser struct {
	path string
	dec  *json.Decoder
}

func (p *stHeaderParser) fail(field, format string, args ...any) *parse.Error {
	return &parse.Error{Format: parse.Safetensors, File: p.path, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// next returns the next token; a syntax error is reported against "header".
func (p *stHeaderParser) next() (json.Token, *parse.Error) {
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
func (p *stHeaderParser) key() (string, bool, *parse.Error) {
	tok, serr := p.next()
	if serr != nil {
		return "", false, serr
	}
	if tok == json.Delim('}') {
		return "", false, nil
	}
	k, ok := tok.(string)
	if !ok { // json.Decoder enforces string keys; keep the check anyway
		return "", false, p.fail("header", "object key is %s, want a string", stDescribe(tok))
	}
	return k, true, nil
}

func parseSafetensorsHeader(path string, header []byte) (*Safetensors, *parse.Error) {
	p := &stHeaderParser{path: path}
	switch {
	case !utf8.Valid(header):
		return nil, p.fail("header", "not valid UTF-8 (at byte %d)", stInvalidUTF8At(header))
	case bytes.HasPrefix(header, []byte("\uFEFF")):
		return nil, p.fail("header", "not a JSON object: starts with a byte order mark")
	case len(header) == 0:
		return nil, p.fail("header", "not a JSON object: the header is empty")
	case header[0] != '{':
		return nil, p.fail("header", "not a JSON object: starts with %q", stPrefix(header))
	}
	if msg := stCheckSurrogates(header); msg != "" {
		return nil, p.fail("header", "%s", msg)
	}
	p.dec = json.NewDecoder(bytes.NewReader(header))
	p.dec.UseNumber()
	if _, serr := p.next(); serr != nil { // the '{' checked above
		return nil, serr
	}
	s := &Safetensors{Path: path}
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
func (p *stHeaderParser) metadata() (map[string]string, *parse.Error) {
	tok, serr := p.next()
	if serr != nil {
		return nil, serr
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('{') {
		return nil, p.fail("metadata", "got %s, want an object of strings", stDescribe(tok))
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
			return nil, p.fail(field, "got %s, want a string", stDescribe(tok))
		}
		m[k] = v
	}
}

// tensor parses one tensor entry: an object with exactly the keys dtype,
// shape and data_offsets.
func (p *stHeaderParser) tensor(name string) (TensorInfo, *parse.Error) {
	t := TensorInfo{Name: name}
	entry := fmt.Sprintf("tensors[%q]", name)
	tok, serr := p.next()
	if serr != nil {
		return t, serr
	}
	if tok != json.Delim('{') {
		return t, p.fail(entry, "got %s, want an object with dtype, shape and data_offsets", stDescribe(tok))
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
				return t, p.fail(field, "got %s, want a dtype name", stDescribe(tok))
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
func (p *stHeaderParser) ints(field string, want int) ([]int64, *parse.Error) {
	tok, serr := p.next()
	if serr != nil {
		return nil, serr
	}
	if tok != json.Delim('[') {
		return nil, p.fail(field, "got %s, want an array of non-negative integers", stDescribe(tok))
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
				return nil, p.fail(field, "got %s nested in the array, want a non-negative integer", stDescribe(tok))
			}
			return nil, p.fail(field, "got %s, want a non-negative integer", stDescribe(tok))
		}
		v, msg := stParseInt(string(num))
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

// stParseInt parses a JSON number that must be an integer in [0, 2^63-1];
// it returns a message saying why not otherwise.
func stParseInt(s string) (int64, string) {
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

func stDescribe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' || v == '}' {
			return "an object"
		}
		return "an array"
	case string:
		return fmt.Sprintf("string %q", stTruncate(v))
	case json.Number:
		return "number " + stTruncate(string(v))
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

func stTruncate(s string) string {
	if len(s) <= 40 {
		return s
	}
	i := 40
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// stPrefix returns the first few bytes of b for an error message.
func stPrefix(b []byte) string {
	return stTruncate(string(b[:min(len(b), 16)]))
}

func stInvalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// stCheckSurrogates rejects \u escapes that encode a lone UTF-16 surrogate,
// which encoding/json silently turns into U+FFFD but the reference loader
// (serde_json) rejects. A backslash is only valid JSON inside a string, so
// scanning every backslash escape needs no string tracking.
func stCheckSurrogates(b []byte) string {
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

// A TensorData is a tensor to write with writeSafetensors.
type TensorData struct {
	Name  string
	Dtype Dtype
	Shape []int64
	Data  []byte // exactly Dtype.ByteSize(Shape) bytes
}

// writeSafetensors writes a safetensors file that ParseSafetensors and the
// reference loader accept: the header's keys in a deterministic order
// ("__metadata__" first, with its keys sorted, when metadata is non-empty;
// then the tensors in the given order), the header padded with spaces to a
// multiple of 8 bytes as the reference writer does, and the tensors' data
// contiguous from offset 0 in the given order. It checks the input first
// and writes nothing when it is invalid, returning a *parse.Error with
// an empty Path: a tensor named "__metadata__", a repeated name, a name or
// metadata string that is not UTF-8, a dtype that is not exactly a
// safetensors dtype, a shape whose size does not match len(Data). Errors
// from w are returned as they are.
func writeSafetensors(w io.Writer, metadata map[string]string, tensors []TensorData) error {
	fail := func(field, format string, args ...any) error {
		return &parse.Error{Format: parse.Safetensors, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	var h bytes.Buffer
	str := func(s string) {
		b, _ := json.Marshal(s) // a string always marshals
		h.Write(b)
	}
	h.WriteByte('{')
	if len(metadata) > 0 {
		h.WriteString(`"__metadata__":{`)
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if !utf8.ValidString(k) || !utf8.ValidString(metadata[k]) {
				return fail(fmt.Sprintf("metadata[%q]", k), "not valid UTF-8")
			}
			if i > 0 {
				h.WriteByte(',')
			}
			str(k)
			h.WriteByte(':')
			str(metadata[k])
		}
		h.WriteByte('}')
	}
	seen := make(map[string]bool, len(tensors))
	var offset int64
	for i, t := range tensors {
		entry := fmt.Sprintf("tensors[%q]", t.Name)
		switch {
		case t.Name == "__metadata__":
			return fail(entry, "the name is reserved for metadata")
		case !utf8.ValidString(t.Name):
			return fail(entry, "name is not valid UTF-8")
		case seen[t.Name]:
			return fail(entry, "duplicate tensor name")
		}
		seen[t.Name] = true
		d, err := ParseDtype(t.Dtype.Name)
		if err != nil {
			return fail(entry+".dtype", "%v", err)
		}
		if d != t.Dtype {
			return fail(entry+".dtype", "dtype %q with %d bits is not a safetensors dtype (%s has %d bits)", t.Dtype.Name, t.Dtype.Bits, d.Name, d.Bits)
		}
		size, err := d.ByteSize(t.Shape)
		if err != nil {
			return fail(entry+".shape", "%v", err)
		}
		if size != int64(len(t.Data)) {
			return fail(entry, "shape %v of %s needs %d bytes, got %d", t.Shape, d.Name, size, len(t.Data))
		}
		if offset > math.MaxInt64-size {
			return fail(entry, "data section exceeds 2^63-1 bytes")
		}
		if i > 0 || len(metadata) > 0 {
			h.WriteByte(',')
		}
		str(t.Name)
		h.WriteString(`:{"dtype":`)
		str(d.Name)
		h.WriteString(`,"shape":[`)
		for j, dim := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			h.WriteString(strconv.FormatInt(dim, 10))
		}
		fmt.Fprintf(&h, `],"data_offsets":[%d,%d]}`, offset, offset+size)
		offset += size
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	if h.Len() > MaxSafetensorsHeader {
		return fail("header", "header of %d bytes exceeds the %d-byte limit", h.Len(), MaxSafetensorsHeader)
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(h.Len()))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(h.Bytes()); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}
