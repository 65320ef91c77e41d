package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"
)

// The hand-written walkers that BlockIDs.UnmarshalJSON and unknownField
// replaced with internal/jsonscan, kept as references for the fuzz test
// and the benchmarks. They trust that data is valid JSON.

// oldUnmarshalBlockIDs is BlockIDs.UnmarshalJSON as it was.
func oldUnmarshalBlockIDs(b *BlockIDs, data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return &json.UnmarshalTypeError{Value: "empty", Type: blockIDsType}
	}
	switch data[0] {
	case 'n':
		*b = nil
		return nil
	case '[':
	default:
		return &json.UnmarshalTypeError{Value: oldJSONKind(data), Type: blockIDsType}
	}
	n := 0
	if err := eachArrayElem(data, func([]byte) error { n++; return nil }); err != nil {
		return err
	}
	ids := make(BlockIDs, 0, n)
	err := eachArrayElem(data, func(e []byte) error {
		switch e[0] {
		case 'n':
			ids = append(ids, NoBlock)
			return nil
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			v, err := strconv.ParseInt(string(e), 10, strconv.IntSize)
			if err != nil || v == NoBlock {
				// A fraction, an exponent or a value beyond int; and
				// the one int that would read back as null.
				return &json.UnmarshalTypeError{Value: "number " + string(e), Type: blockIDType}
			}
			ids = append(ids, int(v))
			return nil
		}
		return &json.UnmarshalTypeError{Value: oldJSONKind(e), Type: blockIDType}
	})
	if err != nil {
		return err
	}
	*b = ids
	return nil
}

// oldUnknownField returns, for valid JSON data that will be decoded into a
// value of type t, the first object key (in document order) that names no
// field of the struct it would go into, as encoding/json's
// DisallowUnknownFields reports it ("json: unknown field ..."), or nil. It
// follows t as encoding/json does (json tags, case-insensitive names,
// embedded structs, pointers, slices, arrays, maps) and stops at a type
// that decodes itself (json.Unmarshaler, encoding.TextUnmarshaler) or an
// interface. It scans data in place and allocates only for escaped keys.
func oldUnknownField(data []byte, t reflect.Type) error {
	_, err := oldKnownValue(data, skipJSONSpace(data, 0), t)
	return err
}

// oldKnownValue checks the value at data[i] against t and returns the index
// just past it.
func oldKnownValue(data []byte, i int, t reflect.Type) (int, error) {
	for t != nil && t.Kind() == reflect.Pointer && !decodesItself(t) {
		t = t.Elem()
	}
	if t == nil || decodesItself(t) || t.Kind() == reflect.Interface || (data[i] != '{' && data[i] != '[') {
		return skipJSONValue(data, i), nil
	}
	if data[i] == '[' {
		var elem reflect.Type
		if k := t.Kind(); k == reflect.Slice || k == reflect.Array {
			elem = t.Elem()
		}
		i = skipJSONSpace(data, i+1)
		for data[i] != ']' {
			var err error
			if i, err = oldKnownValue(data, i, elem); err != nil {
				return 0, err
			}
			i = skipJSONSpace(data, i)
			if data[i] == ',' {
				i = skipJSONSpace(data, i+1)
			}
		}
		return i + 1, nil
	}
	i = skipJSONSpace(data, i+1)
	for data[i] != '}' {
		end, esc := skipJSONString(data, i)
		key := string(data[i+1 : end-1])
		if esc {
			if err := json.Unmarshal(data[i:end], &key); err != nil {
				return 0, err
			}
		}
		i = skipJSONSpace(data, end)
		i = skipJSONSpace(data, i+1) // the ':'
		var field reflect.Type
		switch t.Kind() {
		case reflect.Map:
			field = t.Elem()
		case reflect.Struct:
			var ok bool
			if field, ok = structField(t, key); !ok {
				return 0, fmt.Errorf("json: unknown field %q", key)
			}
		}
		var err error
		if i, err = oldKnownValue(data, i, field); err != nil {
			return 0, err
		}
		i = skipJSONSpace(data, i)
		if data[i] == ',' {
			i = skipJSONSpace(data, i+1)
		}
	}
	return i + 1, nil
}

// oldJSONKind names the kind of the JSON value that starts data.
func oldJSONKind(data []byte) string {
	switch data[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// eachArrayElem calls fn with each element of the JSON array data, which
// encoding/json has already checked to be valid JSON.
func eachArrayElem(data []byte, fn func([]byte) error) error {
	i := 1 // past '['
	for {
		i = skipJSONSpace(data, i)
		if i >= len(data) || data[i] == ']' {
			return nil
		}
		if data[i] == ',' {
			i++
			continue
		}
		end := skipJSONValue(data, i)
		if err := fn(data[i:end]); err != nil {
			return err
		}
		i = end
	}
}

func skipJSONSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipJSONString returns the index just past the string that starts at
// data[i] (a '"'), and whether it holds an escape.
func skipJSONString(data []byte, i int) (int, bool) {
	esc := false
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			esc = true
			i++
		case '"':
			return i + 1, esc
		}
	}
	return len(data), esc
}

// skipJSONValue returns the index just past the valid JSON value that
// starts at data[i].
func skipJSONValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		end, _ := skipJSONString(data, i)
		return end
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i, _ = skipJSONString(data, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(data)
	}
	for i < len(data) && !isJSONDelim(data[i]) {
		i++
	}
	return i
}

func isJSONDelim(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', ',', ':', ']', '}', '[', '{', '"':
		return true
	}
	return false
}

// BenchmarkUnknownField checks BenchmarkParseManifestBlockTable's 20 MB
// manifest (its block table of numbers read past as a BlockIDs) and a
// 20 MB document of lists of hex strings read past as a json.RawMessage,
// through internal/jsonscan (new) and with the walker it replaced (old).
func BenchmarkUnknownField(b *testing.B) {
	manifest, _, _ := bigManifest(b)
	var hex bytes.Buffer
	hex.WriteString(`{"name": "x", "any": [`)
	for i := range 250_000 {
		if i > 0 {
			hex.WriteString(",\n")
		}
		fmt.Fprintf(&hex, `["0x%016x", "0x%016x"]`, i*0x9e3779b9, i)
	}
	hex.WriteString("]}")
	for _, d := range []struct {
		name string
		data []byte
		typ  reflect.Type
	}{{"manifest", manifest, reflect.TypeFor[*Manifest]()}, {"strings", hex.Bytes(), reflect.TypeFor[*knownDoc]()}} {
		for _, c := range []struct {
			name string
			walk func([]byte, reflect.Type) error
		}{{"old", oldUnknownField}, {"new", unknownField}} {
			b.Run(d.name+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(d.data)))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.walk(d.data, d.typ); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkBlockIDs decodes the 2.5 million entries of
// BenchmarkParseManifestBlockTable's block table (as MarshalManifest
// indents it) through internal/jsonscan (new) and with the walker it
// replaced (old).
func BenchmarkBlockIDs(b *testing.B) {
	manifest, _, n := bigManifest(b)
	start := bytes.IndexByte(manifest[bytes.Index(manifest, []byte(`"block_table"`)):], '[') + bytes.Index(manifest, []byte(`"block_table"`))
	end := start + bytes.IndexByte(manifest[start:], ']') + 1
	table := manifest[start:end]
	for _, c := range []struct {
		name   string
		decode func(*BlockIDs, []byte) error
	}{{"old", oldUnmarshalBlockIDs}, {"new", (*BlockIDs).UnmarshalJSON}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(table)))
			b.ReportAllocs()
			for b.Loop() {
				var ids BlockIDs
				if err := c.decode(&ids, table); err != nil || len(ids) != n {
					b.Fatal(len(ids), err)
				}
			}
		})
	}
}
