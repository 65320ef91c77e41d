package report

import (
	"bufio"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"sync"

	"github.com/kvaudit/kvaudit/layout"
)

// hexListsType is the type of the long lists a JSON output may hold
// (ChecksumGroupJSON.Checks: one value per block position), which
// writeJSON streams.
var hexListsType = reflect.TypeFor[[][]layout.Hex64]()

// writeJSON writes v as json.MarshalIndent(v, "", "  ") and a newline
// would, byte for byte, but streams every [][]layout.Hex64 inside it
// (through structs, pointers and slices) value by value instead of
// holding the whole text: the checks of a record of millions of positions
// are written as they are read. Everything else is marshalled by
// encoding/json, one value at a time.
func writeJSON(w io.Writer, v any) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := streamValue(bw, reflect.ValueOf(v), ""); err != nil {
		return err
	}
	bw.WriteByte('\n')
	return bw.Flush()
}

// streams says whether values of type t hold a [][]layout.Hex64 that
// streamValue streams (not inside a map, an interface or a type that
// marshals itself).
func streams(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == hexListsType {
		return true
	}
	if seen[t] || t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		return streams(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous || f.Tag.Get("json") != "" && strings.Contains(f.Tag.Get("json"), ",string") {
				return false // left to encoding/json whole
			}
			if f.IsExported() && f.Tag.Get("json") != "-" && streams(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

var marshalerType = reflect.TypeFor[json.Marshaler]()

// streamsCache holds streams' answer per type (reflect.Type to bool):
// streamValue asks it of every value it writes, every struct field and
// slice element.
var streamsCache sync.Map

// typeStreams is streams(t), walked once per type.
func typeStreams(t reflect.Type) bool {
	if s, ok := streamsCache.Load(t); ok {
		return s.(bool)
	}
	s := streams(t, map[reflect.Type]bool{})
	streamsCache.Store(t, s)
	return s
}

// streamValue writes v at indentation prefix (its first line unindented,
// as MarshalIndent's with prefix).
func streamValue(w *bufio.Writer, v reflect.Value, prefix string) error {
	if !v.IsValid() || !typeStreams(v.Type()) {
		var x any
		if v.IsValid() {
			x = v.Interface()
		}
		b, err := json.MarshalIndent(x, prefix, "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	inner := prefix + "  "
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			_, err := w.WriteString("null")
			return err
		}
		return streamValue(w, v.Elem(), prefix)
	case reflect.Slice:
		if v.IsNil() {
			_, err := w.WriteString("null")
			return err
		}
		if v.Len() == 0 {
			_, err := w.WriteString("[]")
			return err
		}
		w.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString("\n" + inner)
			if v.Type() == hexListsType {
				writeHexList(w, v.Index(i).Interface().([]layout.Hex64), inner)
				continue
			}
			if err := streamValue(w, v.Index(i), inner); err != nil {
				return err
			}
		}
		_, err := w.WriteString("\n" + prefix + "]")
		return err
	}
	// A struct.
	t := v.Type()
	n := 0
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" && opts == "" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fv := v.Field(i)
		if omitted(fv, opts) {
			continue
		}
		if n > 0 {
			w.WriteByte(',')
		} else {
			w.WriteByte('{')
		}
		n++
		key, _ := json.Marshal(name)
		w.WriteString("\n" + inner)
		w.Write(key)
		w.WriteString(": ")
		if err := streamValue(w, fv, inner); err != nil {
			return err
		}
	}
	if n == 0 {
		_, err := w.WriteString("{}")
		return err
	}
	_, err := w.WriteString("\n" + prefix + "}")
	return err
}

// writeHexList writes one list of hex values at indentation prefix.
func writeHexList(w *bufio.Writer, l []layout.Hex64, prefix string) {
	if l == nil {
		w.WriteString("null")
		return
	}
	if len(l) == 0 {
		w.WriteString("[]")
		return
	}
	w.WriteByte('[')
	lead := "\n" + prefix + "  "
	var b [20]byte
	for i, h := range l {
		if i > 0 {
			w.WriteByte(',')
		}
		w.WriteString(lead)
		w.Write(appendHexQuoted(b[:0], uint64(h)))
	}
	w.WriteString("\n" + prefix + "]")
}

// appendHexQuoted appends x as layout.Hex64 writes it in JSON: "0x" and
// 16 lower-case hex digits, quoted.
func appendHexQuoted(b []byte, x uint64) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '"', '0', 'x')
	for s := 60; s >= 0; s -= 4 {
		b = append(b, digits[x>>s&0xf])
	}
	return append(b, '"')
}

// omitted says whether encoding/json leaves a field out, by its options
// (omitempty, omitzero).
func omitted(v reflect.Value, opts string) bool {
	for _, o := range strings.Split(opts, ",") {
		switch o {
		case "omitempty":
			switch v.Kind() {
			case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
				if v.Len() == 0 {
					return true
				}
			case reflect.Bool:
				if !v.Bool() {
					return true
				}
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				if v.Int() == 0 {
					return true
				}
			case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
				if v.Uint() == 0 {
					return true
				}
			case reflect.Float32, reflect.Float64:
				if v.Float() == 0 {
					return true
				}
			case reflect.Interface, reflect.Pointer:
				if v.IsNil() {
					return true
				}
			}
		case "omitzero":
			if z, ok := v.Interface().(interface{ IsZero() bool }); ok {
				if z.IsZero() {
					return true
				}
			} else if v.IsZero() {
				return true
			}
		}
	}
	return false
}
