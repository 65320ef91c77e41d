package wire

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestSplitJSONDocs: the ranges of the values of an input, or the error
// of the split, each written out by hand.
func TestSplitJSONDocs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // the ranges, or the error
	}{
		{`{}`, `[[0 2]]`},
		{` {"a":"}"} [1,"]\"["]` + "\n", `[[1 10] [11 21]]`},
		{`{}{}[]`, `[[0 2] [2 4] [4 6]]`},
		{`"x" 1 null {"k":[]}`, `[[0 3] [4 5] [6 10] [11 19]]`},
		{`{"a":"\u005d"}` + "\t\r\n ", `[[0 14]]`},
		// A value with a syntax error: it and the rest are the last range.
		{`{} {"a":1,} {}`, `[[0 2] [3 14]]`},
		{`{} x {}`, `[[0 2] [3 7]]`},
		{`{]`, `[[0 2]]`},
		// Errors of the split.
		{``, `unexpected end of JSON input`},
		{" \n\t", `unexpected end of JSON input`},
		{`{`, `unexpected end of input (a value opened at offset 0 does not close)`},
		{`{} {"a":[1,2]`, `unexpected end of input (a value opened at offset 3 does not close)`},
		{`{} "abc`, `unexpected end of input (a value opened at offset 3 does not close)`},
		{`{} {"a":"}"`, `unexpected end of input (a value opened at offset 3 does not close)`},
		{`}`, `unbalanced '}' at offset 0`},
		{`{}  ]`, `unbalanced ']' at offset 4`},
		{`[{}]}`, `unbalanced '}' at offset 4`},
	} {
		docs, err := splitJSONDocs([]byte(c.in))
		got := fmt.Sprint(docs)
		if err != nil {
			got = err.Error()
			if docs != nil {
				t.Errorf("%q: ranges %v beside the error", c.in, docs)
			}
		}
		if got != c.want {
			t.Errorf("%q: got %s, want %s", c.in, got, c.want)
		}
	}
}

// TestSplitJSONDocsRandom: values encoding/json writes, one after the other
// with whitespace between, split at the ranges they were written at; the
// bracket matcher splitJSONDocs replaced (oldSplitJSONDocs) agrees.
func TestSplitJSONDocsRandom(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var in []byte
		var want [][2]int
		for range rapid.IntRange(1, 5).Draw(t, "docs") {
			in = append(in, rapid.SampledFrom([]string{"", " ", "\n", "\t\r\n "}).Draw(t, "ws")...)
			if len(want) > 0 && len(in) == want[len(want)-1][1] {
				in = append(in, ' ') // two scalars must not touch
			}
			v := genValue(t, 3)
			var b []byte
			var err error
			if rapid.Bool().Draw(t, "indent") {
				b, err = json.MarshalIndent(v, "", " ")
			} else {
				b, err = json.Marshal(v)
			}
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, [2]int{len(in), len(in) + len(b)})
			in = append(in, b...)
		}
		in = append(in, rapid.SampledFrom([]string{"", " ", "\n"}).Draw(t, "trailing")...)
		got, err := splitJSONDocs(in)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q: got %v, %v; want %v", in, got, err, want)
		}
		if old, err := oldSplitJSONDocs(in); err != nil || fmt.Sprint(old) != fmt.Sprint(want) {
			t.Fatalf("%q: the bracket matcher says %v, %v; want %v", in, old, err, want)
		}
	})
}

// genValue draws a value for encoding/json to write: strings full of the
// bytes a bracket matcher trips on.
func genValue(t *rapid.T, depth int) any {
	kind := rapid.IntRange(0, 5).Draw(t, "kind")
	if depth == 0 {
		kind %= 4
	}
	switch kind {
	case 0:
		return rapid.Float64().Draw(t, "num")
	case 1:
		return rapid.SampledFrom([]any{nil, true, false}).Draw(t, "lit")
	case 2, 3:
		return genString(t)
	case 4:
		out := []any{}
		for range rapid.IntRange(0, 4).Draw(t, "n") {
			out = append(out, genValue(t, depth-1))
		}
		return out
	}
	out := map[string]any{}
	for range rapid.IntRange(0, 4).Draw(t, "n") {
		out[genString(t)] = genValue(t, depth-1)
	}
	return out
}

func genString(t *rapid.T) string {
	return rapid.StringOfN(rapid.SampledFrom([]rune(`ab{}[]"\:, é`+"\n\x01\u2028")), 0, 8, -1).Draw(t, "str")
}

// FuzzSplitJSONDocs: the ranges are in order, apart, within the input,
// with only whitespace between; where every range the bracket matcher
// splitJSONDocs replaced gives is one valid value, the two agree.
func FuzzSplitJSONDocs(f *testing.F) {
	for _, s := range []string{`{} []`, `{"a":"}"} 1 "x" null`, `{`, `}`, `{} {"a":1,}`, `1 2`, `"\"" {"\\":[]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := splitJSONDocs(data)
		if err != nil {
			if docs != nil {
				t.Fatalf("ranges %v beside %v", docs, err)
			}
		} else {
			prev := 0
			for i, d := range docs {
				if d[0] < prev || d[1] <= d[0] || d[1] > len(data) || strings.TrimLeft(string(data[prev:d[0]]), " \t\r\n") != "" {
					t.Fatalf("range %d %v after %d", i, d, prev)
				}
				prev = d[1]
			}
			if strings.TrimLeft(string(data[prev:]), " \t\r\n") != "" {
				t.Fatalf("%q after the last range", data[prev:])
			}
		}
		old, oerr := oldSplitJSONDocs(data)
		if oerr != nil {
			return
		}
		prev := 0
		for _, d := range old {
			if !json.Valid(data[d[0]:d[1]]) || strings.TrimLeft(string(data[prev:d[0]]), " \t\r\n") != "" || nested(data[d[0]:d[1]]) > 64 {
				return
			}
			prev = d[1]
		}
		if err != nil || fmt.Sprint(docs) != fmt.Sprint(old) {
			t.Fatalf("%q: got %v, %v; the bracket matcher %v", data, docs, err, old)
		}
	})
}

// nested is how deep the brackets of valid JSON nest.
func nested(data []byte) int {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return 0
	}
	var depth func(any) int
	depth = func(v any) int {
		d := 0
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				d = max(d, depth(e))
			}
			return d + 1
		case map[string]any:
			for _, e := range v {
				d = max(d, depth(e))
			}
			return d + 1
		}
		return 0
	}
	return depth(v)
}
