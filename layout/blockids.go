package layout

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/jsonscan"
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
// (the decoder adds the field's path), so the errors read as before. It
// reads data through internal/jsonscan into a table sized by the array's
// commas (exactly, for a table of integers and nulls).
func (b *BlockIDs) UnmarshalJSON(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &json.UnmarshalTypeError{Value: "empty", Type: blockIDsType}
	}
	// encoding/json hands over one valid value: no limit on a number but
	// its length. Nothing is read deeper than an element's first token.
	sc := jsonscan.New(data, jsonscan.Options{MaxNumber: len(data)})
	k, err := sc.Next()
	switch {
	case err != nil:
		return err
	case k == jsonscan.Null:
		*b = nil
		return nil
	case k != jsonscan.ArrayStart:
		return &json.UnmarshalTypeError{Value: jsonKind(k), Type: blockIDsType}
	}
	var ids BlockIDs
	for {
		k, err := sc.Next()
		if err != nil {
			return err
		}
		switch k {
		case jsonscan.ArrayEnd:
			if ids == nil {
				ids = BlockIDs{}
			}
			*b = ids
			return nil
		case jsonscan.Null, jsonscan.Number:
			id := NoBlock
			if k == jsonscan.Number {
				e := sc.Bytes()
				v, err := strconv.ParseInt(string(e), 10, strconv.IntSize)
				if err != nil || v == NoBlock {
					// A fraction, an exponent or a value beyond int; and
					// the one int that would read back as null.
					return &json.UnmarshalTypeError{Value: "number " + string(e), Type: blockIDType}
				}
				id = int(v)
			}
			if ids == nil { // the first element: size the table once
				ids = make(BlockIDs, 0, bytes.Count(data, comma)+1)
			}
			ids = append(ids, id)
			continue
		}
		return &json.UnmarshalTypeError{Value: jsonKind(k), Type: blockIDType}
	}
}

var comma = []byte{','}

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

// jsonKind names the kind of the JSON value that starts with token k, as
// encoding/json's type errors do.
func jsonKind(k jsonscan.Kind) string {
	switch k {
	case jsonscan.ObjectStart:
		return "object"
	case jsonscan.ArrayStart:
		return "array"
	case jsonscan.String:
		return "string"
	case jsonscan.True, jsonscan.False:
		return "bool"
	case jsonscan.Null:
		return "null"
	}
	return "number"
}
