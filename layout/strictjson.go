package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of kvaudit's JSON files (manifests and
// records are at most a handful of levels deep).
const maxJSONDepth = 32

// DecodeStrictJSON decodes one kvaudit JSON document (a manifest or a record)
// into v, more strictly than encoding/json: the input must be valid UTF-8,
// hold exactly one value, nest at most 32 levels, repeat no key within an
// object, and use no key with an upper-case ASCII letter (kvaudit's keys are
// lower-case, so together with rejecting unknown fields this makes key
// matching exact-case). The error names the offending key's path.
func DecodeStrictJSON(data []byte, v any) error {
	if !utf8.Valid(data) {
		return errors.New("not valid UTF-8")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty: no JSON value")
	}
	valid := json.Valid(data) // once for both scans below
	if err := checkKeys(data, valid); err != nil {
		return err
	}
	err := decodeJSON(data, v, valid)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && (te.Type == blockIDType || te.Type == blockIDsType) {
		// BlockIDs stops the decoder at its error, where encoding/json
		// goes on and reports the first error of the document. Decode
		// again with the block tables as plain []int, whose errors are
		// the same, to name the first error.
		if t := plainBlockIDs(reflect.TypeOf(v)); t != nil {
			if err2 := decodeJSON(data, reflect.New(t.Elem()).Interface(), valid); err2 != nil {
				err = err2
			}
		}
	}
	if err != nil {
		return jsonError(err)
	}
	return nil
}

// decodeJSON decodes data into v; valid is json.Valid(data).
func decodeJSON(data []byte, v any, valid bool) error {
	if valid {
		// In place: json.Unmarshal decodes data where it lies, where a
		// Decoder would first copy it whole (a record or a manifest of
		// hundreds of MB); unknown fields are found by a scan of their own.
		if err := unknownField(data, reflect.TypeOf(v)); err != nil {
			return err
		}
		return json.Unmarshal(data, v)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// plainBlockIDs returns t with every BlockIDs inside it replaced by []int
// (nil when t holds no BlockIDs).
func plainBlockIDs(t reflect.Type) reflect.Type {
	if t == blockIDsType {
		return reflect.TypeFor[[]int]()
	}
	switch t.Kind() {
	case reflect.Pointer:
		if e := plainBlockIDs(t.Elem()); e != nil {
			return reflect.PointerTo(e)
		}
	case reflect.Slice:
		if e := plainBlockIDs(t.Elem()); e != nil {
			return reflect.SliceOf(e)
		}
	case reflect.Map:
		if e := plainBlockIDs(t.Elem()); e != nil {
			return reflect.MapOf(t.Key(), e)
		}
	case reflect.Struct:
		fields := make([]reflect.StructField, t.NumField())
		changed := false
		for i := range fields {
			fields[i] = t.Field(i)
			if ft := plainBlockIDs(fields[i].Type); ft != nil {
				fields[i].Type, changed = ft, true
			}
		}
		if changed {
			return reflect.StructOf(fields)
		}
	}
	return nil
}

// jsonError rewords encoding/json's errors so they name the field.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		want := te.Type.String()
		switch te.Type.Kind() {
		case reflect.Struct, reflect.Map:
			want = "an object"
		case reflect.Slice, reflect.Array:
			want = "an array"
		case reflect.Int, reflect.Int64, reflect.Uint64:
			want = "an integer"
		}
		return fmt.Errorf("%s: got a JSON %s, want %s", field, te.Value, want)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errors.New("unexpected end of JSON input")
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s", rest)
	}
	return errors.New(strings.TrimPrefix(msg, "json: "))
}

// jsonKeys follows the objects and arrays open at a point of a JSON
// document and checks each object key as it comes: the rules of
// checkJSONKeys, shared by its two scanners.
type jsonKeys struct {
	stack []jsonContainer
	// paths holds each container path made, by parent path and key, so
	// that the millions of lists of a large record cost no string each.
	paths map[jsonPathKey]string
}

type jsonPathKey struct {
	parent, key string
	list        bool
}

type jsonContainer struct {
	object    bool
	keys      map[string]bool
	path      string
	key       string // the current key of an object
	expectKey bool
}

// wantsKey says whether the next token is an object's key (or its end).
func (s *jsonKeys) wantsKey() bool {
	n := len(s.stack)
	return n > 0 && s.stack[n-1].object && s.stack[n-1].expectKey
}

// key checks and records key k of the innermost object.
func (s *jsonKeys) key(k string) error {
	top := &s.stack[len(s.stack)-1]
	if top.keys[k] {
		return fmt.Errorf("%s: duplicate key %q", displayPath(top.path), k)
	}
	if strings.ContainsFunc(k, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
		return fmt.Errorf("%s: key %q is not lower-case (keys are exact-case)", displayPath(top.path), k)
	}
	top.keys[k] = true
	top.key = k
	top.expectKey = false
	return nil
}

// open enters an object or an array, refusing nesting deeper than
// maxJSONDepth.
func (s *jsonKeys) open(object bool) error {
	if len(s.stack) >= maxJSONDepth {
		return fmt.Errorf("nested deeper than %d levels", maxJSONDepth)
	}
	path := ""
	if n := len(s.stack); n > 0 {
		top := &s.stack[n-1]
		k := jsonPathKey{parent: top.path, key: top.key, list: !top.object}
		if k.list {
			k.key = ""
		}
		var ok bool
		if path, ok = s.paths[k]; !ok {
			if k.list {
				path = top.path + "[]"
			} else {
				path = joinPath(top.path, top.key)
			}
			if s.paths == nil {
				s.paths = map[jsonPathKey]string{}
			}
			if len(s.paths) < 1<<16 {
				s.paths[k] = path
			}
		}
	}
	c := jsonContainer{path: path, object: object}
	if object {
		c.keys = map[string]bool{}
		c.expectKey = true
	}
	s.stack = append(s.stack, c)
	return nil
}

// close leaves the innermost object or array, which is a value of its
// parent.
func (s *jsonKeys) close() {
	s.stack = s.stack[:len(s.stack)-1]
	s.valueDone()
}

// valueDone ends a value: an object then expects its next key.
func (s *jsonKeys) valueDone() {
	if n := len(s.stack); n > 0 && s.stack[n-1].object {
		s.stack[n-1].expectKey = true
	}
}

// checkJSONKeys rejects duplicate keys, upper-case keys and nesting deeper
// than maxJSONDepth, naming the first in document order. Valid JSON is
// scanned in place, allocating only per object and key (a long array of
// numbers costs nothing); anything else goes through checkJSONTokens, whose
// syntax errors are encoding/json's. data is valid UTF-8 (DecodeStrictJSON
// checks first).
func checkJSONKeys(data []byte) error {
	return checkKeys(data, json.Valid(data))
}

// checkKeys is checkJSONKeys for data that json.Valid says valid is.
func checkKeys(data []byte, valid bool) error {
	if !valid {
		return checkJSONTokens(data)
	}
	var s jsonKeys
	for i := skipJSONSpace(data, 0); i < len(data); i = skipJSONSpace(data, i) {
		c := data[i]
		if c == ',' || c == ':' {
			i++
			continue
		}
		if s.wantsKey() {
			if c == '}' {
				s.close()
				i++
				continue
			}
			end, esc := skipJSONString(data, i)
			var k string
			if esc {
				if err := json.Unmarshal(data[i:end], &k); err != nil {
					return jsonError(err)
				}
			} else {
				k = string(data[i+1 : end-1])
			}
			if err := s.key(k); err != nil {
				return err
			}
			i = end
			continue
		}
		switch c {
		case '{', '[':
			if err := s.open(c == '{'); err != nil {
				return err
			}
			i++
		case ']', '}':
			s.close()
			i++
		default:
			i = skipJSONValue(data, i)
			s.valueDone()
		}
	}
	return nil
}

// checkJSONTokens is checkJSONKeys through encoding/json's tokenizer, for
// input that is not one valid JSON value: it reports the first of a key
// error and a syntax error, as the tokens come.
func checkJSONTokens(data []byte) error {
	var s jsonKeys
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return jsonError(err)
		}
		if s.wantsKey() {
			if tok == json.Delim('}') {
				s.close()
				continue
			}
			k, _ := tok.(string) // the decoder only yields strings as keys
			if err := s.key(k); err != nil {
				return err
			}
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if err := s.open(tok == json.Delim('{')); err != nil {
				return err
			}
		case json.Delim(']'):
			s.close()
		default:
			s.valueDone()
		}
	}
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func displayPath(p string) string {
	if p == "" {
		return "(top level)"
	}
	return p
}
