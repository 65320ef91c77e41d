package main

// A validator for the subset of JSON Schema (draft 2020-12) that
// docs/schemas uses: type (a name or a list), const, enum, pattern,
// required, properties, additionalProperties (false or a schema), items,
// and $ref to "#/$defs/NAME". Anything else in a schema is an error, so a
// schema cannot silently rely on a keyword this validator ignores.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
)

type jsonSchema struct {
	root map[string]any
	// documented makes a field of an object whose schema lists properties
	// but says nothing of others an error: the schema must document every
	// field an output carries (readers may still ignore unknown fields).
	documented bool
}

// parseSchema reads a schema and checks that it only uses known keywords.
func parseSchema(b []byte) (*jsonSchema, error) {
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, err
	}
	s := &jsonSchema{root: root}
	if err := s.checkKeywords(root, "#"); err != nil {
		return nil, err
	}
	return s, nil
}

var schemaKeywords = []string{
	"$schema", "$id", "$defs", "$ref", "title", "description",
	"type", "const", "enum", "pattern", "required", "properties", "additionalProperties", "items",
}

func (s *jsonSchema) checkKeywords(node map[string]any, at string) error {
	for k, v := range node {
		if !slices.Contains(schemaKeywords, k) {
			return fmt.Errorf("%s: keyword %q is not supported by this validator", at, k)
		}
		switch k {
		case "$defs", "properties":
			m, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("%s/%s: want an object", at, k)
			}
			for name, sub := range m {
				sm, ok := sub.(map[string]any)
				if !ok {
					return fmt.Errorf("%s/%s/%s: want a schema", at, k, name)
				}
				if err := s.checkKeywords(sm, at+"/"+k+"/"+name); err != nil {
					return err
				}
			}
		case "items", "additionalProperties":
			if sm, ok := v.(map[string]any); ok {
				if err := s.checkKeywords(sm, at+"/"+k); err != nil {
					return err
				}
			} else if _, ok := v.(bool); !ok || k == "items" {
				return fmt.Errorf("%s/%s: want a schema", at, k)
			}
		case "pattern":
			p, ok := v.(string)
			if !ok {
				return fmt.Errorf("%s/pattern: want a string", at)
			}
			if _, err := regexp.Compile(p); err != nil {
				return fmt.Errorf("%s/pattern: %v", at, err)
			}
		case "$ref":
			if _, err := s.resolve(v); err != nil {
				return fmt.Errorf("%s: %v", at, err)
			}
		}
	}
	return nil
}

func (s *jsonSchema) resolve(ref any) (map[string]any, error) {
	r, _ := ref.(string)
	name, ok := strings.CutPrefix(r, "#/$defs/")
	if !ok {
		return nil, fmt.Errorf("$ref %q: only #/$defs/NAME is supported", r)
	}
	defs, _ := s.root["$defs"].(map[string]any)
	def, ok := defs[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("$ref %q: no such definition", r)
	}
	return def, nil
}

// validate checks a JSON document and returns every violation, each as
// "PATH: what is wrong" (PATH like $.requests[0].id).
func (s *jsonSchema) validate(doc []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []string{"$: not JSON: " + err.Error()}
	}
	if dec.More() {
		return []string{"$: more than one JSON value"}
	}
	var errs []string
	s.check(s.root, v, "$", &errs)
	return errs
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if f, err := x.Float64(); err == nil && f == math.Trunc(f) && !strings.ContainsAny(x.String(), ".eE") {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func typeMatches(want string, got string) bool {
	return want == got || (want == "number" && got == "integer")
}

func (s *jsonSchema) check(node map[string]any, v any, at string, errs *[]string) {
	fail := func(format string, args ...any) {
		*errs = append(*errs, at+": "+fmt.Sprintf(format, args...))
	}
	if ref, ok := node["$ref"]; ok {
		def, err := s.resolve(ref)
		if err != nil {
			fail("%v", err)
			return
		}
		s.check(def, v, at, errs)
	}
	got := jsonType(v)
	if t, ok := node["type"]; ok {
		var want []string
		switch x := t.(type) {
		case string:
			want = []string{x}
		case []any:
			for _, y := range x {
				want = append(want, fmt.Sprint(y))
			}
		}
		if !slices.ContainsFunc(want, func(w string) bool { return typeMatches(w, got) }) {
			fail("is %s, want %s", got, strings.Join(want, " or "))
			return
		}
	}
	if c, ok := node["const"]; ok && !jsonEqual(c, v) {
		fail("is %s, want %s", compact(v), compact(c))
	}
	if e, ok := node["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return jsonEqual(x, v) }) {
		fail("is %s, want one of %s", compact(v), compact(e))
	}
	if p, ok := node["pattern"].(string); ok {
		if str, isStr := v.(string); isStr && !regexp.MustCompile(p).MatchString(str) {
			fail("%q does not match %s", str, p)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		required, _ := node["required"].([]any)
		for _, r := range required {
			if _, ok := x[r.(string)]; !ok {
				fail("lacks required field %q", r)
			}
		}
		props, _ := node["properties"].(map[string]any)
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub := at + "." + k
			if p, ok := props[k].(map[string]any); ok {
				s.check(p, x[k], sub, errs)
				continue
			}
			switch ap := node["additionalProperties"].(type) {
			case bool:
				if !ap {
					*errs = append(*errs, sub+": field not allowed")
				}
			case map[string]any:
				s.check(ap, x[k], sub, errs)
			case nil:
				if s.documented && props != nil {
					*errs = append(*errs, sub+": field not documented in the schema")
				}
			}
		}
	case []any:
		if items, ok := node["items"].(map[string]any); ok {
			for i, y := range x {
				s.check(items, y, fmt.Sprintf("%s[%d]", at, i), errs)
			}
		}
	}
}

func jsonEqual(a, b any) bool {
	return compact(a) == compact(b)
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
