package layout

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzHeaderFast: whatever header the fast parser accepts, the careful one
// accepts too, with the same tensors and metadata; so the fast path never
// changes a result or hides an error.
func FuzzHeaderFast(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(stCorpusDir, "*.safetensors"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
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
	} {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, h []byte) {
		if !utf8.Valid(h) || stCheckSurrogates(h) != "" {
			return // the fast path is not tried on these
		}
		fast, ok := parseHeaderFast("f", h)
		if !ok {
			return
		}
		slow, serr := parseSafetensorsHeader("f", h)
		if serr != nil {
			t.Fatalf("the fast parser accepts %q, the careful one says %v", h, serr)
		}
		if !reflect.DeepEqual(fast.Metadata, slow.Metadata) {
			t.Fatalf("%q: metadata %#v, want %#v", h, fast.Metadata, slow.Metadata)
		}
		if len(fast.Tensors) != len(slow.Tensors) {
			t.Fatalf("%q: %d tensors, want %d", h, len(fast.Tensors), len(slow.Tensors))
		}
		for i := range fast.Tensors {
			if !reflect.DeepEqual(fast.Tensors[i], slow.Tensors[i]) {
				t.Fatalf("%q: tensor %d %#v, want %#v", h, i, fast.Tensors[i], slow.Tensors[i])
			}
		}
	})
}

// TestHeaderFastTaken: what kvaudit and the reference writer produce (an
// embedded manifest full of escapes, padding spaces) takes the fast path.
func TestHeaderFastTaken(t *testing.T) {
	file := bigHeaderFile(t, 1<<16)
	n := binary.LittleEndian.Uint64(file)
	s, ok := parseHeaderFast("f", file[8:8+n])
	if !ok || len(s.Tensors) == 0 {
		t.Fatal("a header writeSafetensors wrote did not take the fast path")
	}
	h := []byte(`{"__metadata__":{"kvaudit.manifest":"{\"format\": \"kvaudit-dump/1\",\n \"x\": \"\\u00e9\"}"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}    `)
	if s, ok := parseHeaderFast("f", h); !ok || s.Metadata["kvaudit.manifest"] != "{\"format\": \"kvaudit-dump/1\",\n \"x\": \"\\u00e9\"}" {
		t.Fatalf("got %v, %v", s, ok)
	}
}
