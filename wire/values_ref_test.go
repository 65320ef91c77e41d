package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvaudit/kvaudit/layout"
)

// oldUnmarshalValues is Values.UnmarshalJSON as it was before it read
// through internal/jsonscan: two passes of a hand-written walker (its
// first counts the positions and values and checks each position is a
// list). It is kept as a reference for FuzzValuesLikeOld and
// BenchmarkValuesJSON.
func oldUnmarshalValues(v *Values, data []byte) error {
	i := skipSpace(data, 0)
	if string(data[i:]) == "null" {
		*v = Values{}
		return nil
	}
	if data[i] != '[' {
		return &json.UnmarshalTypeError{Value: jsonKind(data[i]), Type: reflect.TypeFor[[][]layout.Hex64](), Offset: int64(i)}
	}
	// First pass: the positions and the values, and that each position
	// is a list.
	rows, total := 0, 0
	for p := skipSpace(data, i+1); data[p] != ']'; {
		if data[p] != '[' {
			return &json.UnmarshalTypeError{Value: jsonKind(data[p]), Type: rowType, Offset: int64(p)}
		}
		rows++
		q := skipSpace(data, p+1)
		for data[q] != ']' {
			total++
			q = skipSpace(data, skipElement(data, q))
			if data[q] == ',' {
				q = skipSpace(data, q+1)
			}
		}
		p = skipSpace(data, q+1)
		if data[p] == ',' {
			p = skipSpace(data, p+1)
		}
	}
	out := Values{rows: rows, present: true}
	flat := make([]uint64, 0, total)
	row := 0
	for p := skipSpace(data, i+1); data[p] != ']'; row++ {
		n := 0
		q := skipSpace(data, p+1)
		for data[q] != ']' {
			end := skipElement(data, q)
			var h layout.Hex64
			if err := h.UnmarshalJSON(data[q:end]); err != nil {
				return err
			}
			flat = append(flat, uint64(h))
			n++
			q = skipSpace(data, end)
			if data[q] == ',' {
				q = skipSpace(data, q+1)
			}
		}
		if row == 0 {
			out.len0 = n
		} else if n != out.len0 && out.badRow == 0 {
			out.badRow, out.badLen = row+1, n
		}
		p = skipSpace(data, q+1)
		if data[p] == ',' {
			p = skipSpace(data, p+1)
		}
	}
	if out.badRow == 0 {
		out.keys, out.flat = out.len0, flat
	}
	*v = out
	return nil
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipElement returns the index just past the JSON value at data[i].
func skipElement(data []byte, i int) int {
	switch data[i] {
	case '"':
		for i++; i < len(data); i++ {
			switch data[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
		return len(data)
	case '[', '{':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				i = skipElement(data, i) - 1
			case '[', '{':
				depth++
			case ']', '}':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(data)
	}
	for i < len(data) && !strings.ContainsRune(" \t\r\n,]}", rune(data[i])) {
		i++
	}
	return i
}

// valuesLikeOld fails unless Values.UnmarshalJSON and the walker it
// replaced give the same error, or the same values, for valid UTF-8 JSON
// data (what encoding/json hands a Values).
func valuesLikeOld(t *testing.T, data []byte) {
	t.Helper()
	if !json.Valid(data) || !utf8.Valid(data) {
		return
	}
	var a, b Values
	errA, errB := a.UnmarshalJSON(data), oldUnmarshalValues(&b, data)
	if fmt.Sprint(errA) != fmt.Sprint(errB) || !reflect.DeepEqual(a, b) {
		t.Fatalf("%.200s: got %+v, %v; the old walker %+v, %v", data, a, errA, b, errB)
	}
}

// valuesSeeds are values documents, valid and not.
var valuesSeeds = []string{`null`, ` [ ] `, `[[]]`, `[["0x1","0x2"],["0x3","0x4"]]`, `[["0x1"],["0x2","0x3"]]`,
	`[5]`, `[["0xzz"]]`, `[[5]]`, `"x"`, `[{}]`, `[["0xzz"], 5]`, `[[{"a":["]"]}], null]`, `[["\u0030x1"]]`, `{}`, `[[true, "0x1"]]`}

// FuzzValuesLikeOld: Values decode as the walker they replaced did.
func FuzzValuesLikeOld(f *testing.F) {
	for _, s := range valuesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(valuesLikeOld)
}

// TestValuesLikeOld runs valuesLikeOld on the values of a record (the
// seeds run as FuzzValuesLikeOld's).
func TestValuesLikeOld(t *testing.T) {
	valuesLikeOld(t, benchValues(t, 100))
}

// benchValues is the values of n positions of 2 replica keys as a record
// indents them.
func benchValues(tb testing.TB, n int) []byte {
	v := NewValues(n, 2)
	for i := range v.Flat() {
		v.Flat()[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "       ", " "); err != nil {
		tb.Fatal(err)
	}
	return out.Bytes()
}

// BenchmarkValuesJSON decodes the values of 200,000 positions of 2
// replica keys through internal/jsonscan (new) and with the walker it
// replaced (old).
func BenchmarkValuesJSON(b *testing.B) {
	data := benchValues(b, 200_000)
	for _, c := range []struct {
		name   string
		decode func(*Values, []byte) error
	}{{"old", oldUnmarshalValues}, {"new", (*Values).UnmarshalJSON}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var v Values
				if err := c.decode(&v, data); err != nil || v.Len() != 200_000 {
					b.Fatal(v.Len(), err)
				}
			}
		})
	}
}
