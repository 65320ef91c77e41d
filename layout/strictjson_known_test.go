package layout

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// decoderUnknown is the second implementation: encoding/json's Decoder
// with DisallowUnknownFields; "?" when another error comes first.
func decoderUnknown(data []byte, v any) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	switch err := dec.Decode(v); {
	case err == nil:
		return ""
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return err.Error()
	}
	return "?"
}

type knownInner struct {
	A int `json:"a"`
	B Hex64
}

type knownEmbedded struct {
	E string `json:"e"`
}

type knownDoc struct {
	knownEmbedded
	Name    string                `json:"name"`
	Skip    int                   `json:"-"`
	Inner   *knownInner           `json:"inner"`
	List    []knownInner          `json:"list"`
	Map     map[string]knownInner `json:"map"`
	Any     any                   `json:"any"`
	Blocks  BlockIDs              `json:"blocks"`
	Untaged int
}

// TestUnknownField: the scan finds the unknown keys encoding/json's
// DisallowUnknownFields finds, in nested structs, lists, maps and
// embedded structs, with case-insensitive names, and never inside a value
// that decodes itself or an interface; on the manifest corpus it agrees
// with the Decoder.
func TestUnknownField(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{"name": "x", "e": "y", "untaged": 1, "UNTAGED": 2}`, ""},
		{`{"inner": {"a": 1, "b": "0x1", "c": 2}}`, `json: unknown field "c"`},
		{`{"list": [{"a": 1}, {"z\u0061": 1}]}`, `json: unknown field "za"`},
		{`{"map": {"k": {"a": 1}, "l": {"q": 1}}}`, `json: unknown field "q"`},
		{`{"any": {"whatever": [1, {"x": 2}]}, "blocks": [1, null]}`, ""},
		{`{"skip": 1}`, `json: unknown field "skip"`},
		{`{"name": "{\"nope\": 1}", "list": []}`, ""},
		{`{"x": 1, "y": 2}`, `json: unknown field "x"`},
	} {
		got := ""
		if err := unknownField([]byte(c.doc), reflect.TypeFor[*knownDoc]()); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.doc, got, c.want)
		}
		if d := decoderUnknown([]byte(c.doc), &knownDoc{}); d != c.want {
			t.Errorf("%s: the Decoder says %q, the case %q", c.doc, d, c.want)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "manifest", "*.json"))
	if len(files) < 20 {
		t.Fatalf("%d manifests in the corpus", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(data) || !utf8.Valid(data) {
			continue // DecodeStrictJSON refuses it before unknownField
		}
		got := ""
		if err := unknownField(data, reflect.TypeFor[*Manifest]()); err != nil {
			got = err.Error()
		}
		if want := decoderUnknown(data, &Manifest{}); want != "?" && got != want {
			t.Errorf("%s: got %q, the Decoder %q", f, got, want)
		}
	}
}
