// Package safetensors reads and writes safetensors files, the container of
// kvaudit's dumps: the header (through internal/jsonscan, every check of
// the reference loader and more), the dtypes, and a writer whose files the
// reference loader accepts. Errors are *parse.Error (parse.Safetensors).
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvaudit/kvaudit/internal/jsonscan"
	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/parse"
)

// MaxHeader is the largest header, in bytes, that Parse accepts (the
// reference loader's limit).
const MaxHeader = 100_000_000

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name       string
	Dtype      Dtype
	Shape      []int64
	Begin, End int64  // byte offsets in the data section (after the header)
	Data       []byte // the tensor's bytes: a sub-slice of the file, never copied
}

// File is a parsed, fully validated safetensors file.
type File struct {
	Path       string
	Metadata   map[string]string // the header's "__metadata__"; nil when absent or null
	Tensors    []TensorInfo      // sorted by Begin (then End, then Name)
	DataOffset int64             // file offset of the data section: 8 + the header length

	index   map[string]int
	mapping *mapped.Mapping
}

// Open maps the file at path read-only and parses it with Parse. The
// tensors' Data slices point into the mapping and are valid until Close. A
// malformed file (including an empty one) is a *parse.Error
// (parse.Safetensors); failing to open or map the file is an error from
// mapped.Map; a file truncated while it is parsed is a *mapped.FaultError.
func Open(path string) (*File, error) {
	m, err := mapped.Map(path)
	if err != nil && !errors.Is(err, mapped.ErrEmpty) {
		return nil, err
	}
	return OpenMapping(path, m)
}

// OpenMapping parses a mapped file (nil for an empty one) as Open does,
// and takes ownership of the mapping.
func OpenMapping(path string, m *mapped.Mapping) (*File, error) {
	if m == nil {
		return Parse(path, nil)
	}
	var s *File
	err := mapped.Guard(path, func() error {
		var perr error
		s, perr = Parse(path, m.Data)
		return perr
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	s.mapping = m
	return s, nil
}

// Parse parses and validates a whole safetensors file held in file,
// making every check of the reference loader and more: the header
// length, UTF-8 and JSON syntax of the header, no duplicate or unknown keys
// at any level (keys are exact-case), known dtypes, integer shapes and
// offsets, offsets contiguous from 0 without gap or overlap, each tensor's
// size matching its shape and dtype, and the data section ending exactly
// at the end of the file. path is used only in errors. The result refers to
// file without copying it. On error it returns a nil *File and a
// *parse.Error (parse.Safetensors).
func Parse(path string, file []byte) (*File, error) {
	s, serr := parseFile(path, file)
	if serr != nil {
		return nil, serr
	}
	return s, nil
}

func parseFile(path string, file []byte) (*File, *parse.Error) {
	fail := func(field, format string, args ...any) *parse.Error {
		return &parse.Error{Format: parse.Safetensors, File: path, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if len(file) < 8 {
		return nil, fail("", "file is %d bytes, too short to hold the 8-byte header length", len(file))
	}
	n := binary.LittleEndian.Uint64(file)
	if n > MaxHeader {
		return nil, fail("", "header length %d exceeds the %d-byte limit", n, MaxHeader)
	}
	if n > uint64(len(file)-8) {
		return nil, fail("", "header length %d runs past the end of the file (8+%d > %d bytes)", n, n, len(file))
	}
	header := file[8 : 8+n]
	data := file[8+n:]

	s, serr := parseHeader(path, header)
	if serr != nil {
		return nil, serr
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
	for i := range s.Tensors { // the sort moved them: index them again
		t := &s.Tensors[i]
		t.Data = data[t.Begin:t.End:t.End]
		s.index[t.Name] = i
	}
	return s, nil
}

// Tensor returns the tensor with exactly the given name.
func (s *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := s.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return s.Tensors[i], true
}

// Close unmaps a file opened with Open; the tensors' Data slices
// must not be used afterwards. For a result of Parse, and when
// called again, it does nothing.
func (s *File) Close() error {
	if s == nil || s.mapping == nil {
		return nil
	}
	m := s.mapping
	s.mapping = nil
	return m.Close()
}

// A headerParser reads a header's tokens through the scanner. The accepted
// grammar has fixed depth (an object of objects of arrays of numbers), so
// any deeper nesting is refused at its first token.
type headerParser struct {
	path string
	sc   *jsonscan.Scanner
	ints []int64 // an array being read (reused)
}

func (p *headerParser) fail(field, format string, args ...any) *parse.Error {
	return &parse.Error{Format: parse.Safetensors, File: p.path, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// next returns the next token; a syntax error is reported against
// "header", at its byte.
func (p *headerParser) next() (jsonscan.Kind, *parse.Error) {
	k, err := p.sc.Next()
	if err == nil {
		return k, nil
	}
	if e, ok := err.(*jsonscan.Error); ok && e.Code == jsonscan.ErrEOF {
		return 0, p.fail("header", "invalid JSON: unexpected end of the header after byte %d", p.sc.TokenOffset())
	} else if ok {
		return 0, p.fail("header", "invalid JSON at byte %d: %v", e.Offset, e)
	}
	return 0, p.fail("header", "invalid JSON: %v", err)
}

// describe names token k (just read) for an error.
func (p *headerParser) describe(k jsonscan.Kind) string {
	switch k {
	case jsonscan.ObjectStart, jsonscan.ObjectEnd:
		return "an object"
	case jsonscan.ArrayStart, jsonscan.ArrayEnd:
		return "an array"
	case jsonscan.String:
		return fmt.Sprintf("string %q", truncate(string(p.sc.Bytes())))
	case jsonscan.Number:
		return "number " + truncate(string(p.sc.Bytes()))
	case jsonscan.True:
		return "boolean true"
	case jsonscan.False:
		return "boolean false"
	}
	return "null"
}

// parseHeader parses a header: an object of tensor entries and
// "__metadata__", each key once. It allocates the result and little else:
// names and metadata strings once, no token, no string for a known key.
func parseHeader(path string, header []byte) (*File, *parse.Error) {
	p := &headerParser{path: path}
	switch {
	case !utf8.Valid(header):
		return nil, p.fail("header", "not valid UTF-8 (at byte %d)", jsonscan.FirstInvalid(header))
	case bytes.HasPrefix(header, []byte("\uFEFF")):
		return nil, p.fail("header", "not a JSON object: starts with a byte order mark")
	case len(header) == 0:
		return nil, p.fail("header", "not a JSON object: the header is empty")
	case header[0] != '{':
		return nil, p.fail("header", "not a JSON object: starts with %q", prefix(header))
	}
	p.sc = jsonscan.New(header, jsonscan.Options{MaxDepth: 4})
	if _, serr := p.next(); serr != nil { // the '{' checked above
		return nil, serr
	}
	n := bytes.Count(header, []byte(`"data_offsets"`))
	s := &File{Path: path, Tensors: make([]TensorInfo, 0, n), index: make(map[string]int, n)}
	sawMetadata := false
	for {
		k, serr := p.next()
		if serr != nil {
			return nil, serr
		}
		if k == jsonscan.ObjectEnd {
			break
		}
		key := p.sc.Bytes()
		if string(key) == "__metadata__" {
			if sawMetadata {
				return nil, p.fail("metadata", "duplicate key \"__metadata__\"")
			}
			sawMetadata = true
			if s.Metadata, serr = p.metadata(); serr != nil {
				return nil, serr
			}
			continue
		}
		if _, dup := s.index[string(key)]; dup {
			return nil, p.fail(fmt.Sprintf("tensors[%q]", key), "duplicate tensor name")
		}
		name := string(key)
		if strings.EqualFold(name, "__metadata__") {
			return nil, p.fail(fmt.Sprintf("tensors[%q]", name), "keys are case-sensitive: metadata goes under \"__metadata__\"")
		}
		t, serr := p.tensor(name)
		if serr != nil {
			return nil, serr
		}
		s.index[name] = len(s.Tensors)
		s.Tensors = append(s.Tensors, t)
	}
	end := p.sc.Offset()
	if _, err := p.sc.Next(); err != nil {
		return nil, p.fail("header", "trailing data after the header object, which ends at byte %d (only spaces may pad the header)", end)
	}
	return s, nil
}

// metadata parses the value of "__metadata__": null or an object of strings.
func (p *headerParser) metadata() (map[string]string, *parse.Error) {
	k, serr := p.next()
	if serr != nil {
		return nil, serr
	}
	if k == jsonscan.Null {
		return nil, nil
	}
	if k != jsonscan.ObjectStart {
		return nil, p.fail("metadata", "got %s, want an object of strings", p.describe(k))
	}
	m := make(map[string]string)
	for {
		k, serr := p.next()
		if serr != nil {
			return nil, serr
		}
		if k == jsonscan.ObjectEnd {
			return m, nil
		}
		key := string(p.sc.Bytes())
		field := fmt.Sprintf("metadata[%q]", key)
		if _, dup := m[key]; dup {
			return nil, p.fail(field, "duplicate key")
		}
		if k, serr = p.next(); serr != nil {
			return nil, serr
		}
		if k != jsonscan.String {
			return nil, p.fail(field, "got %s, want a string", p.describe(k))
		}
		m[key] = string(p.sc.Bytes())
	}
}

// tensor parses one tensor entry: an object with exactly the keys dtype,
// shape and data_offsets.
func (p *headerParser) tensor(name string) (TensorInfo, *parse.Error) {
	t := TensorInfo{Name: name}
	k, serr := p.next()
	if serr != nil {
		return t, serr
	}
	if k != jsonscan.ObjectStart {
		return t, p.fail(fmt.Sprintf("tensors[%q]", name), "got %s, want an object with dtype, shape and data_offsets", p.describe(k))
	}
	var sawDtype, sawShape, sawOffsets bool
	for {
		k, serr := p.next()
		if serr != nil {
			return t, serr
		}
		if k == jsonscan.ObjectEnd {
			break
		}
		var saw *bool
		switch key := p.sc.Bytes(); string(key) {
		case "dtype":
			saw = &sawDtype
		case "shape":
			saw = &sawShape
		case "data_offsets":
			saw = &sawOffsets
		default:
			msg := fmt.Sprintf("unknown key %q", key)
			for _, want := range []string{"dtype", "shape", "data_offsets"} {
				if bytes.EqualFold(key, []byte(want)) {
					msg += fmt.Sprintf(" (keys are case-sensitive: did you mean %q?)", want)
				}
			}
			return t, p.fail(fmt.Sprintf("tensors[%q]", name), "%s", msg)
		}
		if *saw {
			return t, p.fail(fmt.Sprintf("tensors[%q]", name), "duplicate key %q", p.sc.Bytes())
		}
		*saw = true
		switch saw {
		case &sawDtype:
			k, serr := p.next()
			if serr != nil {
				return t, serr
			}
			if k != jsonscan.String {
				return t, p.fail(fmt.Sprintf("tensors[%q].dtype", name), "got %s, want a dtype name", p.describe(k))
			}
			d, ok := lookupDtype(p.sc.Bytes())
			if !ok {
				_, err := ParseDtype(string(p.sc.Bytes()))
				return t, p.fail(fmt.Sprintf("tensors[%q].dtype", name), "%v", err)
			}
			t.Dtype = d
		case &sawShape:
			if t.Shape, serr = p.intArray(name, "shape", -1); serr != nil {
				return t, serr
			}
		default:
			off, serr := p.intArray(name, "data_offsets", 2)
			if serr != nil {
				return t, serr
			}
			t.Begin, t.End = off[0], off[1]
		}
	}
	switch {
	case !sawDtype:
		return t, p.fail(fmt.Sprintf("tensors[%q]", name), "missing key \"dtype\"")
	case !sawShape:
		return t, p.fail(fmt.Sprintf("tensors[%q]", name), "missing key \"shape\"")
	case !sawOffsets:
		return t, p.fail(fmt.Sprintf("tensors[%q]", name), "missing key \"data_offsets\"")
	}
	return t, nil
}

// lookupDtype looks a dtype name up without allocating.
func lookupDtype(name []byte) (Dtype, bool) {
	for _, d := range dtypes {
		if string(name) == d.Name {
			return d, true
		}
	}
	return Dtype{}, false
}

// intArray parses tensor name's key: an array of integers in [0,
// 2^63-1]; with want >= 0 it must hold exactly want of them. The result
// is allocated at its length.
func (p *headerParser) intArray(name, key string, want int) ([]int64, *parse.Error) {
	field := func() string { return fmt.Sprintf("tensors[%q].%s", name, key) }
	k, serr := p.next()
	if serr != nil {
		return nil, serr
	}
	if k != jsonscan.ArrayStart {
		return nil, p.fail(field(), "got %s, want an array of non-negative integers", p.describe(k))
	}
	vals := p.ints[:0]
	for {
		k, serr := p.next()
		if serr != nil {
			return nil, serr
		}
		if k == jsonscan.ArrayEnd {
			break
		}
		if want >= 0 && len(vals) == want {
			return nil, p.fail(field(), "want exactly %d values [begin, end], got more", want)
		}
		switch k {
		case jsonscan.Number:
		case jsonscan.ArrayStart, jsonscan.ObjectStart:
			return nil, p.fail(field(), "got %s nested in the array, want a non-negative integer", p.describe(k))
		default:
			return nil, p.fail(field(), "got %s, want a non-negative integer", p.describe(k))
		}
		v, ok := plainUint(p.sc.Bytes())
		if !ok {
			_, msg := parseInt(string(p.sc.Bytes()))
			return nil, p.fail(field(), "%s", msg)
		}
		vals = append(vals, v)
	}
	p.ints = vals
	if want >= 0 && len(vals) != want {
		return nil, p.fail(field(), "want exactly %d values [begin, end], got %d", want, len(vals))
	}
	return append(make([]int64, 0, len(vals)), vals...), nil
}

// plainUint parses a number's text that is plain digits of at most 2^63-1.
func plainUint(b []byte) (int64, bool) {
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if v > (math.MaxInt64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, len(b) > 0
}

// parseInt parses a JSON number that must be an integer in [0, 2^63-1];
// it returns a message saying why not otherwise.
func parseInt(s string) (int64, string) {
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

func truncate(s string) string {
	if len(s) <= 40 {
		return s
	}
	i := 40
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// prefix returns the first few bytes of b for an error message.
func prefix(b []byte) string {
	return truncate(string(b[:min(len(b), 16)]))
}

// A TensorData is a tensor to write with Write.
type TensorData struct {
	Name  string
	Dtype Dtype
	Shape []int64
	Data  []byte // exactly Dtype.ByteSize(Shape) bytes
}

// Write writes a safetensors file that Parse and the
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
func Write(w io.Writer, metadata map[string]string, tensors []TensorData) error {
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
	if h.Len() > MaxHeader {
		return fail("header", "header of %d bytes exceeds the %d-byte limit", h.Len(), MaxHeader)
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
