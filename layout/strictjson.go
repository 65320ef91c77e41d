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
	if err := checkJSONKeys(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
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

// checkJSONKeys walks the tokens of data and rejects duplicate keys,
// upper-case keys and nesting deeper than maxJSONDepth.
func checkJSONKeys(data []byte) error {
	type container struct {
		object    bool
		keys      map[string]bool
		path      string
		key       string // the current key of an object
		expectKey bool
	}
	var stack []*container
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].expectKey = true
		}
	}
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
		var top *container
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		if top != nil && top.object && top.expectKey {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
				valueDone()
				continue
			}
			k, _ := tok.(string) // the decoder only yields strings as keys
			if top.keys[k] {
				return fmt.Errorf("%s: duplicate key %q", displayPath(top.path), k)
			}
			if strings.ContainsFunc(k, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
				return fmt.Errorf("%s: key %q is not lower-case (keys are exact-case)", displayPath(top.path), k)
			}
			top.keys[k] = true
			top.key = k
			top.expectKey = false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxJSONDepth {
				return fmt.Errorf("nested deeper than %d levels", maxJSONDepth)
			}
			path := ""
			if top != nil && top.object {
				path = joinPath(top.path, top.key)
			} else if top != nil {
				path = top.path + "[]"
			}
			c := &container{path: path, object: tok == json.Delim('{')}
			if c.object {
				c.keys = map[string]bool{}
				c.expectKey = true
			}
			stack = append(stack, c)
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
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
