package wire_test

import (
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

// TestValuesJSON: Values read and write the JSON encoding/json gives
// [][]layout.Hex64 (the second implementation), for random lists of any
// shape, with short and long hex, spaces and escapes; lists of different
// lengths decode to values that hold none and say which list differs.
func TestValuesJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.IntRange(0, 4).Draw(t, "keys")
		rows := [][]layout.Hex64{}
		for range rapid.IntRange(0, 20).Draw(t, "positions") {
			row := make([]layout.Hex64, keys)
			for k := range row {
				row[k] = layout.Hex64(rapid.Uint64().Draw(t, "v"))
			}
			rows = append(rows, row)
		}
		ragged := -1
		if len(rows) > 1 && rapid.Bool().Draw(t, "ragged") {
			ragged = rapid.IntRange(1, len(rows)-1).Draw(t, "row")
			rows[ragged] = append(rows[ragged], 7)
		}
		b, _ := json.Marshal(rows)
		text := string(b)
		if rapid.Bool().Draw(t, "spaced") {
			text = strings.ReplaceAll(strings.ReplaceAll(text, ",", " ,\n "), "[", "[ \t")
		}
		if rapid.Bool().Draw(t, "short hex") {
			text = strings.ReplaceAll(text, `"0x0`, `"0x`) // one digit fewer
		}
		var v wire.Values
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		var want [][]layout.Hex64
		if err := json.Unmarshal([]byte(text), &want); err != nil {
			t.Fatal(err)
		}
		if v.IsZero() || v.Len() != len(want) {
			t.Fatalf("%s: %d positions (zero %v), want %d", text, v.Len(), v.IsZero(), len(want))
		}
		if ragged >= 0 {
			if v.Keys() != 0 || v.Flat() != nil {
				t.Fatalf("ragged %s: keys %d", text, v.Keys())
			}
			return
		}
		for i, row := range v.All() {
			got := make([]layout.Hex64, len(row))
			for k, x := range row {
				got[k] = layout.Hex64(x)
			}
			if !slices.Equal(got, want[i]) {
				t.Fatalf("%s: position %d: %v, want %v", text, i, got, want[i])
			}
		}
		mine, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		theirs, _ := json.Marshal(want)
		if len(want) > 0 && keys == 0 {
			theirs = []byte(strings.Repeat("[],", len(want)))
			theirs = append(append([]byte{'['}, theirs[:len(theirs)-1]...), ']')
		}
		if string(mine) != string(theirs) {
			t.Fatalf("MarshalJSON %s, encoding/json %s", mine, theirs)
		}
	})
}

// TestValuesEdges: null is absent and [] present; what is not a list of
// lists of hex strings is the error encoding/json gives [][]layout.Hex64.
func TestValuesEdges(t *testing.T) {
	var v wire.Values
	if err := json.Unmarshal([]byte(`null`), &v); err != nil || !v.IsZero() {
		t.Errorf("null: %v, zero %v", err, v.IsZero())
	}
	if err := json.Unmarshal([]byte(` [ ] `), &v); err != nil || v.IsZero() || v.Len() != 0 {
		t.Errorf("[]: %v, zero %v, %d", err, v.IsZero(), v.Len())
	}
	for _, doc := range []string{`{"v": {}}`, `{"v": [5]}`, `{"v": [["0xzz"]]}`, `{"v": [[5]]}`, `{"v": "x"}`, `{"v": [{}]}`} {
		var mine struct{ V wire.Values }
		var theirs struct{ V [][]layout.Hex64 }
		e1, e2 := json.Unmarshal([]byte(doc), &mine), json.Unmarshal([]byte(doc), &theirs)
		if e1 == nil || e2 == nil || e1.Error() != e2.Error() {
			t.Errorf("%s: %v, encoding/json says %v", doc, e1, e2)
		}
	}
	if got := wire.ValuesOf([]uint64{1, 2}, []uint64{3, 4}).String(); got != "[[0x0000000000000001 0x0000000000000002] [0x0000000000000003 0x0000000000000004]]" {
		t.Errorf("String: %s", got)
	}
}

// TestValuesMemory: a million values decode into one array of 8 MB, not a
// list per position (about four times that).
func TestValuesMemory(t *testing.T) {
	data := []byte("[" + strings.Repeat(`["0x0"],`, 1<<20-1) + `["0x0"]]`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var v wire.Values
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if v.Len() != 1<<20 {
		t.Fatalf("%d positions", v.Len())
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 9<<20 {
		t.Errorf("decoding 1M values allocated %d MB, want about 8", n>>20)
	}
}
