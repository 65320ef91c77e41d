package layout

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/kvaudit/kvaudit/internal/jsonscan"
)

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// unknownField returns, for valid JSON data that will be decoded into a
// value of type t, the first object key (in document order) that names no
// field of the struct it would go into, as encoding/json's
// DisallowUnknownFields reports it ("json: unknown field ..."), or nil. It
// follows t as encoding/json does (json tags, case-insensitive names,
// embedded structs, pointers, slices, arrays, maps) and stops at a type
// that decodes itself (json.Unmarshaler, encoding.TextUnmarshaler) or an
// interface. It reads data through internal/jsonscan, with checkKeys's
// limits, and allocates only for the keys of structs.
func unknownField(data []byte, t reflect.Type) error {
	sc := jsonscan.New(data, jsonscan.Options{MaxDepth: maxJSONDepth, MaxNumber: maxJSONNumber, LoneSurrogates: true})
	k, err := sc.Next()
	if err != nil {
		return err
	}
	return knownValue(sc, k, t)
}

// knownValue checks the value whose first token k sc has just returned
// against t, and reads it to its end.
func knownValue(sc *jsonscan.Scanner, k jsonscan.Kind, t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer && !decodesItself(t) {
		t = t.Elem()
	}
	if t == nil || decodesItself(t) || t.Kind() == reflect.Interface || (k != jsonscan.ObjectStart && k != jsonscan.ArrayStart) {
		return sc.Skip(k)
	}
	var elem reflect.Type
	if k == jsonscan.ArrayStart {
		if tk := t.Kind(); tk == reflect.Slice || tk == reflect.Array {
			elem = t.Elem()
		}
	} else if t.Kind() == reflect.Map {
		elem = t.Elem()
	}
	for {
		k, err := sc.Next()
		if err != nil {
			return err
		}
		switch k {
		case jsonscan.ArrayEnd, jsonscan.ObjectEnd:
			return nil
		case jsonscan.String:
			if !sc.IsKey() {
				break
			}
			field := elem
			if t.Kind() == reflect.Struct {
				key := string(sc.Bytes())
				var ok bool
				if field, ok = structField(t, key); !ok {
					return fmt.Errorf("json: unknown field %q", key)
				}
			}
			if k, err = sc.Next(); err != nil {
				return err
			}
			if err := knownValue(sc, k, field); err != nil {
				return err
			}
			continue
		}
		if err := knownValue(sc, k, elem); err != nil {
			return err
		}
	}
}

// decodesItself says whether encoding/json hands a value of type t its
// JSON (or its text) to decode. The answer is kept per type (asked for
// every value of a document: a manifest's every layer field).
func decodesItself(t reflect.Type) bool {
	if v, ok := decodesCache.Load(t); ok {
		return v.(bool)
	}
	d := implementsUnmarshaler(t)
	decodesCache.Store(t, d)
	return d
}

// decodesCache holds decodesItself's answers (a reflect.Type: bool).
var decodesCache sync.Map

func implementsUnmarshaler(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshalerType) || p.Implements(jsonUnmarshalerType) ||
		t.Implements(textUnmarshalerType) || p.Implements(textUnmarshalerType)
}

// structField returns the type of the field of struct t that key names,
// as encoding/json matches it: the exact name first, else one that
// differs only in case; the fields of embedded structs are t's. Exact
// names found are kept per struct type (at most its fields, whatever the
// input), so that a document's every object does not parse its type's
// tags again.
func structField(t reflect.Type, key string) (reflect.Type, bool) {
	if ft, ok := exactFields.Load(fieldKey{t, key}); ok {
		return ft.(reflect.Type), true
	}
	ft, exact, ok := findField(t, key)
	if exact {
		exactFields.Store(fieldKey{t, key}, ft)
	}
	return ft, ok
}

// fieldKey is a struct type and a key naming one of its fields exactly.
type fieldKey struct {
	t   reflect.Type
	key string
}

// exactFields holds structField's exact matches (a fieldKey: the field's
// reflect.Type).
var exactFields sync.Map

// findField is structField without the cache; exact says whether the
// field's name is key itself (not one differing in case).
func findField(t reflect.Type, key string) (ft reflect.Type, exact, ok bool) {
	var fold reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				if ft, exact, ok := findField(et, key); ok {
					return ft, exact, true
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f.Type, true, true
		}
		if fold == nil && strings.EqualFold(name, key) {
			fold = f.Type
		}
	}
	return fold, false, fold != nil
}
