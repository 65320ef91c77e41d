package side

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
)

// oldRepeatedKeys is repeatedKeys as it was before it read through
// internal/jsonscan: a hand-written walker, kept as the reference of
// FuzzRepeatedKeysLikeOld.
func oldRepeatedKeys(text []byte) map[string]int {
	counts := map[string]int{}
	depth, key := 0, false
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '"':
			j := i + 1
			for ; j < len(text) && text[j] != '"'; j++ {
				if text[j] == '\\' {
					j++
				}
			}
			if depth == 1 && key {
				var k string
				if json.Unmarshal(text[i:min(j+1, len(text))], &k) == nil {
					counts[k]++
				}
				key = false
			}
			i = j
		case '{', '[':
			depth++
			key = depth == 1
		case '}', ']':
			depth--
		case ',':
			key = depth == 1
		}
	}
	for k, n := range counts {
		if n < 2 {
			delete(counts, k)
		}
	}
	return counts
}

// FuzzRepeatedKeysLikeOld: on what json.Unmarshal takes as an object,
// repeatedKeys counts the keys the walker it replaced counted.
func FuzzRepeatedKeysLikeOld(f *testing.F) {
	for _, s := range []string{`{"a": 1, "a": 2}`, `{"a": {"a": 1, "a": 2}, "b": [{"b": 1}, {"b": 2}]}`, `{"a\"b": 1, "a\"b": 2}`,
		`{"a": "x, \"a\": y", "a": 3}`, `{"x\\": 1, "x\\": 2}`, "{\"a\xff\": 1, \"a\xfe\": 2}", `{"\ud800": 1, "\udc00": 2}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return
		}
		if got, want := repeatedKeys(data), oldRepeatedKeys(data); !maps.Equal(got, want) {
			t.Fatalf("%q: %v, the old walker %v", data, got, want)
		}
		for k, n := range repeatedKeys(data) {
			if _, ok := obj[k]; !ok || n < 2 {
				t.Fatalf("%q: key %q counted %d times, json.Unmarshal keys %q", data, k, n, slices.Sorted(maps.Keys(obj)))
			}
		}
	})
}

// BenchmarkRepeatedKeys counts the keys of a 10 MB map of 100 request ids
// to base64 payloads (what checksum -o payload prints) through
// internal/jsonscan (new) and with the walker it replaced (old).
func BenchmarkRepeatedKeys(b *testing.B) {
	obj := map[string][]byte{}
	for i := range 100 {
		obj[fmt.Sprintf("req-%d", i)] = make([]byte, 75_000) // 100 KB of base64
	}
	data, err := json.MarshalIndent(obj, "", " ")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		count func([]byte) map[string]int
	}{{"old", oldRepeatedKeys}, {"new", repeatedKeys}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if n := c.count(data); len(n) != 0 {
					b.Fatal(n)
				}
			}
		})
	}
}
