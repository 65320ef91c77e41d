package wire

import (
	"bytes"
	"encoding/json"
	"iter"
	"reflect"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/internal/jsonscan"
	"github.com/kvaudit/kvaudit/layout"
)

// Values are the values of one request group of a record, one per block
// position and replica key: At(i)[k] is the value at position Start+i
// under ReplicaKeys[k]. They are held in one array, 8 bytes a value
// whatever the number of positions (a record of millions of positions is
// read at about its size, docs/spec.md §8), and read and written in JSON
// as a list of lists of hex strings (layout.Hex64), one per position:
// [["0x...", ...], ...].
//
// The zero Values are absent (an omitted values_block); NewValues and
// decoding give present ones, which may hold no position.
type Values struct {
	rows, keys int
	flat       []uint64
	present    bool
	// Values decoded from lists of different lengths hold no value
	// (keys 0) and say which for Validate to refuse: len0 is the first
	// list's length and badRow, when not 0, 1 + the index of the first
	// list of another length (badLen).
	len0, badRow, badLen int
}

// NewValues returns present values of positions positions and keys
// replica keys, all zero.
func NewValues(positions, keys int) Values {
	return Values{rows: positions, keys: keys, len0: keys, flat: make([]uint64, positions*keys), present: true}
}

// ValuesOf returns present values holding a copy of rows, one per
// position, each as long as the first (rows of different lengths give
// values that hold none, which Validate refuses).
func ValuesOf(rows ...[]uint64) Values {
	v := Values{rows: len(rows), present: true}
	if len(rows) > 0 {
		v.keys, v.len0 = len(rows[0]), len(rows[0])
	}
	for i, r := range rows {
		if len(r) != v.len0 && v.badRow == 0 {
			v.badRow, v.badLen = i+1, len(r)
		}
		v.flat = append(v.flat, r...)
	}
	if v.badRow != 0 {
		v.keys, v.flat = 0, nil
	}
	return v
}

// Len returns the number of positions.
func (v Values) Len() int { return v.rows }

// Keys returns the number of values at each position.
func (v Values) Keys() int { return v.keys }

// At returns the values at position index i, one per replica key; the
// slice shares the values' memory.
func (v Values) At(i int) []uint64 { return v.flat[i*v.keys : (i+1)*v.keys : (i+1)*v.keys] }

// Flat returns every value, position by position (At(i) is
// Flat()[i*Keys() : (i+1)*Keys()]), sharing the values' memory: with one
// replica key, the values of the positions in order.
func (v Values) Flat() []uint64 { return v.flat }

// Rows returns the values as one list per position, sharing their memory
// (a list header a position: for tests and small records).
func (v Values) Rows() [][]uint64 {
	rows := make([][]uint64, v.Len())
	for i := range rows {
		rows[i] = v.At(i)
	}
	return rows
}

// All iterates over the positions: their index and At(index).
func (v Values) All() iter.Seq2[int, []uint64] {
	return func(yield func(int, []uint64) bool) {
		for i := range v.Len() {
			if !yield(i, v.At(i)) {
				return
			}
		}
	}
}

// IsZero reports whether the values are absent (the zero Values), for
// the omitzero of values_block.
func (v Values) IsZero() bool { return !v.present }

// Equal reports whether v and w hold the same values in the same shape
// (absent values equal only absent ones).
func (v Values) Equal(w Values) bool {
	return v.present == w.present && v.keys == w.keys && v.Len() == w.Len() && slices.Equal(v.flat, w.flat)
}

// String formats the values as fmt formats [][]layout.Hex64.
func (v Values) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, row := range v.All() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('[')
		for k, x := range row {
			if k > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(layout.Hex64(x).String())
		}
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}

// ragged returns the first position whose list does not hold keys
// values, and that list's length.
func (v Values) ragged(keys int) (pos, n int, bad bool) {
	switch {
	case v.len0 != keys && v.Len() > 0:
		return 0, v.len0, true
	case v.badRow != 0:
		return v.badRow - 1, v.badLen, true
	}
	return 0, 0, false
}

// MarshalJSON writes the values as a list of lists of hex strings.
func (v Values) MarshalJSON() ([]byte, error) {
	if !v.present {
		return []byte("null"), nil
	}
	n := v.Len()
	b := make([]byte, 0, 2+n*(3+21*v.keys))
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for k, h := range v.At(i) {
			if k > 0 {
				b = append(b, ',')
			}
			b = appendHex(b, h)
		}
		b = append(b, ']')
	}
	return append(b, ']'), nil
}

// appendHex appends "0x" and 16 lower-case hex digits, quoted.
func appendHex(b []byte, x uint64) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '"', '0', 'x')
	for s := 60; s >= 0; s -= 4 {
		b = append(b, digits[x>>s&0xf])
	}
	return append(b, '"')
}

var rowType = reflect.TypeFor[[]layout.Hex64]()

// UnmarshalJSON reads a list of lists of hex strings (as layout.Hex64
// reads each) into one array, sized by the count of quotes in data (exact
// for hex strings), through internal/jsonscan. encoding/json has checked
// that data is one valid JSON value. null leaves the values absent. Lists
// of different lengths are kept for Validate to refuse, naming the first.
// A position that is not a list is an error before any value's.
func (v *Values) UnmarshalJSON(data []byte) error {
	// No limit but encoding/json's own: its nesting depth, the length of
	// data.
	sc := jsonscan.New(data, jsonscan.Options{MaxDepth: 10000, MaxNumber: len(data), LoneSurrogates: true})
	k, err := sc.Next()
	switch {
	case err != nil:
		return err
	case k == jsonscan.Null:
		*v = Values{}
		return nil
	case k != jsonscan.ArrayStart:
		return &json.UnmarshalTypeError{Value: jsonKind(byte(k)), Type: reflect.TypeFor[[][]layout.Hex64](), Offset: sc.TokenOffset()}
	}
	out := Values{present: true}
	flat := make([]uint64, 0, bytes.Count(data, quote)/2)
	var valueErr error // the first value's error, returned once every position is a list
	for row := 0; ; row++ {
		k, err := sc.Next()
		if err != nil {
			return err
		}
		if k == jsonscan.ArrayEnd {
			break
		}
		if k != jsonscan.ArrayStart {
			return &json.UnmarshalTypeError{Value: jsonKind(byte(k)), Type: rowType, Offset: sc.TokenOffset()}
		}
		out.rows++
		n := 0
		for {
			k, err := sc.Next()
			if err != nil {
				return err
			}
			if k == jsonscan.ArrayEnd {
				break
			}
			start := sc.TokenOffset()
			if err := sc.Skip(k); err != nil {
				return err
			}
			if valueErr != nil {
				continue
			}
			var h layout.Hex64
			if err := h.UnmarshalJSON(data[start:sc.Offset()]); err != nil {
				valueErr = err
				continue
			}
			flat = append(flat, uint64(h))
			n++
		}
		if row == 0 {
			out.len0 = n
		} else if n != out.len0 && out.badRow == 0 {
			out.badRow, out.badLen = row+1, n
		}
	}
	if valueErr != nil {
		return valueErr
	}
	if out.badRow == 0 {
		out.keys, out.flat = out.len0, flat
	}
	*v = out
	return nil
}

var quote = []byte{'"'}

// jsonKind names the kind of JSON value that starts with c, as
// json.UnmarshalTypeError does.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "object"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case '[':
		return "array"
	}
	return "number"
}
