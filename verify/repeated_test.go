package verify

import (
	"maps"
	"testing"
)

// TestRepeatedKeys: the keys a JSON object's top level holds more than
// once, as Python's json.loads reads them (escapes decoded), never keys of
// nested objects or strings that look like keys.
func TestRepeatedKeys(t *testing.T) {
	for _, c := range []struct {
		text string
		want map[string]int
	}{
		{`{}`, map[string]int{}},
		{`{"a": 1, "b": 2}`, map[string]int{}},
		{`{"a": 1, "a": 2, "a": {"a": 3}}`, map[string]int{"a": 3}},
		{`{"kv_checksums": "x", "kv_check\u0073ums": "y"}`, map[string]int{"kv_checksums": 2}},
		{`{"s": "\"kv\", \"kv\"", "kv": [{"kv": 1}, "kv"], "t": {"kv": 1, "kv": 2}}`, map[string]int{}},
		{`{"q\\": 1, "q\\": [1, {"x": ","}]}`, map[string]int{`q\`: 2}},
	} {
		if got := repeatedKeys([]byte(c.text)); !maps.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.text, got, c.want)
		}
	}
}
