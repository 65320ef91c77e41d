package main

import (
	"strings"
	"testing"
)

// TestJSONSchemaValidator: each keyword of the subset accepts what it
// should and reports what it should not, with the path.
func TestJSONSchemaValidator(t *testing.T) {
	s, err := parseSchema([]byte(`{
	  "$defs": {"hex64": {"type": "string", "pattern": "^0x[0-9a-f]{16}$"}},
	  "type": "object",
	  "required": ["format", "n", "list"],
	  "properties": {
	    "format": {"const": "kvaudit-x/1"},
	    "n": {"type": "integer"},
	    "f": {"type": "number"},
	    "v": {"enum": ["a", "b"]},
	    "opt": {"type": ["array", "null"]},
	    "list": {"type": "array", "items": {"$ref": "#/$defs/hex64"}},
	    "strict": {"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties": false},
	    "map": {"type": "object", "additionalProperties": {"type": "integer"}}
	  }
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		doc  string
		want []string // substrings of the errors, in order; none means valid
	}{
		{`{"format": "kvaudit-x/1", "n": 3, "list": ["0x0123456789abcdef"], "extra": {}}`, nil},
		{`{"format": "kvaudit-x/1", "n": 3, "f": 2, "v": "b", "opt": null, "list": [], "strict": {"a": true}, "map": {"x": 1}}`, nil},
		{`{"format": "kvaudit-x/1", "n": 3, "opt": [1]}`, []string{`$: lacks required field "list"`}},
		{`{"format": "kvaudit-x/2", "n": 3, "list": []}`, []string{`$.format: is "kvaudit-x/2", want "kvaudit-x/1"`}},
		{`{"format": "kvaudit-x/1", "n": 3.5, "list": []}`, []string{"$.n: is number, want integer"}},
		{`{"format": "kvaudit-x/1", "n": "3", "list": []}`, []string{"$.n: is string, want integer"}},
		{`{"format": "kvaudit-x/1", "n": 1, "f": "x", "list": []}`, []string{"$.f: is string, want number"}},
		{`{"format": "kvaudit-x/1", "n": 1, "v": "c", "list": []}`, []string{`$.v: is "c", want one of ["a","b"]`}},
		{`{"format": "kvaudit-x/1", "n": 1, "opt": {}, "list": []}`, []string{"$.opt: is object, want array or null"}},
		{`{"format": "kvaudit-x/1", "n": 1, "list": ["0x1", 7]}`, []string{`$.list[0]: "0x1" does not match`, "$.list[1]: is integer, want string"}},
		{`{"format": "kvaudit-x/1", "n": 1, "list": [], "strict": {"a": 1, "b": 2}}`, []string{"$.strict.a: is integer, want boolean", "$.strict.b: field not allowed"}},
		{`{"format": "kvaudit-x/1", "n": 1, "list": [], "map": {"x": "1"}}`, []string{"$.map.x: is string, want integer"}},
		{`[]`, []string{"$: is array, want object"}},
		{`{"format": "kvaudit-x/1"} {}`, []string{"more than one JSON value"}},
	} {
		errs := s.validate([]byte(c.doc))
		if len(errs) != len(c.want) {
			t.Errorf("%s: errors %q, want %d matching %q", c.doc, errs, len(c.want), c.want)
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(errs[i], w) {
				t.Errorf("%s: error %q, want it to contain %q", c.doc, errs[i], w)
			}
		}
	}
	// documented: a field the schema's properties do not list is an error
	// (not where additionalProperties says what others may be).
	s.documented = true
	errs := s.validate([]byte(`{"format": "kvaudit-x/1", "n": 1, "list": [], "extra": 1, "map": {"x": 1}, "strict": {"a": true}}`))
	if len(errs) != 1 || !strings.Contains(errs[0], "$.extra: field not documented") {
		t.Errorf("documented: errors %q, want one for $.extra", errs)
	}
	for _, bad := range []string{
		`{"oneOf": []}`, `{"$ref": "other.json"}`, `{"$ref": "#/$defs/missing"}`,
		`{"pattern": "("}`, `{"properties": {"a": {"minimum": 1}}}`, `{"items": true}`,
	} {
		if _, err := parseSchema([]byte(bad)); err == nil {
			t.Errorf("parseSchema(%s) accepted a schema outside the subset", bad)
		}
	}
}
