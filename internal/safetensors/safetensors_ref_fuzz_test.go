package safetensors

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// FuzzHeaderReference: the header parser and the reference on
// encoding/json's tokenizer (safetensors_ref_test.go) accept the same
// headers with the same tensors and metadata, and refuse the same ones,
// with the same message unless it is a syntax error (whose wording and
// order differ: the reference finds a lone surrogate before anything).
func FuzzHeaderReference(f *testing.F) {
	for _, b := range corpusSeeds(f) {
		if len(b) >= 8 {
			if n := binary.LittleEndian.Uint64(b); n <= uint64(len(b)-8) {
				f.Add(b[8 : 8+n])
			}
		}
	}
	for _, h := range []string{
		`{"__metadata__":{"kvaudit.manifest":"{\"a\":\"\\u00e9\\ud83d\\ude00\"}"},"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
		`{"a":{"shape":[],"data_offsets":[0,2],"dtype":"BF16"} , "b" :{"dtype":"F4","shape":[2,0],"data_offsets":[2,2]}}  `,
		`{"__metadata__":null,"\u0061":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}}`,
		`{"__METADATA__":{},"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
		"{\"a\\tb\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}\n",
		`{"a":{"dtype":"U8","shape":[[[[[[1]]]]]],"data_offsets":[0,1]}}`,
		`{"a\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
	} {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, h []byte) {
		got, gerr := parseHeader("f", h)
		want, werr := refParseHeader("f", h)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%q: parser says %v, reference %v", h, gerr, werr)
		}
		if gerr != nil {
			if !strings.Contains(gerr.Msg, "invalid JSON") && !strings.Contains(werr.Msg, "invalid JSON") && gerr.Error() != werr.Error() {
				t.Fatalf("%q: parser says %v, reference %v", h, gerr, werr)
			}
			return
		}
		if !reflect.DeepEqual(got.Metadata, want.Metadata) || len(got.Tensors) != len(want.Tensors) {
			t.Fatalf("%q: metadata %#v, %d tensors; want %#v, %d", h, got.Metadata, len(got.Tensors), want.Metadata, len(want.Tensors))
		}
		for i := range got.Tensors {
			if !reflect.DeepEqual(got.Tensors[i], want.Tensors[i]) {
				t.Fatalf("%q: tensor %d %#v, want %#v", h, i, got.Tensors[i], want.Tensors[i])
			}
		}
	})
}
