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

	"github.com/kvaudit/kvaudit/internal/jsonscan"
)

// maxJSONDepth bounds the nesting of kvaudit's JSON files (manifests and
// records are at most a handful of levels deep), maxJSONNumber a number's
// text.
const (
	maxJSONDepth  = 32
	maxJSONNumber = 1 << 10
)

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
	end, more, err := checkKeys(data)
	if err != nil {
		return err
	}
	// The first value, checked, is decoded where it lies (a record or a
	// manifest of hundreds of MB is not copied); unknown fields are
	// found by a scan of their own.
	first := data[:end]
	err = decodeJSON(first, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && (te.Type == blockIDType || te.Type == blockIDsType) {
		// BlockIDs stops the decoder at its error, where encoding/json
		// goes on and reports the first error of the document. Decode
		// again with the block tables as plain []int, whose errors are
		// the same, to name the first error.
		if t := plainBlockIDs(reflect.TypeOf(v)); t != nil {
			if err2 := decodeJSON(first, reflect.New(t.Elem()).Interface()); err2 != nil {
				err = err2
			}
		}
	}
	if err != nil {
		return jsonError(err)
	}
	if more {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// decodeJSON decodes one valid JSON value into v, refusing unknown fields.
func decodeJSON(data []byte, v any) error {
	if err := unknownField(data, reflect.TypeOf(v)); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
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
// checkKeys, as the scanner's tokens come.
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
	object bool
	keys   map[string]bool
	path   string
	key    string // the current key of an object
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
	return nil
}

// open enters an object or an array (the scanner bounds the depth).
func (s *jsonKeys) open(object bool) {
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
	}
	s.stack = append(s.stack, c)
}

// close leaves the innermost object or array.
func (s *jsonKeys) close() {
	s.stack = s.stack[:len(s.stack)-1]
}

// checkKeys scans data, valid UTF-8, as JSON values one after the other
// and returns the end of the first; more says whether another follows.
// Its error is the first in document order of a syntax error (worded as
// encoding/json words it), nesting deeper than maxJSONDepth, a duplicate
// key or an upper-case key. It allocates per object and key only (a long
// array of numbers costs nothing).
func checkKeys(data []byte) (end int, more bool, err error) {
	var s jsonKeys
	sc := jsonscan.New(data, jsonscan.Options{MaxDepth: maxJSONDepth, MaxNumber: maxJSONNumber, Stream: true, LoneSurrogates: true})
	for {
		k, err := sc.Next()
		if err != nil {
			return 0, false, err
		}
		switch k {
		case jsonscan.End:
			return end, more, nil
		case jsonscan.ObjectStart, jsonscan.ArrayStart:
			s.open(k == jsonscan.ObjectStart)
		case jsonscan.ObjectEnd, jsonscan.ArrayEnd:
			s.close()
		case jsonscan.String:
			if sc.IsKey() {
				if err := s.key(string(sc.Bytes())); err != nil {
					return 0, false, err
				}
			}
		}
		if sc.Depth() == 0 {
			if end == 0 {
				end = int(sc.Offset())
			} else {
				more = true
			}
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
