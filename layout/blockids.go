package layout

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
)

// NoBlock marks a null entry of a block table: a position whose block this
// rank does not hold (docs/spec.md §10).
const NoBlock = math.MinInt

// BlockIDs is one group's block table: a block id per block position, or
// NoBlock where the manifest says null. It decodes its JSON array directly,
// one machine word per entry, so a long table costs about as much memory as
// its text (a []*int cost a pointer and a separately allocated int each).
type BlockIDs []int

var (
	blockIDsType = reflect.TypeFor[BlockIDs]()
	blockIDType  = reflect.TypeFor[int]()
)

// UnmarshalJSON decodes an array of integers and nulls. It rejects what
// encoding/json rejects for a []*int, with the same *json.UnmarshalTypeError
// (the decoder adds the field's path), so the errors read as before.
func (b *BlockIDs) UnmarshalJSON(data []byte) error {
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
		return &json.UnmarshalTypeError{Value: jsonKind(data), Type: blockIDsType}
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
		return &json.UnmarshalTypeError{Value: jsonKind(e), Type: blockIDType}
	})
	if err != nil {
		return err
	}
	*b = ids
	return nil
}

// MarshalJSON writes the table as an array with null for NoBlock.
func (b BlockIDs) MarshalJSON() ([]byte, error) {
	if b == nil {
		return []byte("null"), nil
	}
	out := make([]byte, 0, 2+4*len(b))
	out = append(out, '[')
	for i, id := range b {
		if i > 0 {
			out = append(out, ',')
		}
		if id == NoBlock {
			out = append(out, "null"...)
		} else {
			out = strconv.AppendInt(out, int64(id), 10)
		}
	}
	return append(out, ']'), nil
}

// jsonKind names the kind of the JSON value that starts data, as
// encoding/json's type errors do.
func jsonKind(data []byte) string {
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
