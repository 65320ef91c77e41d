package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/parse"
)

var updateSafetensorsCorpus = flag.Bool("update-safetensors-corpus", false,
	"rewrite testdata/hostile from hostileFiles")

// fileOf returns a safetensors file: the header's length, the header, data.
func fileOf(header string, data ...byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

// rawFile returns a file whose header length field says n, followed by rest.
func rawFile(n uint64, rest string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
}

func zeros(n int) []byte { return make([]byte, n) }

type hostileCase struct {
	name string
	file []byte
	want string // expected error substring, or "ok"
}

// hostileFiles is the source of testdata/hostile: the files there
// are these bytes, and cases.txt their expected outcomes. Regenerate with
// go test ./internal/safetensors -run TestSafetensorsCorpusUpToDate -update-safetensors-corpus
func hostileFiles() []hostileCase {
	const a4 = `"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}`
	entry := func(body string) string { return `{"a":{` + body + `}}` }
	return []hostileCase{
		{"empty", nil, "file is 0 bytes, too short"},
		{"seven-bytes", []byte{1, 0, 0, 0, 0, 0, 0}, "file is 7 bytes, too short"},
		{"eight-bytes-zero-header", zeros(8), "not a JSON object: the header is empty"},
		{"header-over-limit", rawFile(100_000_001, "{}"), "header length 100000001 exceeds the 100000000-byte limit"},
		{"header-length-max-u64", rawFile(1<<64-1, "{}"), "header length 18446744073709551615 exceeds"},
		{"header-length-past-eof", rawFile(100, "{}"), "header length 100 runs past the end of the file"},
		{"header-length-one-past-eof", rawFile(3, "{}"), "runs past the end of the file"},
		{"invalid-utf8", fileOf("{\"a\xff\":{}}"), "not valid UTF-8 (at byte 3)"},
		{"invalid-utf8-overlong", fileOf("{\"\xc0\xaf\":{}}"), "not valid UTF-8"},
		{"not-object-array", fileOf(`[]`), `not a JSON object: starts with "[]"`},
		{"not-object-string", fileOf(`"a"`), `not a JSON object: starts with "\"a\""`},
		{"not-object-null", fileOf(`null`), "not a JSON object"},
		{"leading-space", fileOf(` {}`), "not a JSON object"},
		{"empty-header", fileOf(``), "not a JSON object"},
		{"bom", fileOf("\uFEFF{}"), "byte order mark"},
		{"nul-in-header", fileOf("{\"a\"\x00:{}}"), "invalid JSON at byte"},
		{"nul-in-key", fileOf("{\"a\x00\":{}}"), "invalid JSON at byte"},
		{"nul-padding", fileOf("{}\x00\x00\x00\x00\x00\x00"), "trailing data after the header object, which ends at byte 2"},
		{"truncated-json", fileOf(`{"a":{"dtype":"U8"`), "invalid JSON"},
		{"trailing-comma", fileOf(`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]},}`, 0), "invalid JSON"},
		{"trailing-json", fileOf(`{} {}`), "trailing data after the header object"},
		{"trailing-garbage", fileOf(`{}x`), "trailing data after the header object"},
		{"lone-surrogate", fileOf(`{"\ud800":{}}`), "lone UTF-16 surrogate"},
		{"lone-low-surrogate", fileOf(`{"\udc00x":{}}`), "lone UTF-16 surrogate"},
		{"duplicate-tensor", fileOf(`{`+a4+`,`+a4+`}`, 0, 0, 0, 0), `tensors["a"]: duplicate tensor name`},
		{"duplicate-tensor-escaped", fileOf(`{`+a4+`,"\u0061":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 0, 0, 0, 0), "duplicate tensor name"},
		{"duplicate-dtype", fileOf(entry(`"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]`), 0), `duplicate key "dtype"`},
		{"duplicate-shape", fileOf(entry(`"dtype":"U8","shape":[1],"shape":[1],"data_offsets":[0,1]`), 0), `duplicate key "shape"`},
		{"duplicate-offsets", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[0,1],"data_offsets":[0,1]`), 0), `duplicate key "data_offsets"`},
		{"duplicate-metadata", fileOf(`{"__metadata__":{},"__metadata__":{}}`), `duplicate key "__metadata__"`},
		{"duplicate-metadata-key", fileOf(`{"__metadata__":{"k":"1","k":"2"}}`), `metadata["k"]: duplicate key`},
		{"case-variant-key", fileOf(entry(`"DTYPE":"U8","shape":[1],"data_offsets":[0,1]`), 0), `unknown key "DTYPE" (keys are case-sensitive`},
		{"case-variant-metadata", fileOf(`{"__METADATA__":{}}`), `tensors["__METADATA__"]: keys are case-sensitive`},
		{"unknown-field", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[0,1],"stride":[1]`), 0), `unknown key "stride"`},
		{"missing-dtype", fileOf(entry(`"shape":[1],"data_offsets":[0,1]`), 0), `missing key "dtype"`},
		{"missing-shape", fileOf(entry(`"dtype":"U8","data_offsets":[0,1]`), 0), `missing key "shape"`},
		{"missing-offsets", fileOf(entry(`"dtype":"U8","shape":[1]`), 0), `missing key "data_offsets"`},
		{"tensor-not-object", fileOf(`{"a":5}`), `tensors["a"]: got number 5, want an object`},
		{"tensor-array", fileOf(`{"a":[]}`), `tensors["a"]: got an array`},
		{"unknown-dtype", fileOf(entry(`"dtype":"F128","shape":[1],"data_offsets":[0,16]`), zeros(16)...), `unknown dtype "F128"`},
		{"lowercase-dtype", fileOf(entry(`"dtype":"bf16","shape":[1],"data_offsets":[0,2]`), 0, 0), `unknown dtype "bf16" (dtype names are case-sensitive`},
		{"dtype-number", fileOf(entry(`"dtype":16,"shape":[1],"data_offsets":[0,2]`), 0, 0), `.dtype: got number 16, want a dtype name`},
		{"offsets-one", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[1]`), 0), "want exactly 2 values [begin, end], got 1"},
		{"offsets-three", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[0,1,1]`), 0), "want exactly 2 values [begin, end], got more"},
		{"offsets-empty", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[]`), 0), "got 0"},
		{"offsets-float", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[0.0,1]`), 0), "got 0.0, want a non-negative integer (not a float)"},
		{"offsets-exponent", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[0,1e0]`), 0), "not a float"},
		{"offsets-negative", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[-1,0]`), 0), "got negative -1"},
		{"offsets-string", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":["0","1"]`), 0), `got string "0", want a non-negative integer`},
		{"offsets-object", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":{"0":1}`), 0), "got an object, want an array"},
		{"offsets-too-big", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[0,9223372036854775808]`), 0), "9223372036854775808 exceeds 2^63-1"},
		{"offsets-begin-after-end", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[1,0]`), 0), "begin 1 is after end 0"},
		{"offsets-not-from-zero", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[1,2]`), 0, 0), "data must start at offset 0, the first tensor begins at 1"},
		{"offsets-huge", fileOf(entry(`"dtype":"U8","shape":[1],"data_offsets":[9223372036854775806,9223372036854775807]`), 0), "first tensor begins at 9223372036854775806"},
		{"gap", fileOf(`{`+a4+`,"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}`, zeros(12)...), `tensors["b"].data_offsets: gap: tensor "a" ends at 4, this one begins at 8`},
		{"overlap", fileOf(`{`+a4+`,"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, zeros(6)...), `tensors["b"].data_offsets: overlaps tensor "a", which ends at 4`},
		{"same-offsets", fileOf(`{`+a4+`,"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, zeros(4)...), `overlaps tensor "a"`},
		{"size-mismatch", fileOf(entry(`"dtype":"F32","shape":[3],"data_offsets":[0,8]`), zeros(8)...), `tensors["a"]: shape [3] of F32 needs 12 bytes, data_offsets [0, 8] hold 8`},
		{"size-mismatch-bf16", fileOf(entry(`"dtype":"BF16","shape":[2,3],"data_offsets":[0,6]`), zeros(6)...), "needs 12 bytes"},
		{"shape-overflow", fileOf(entry(`"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,0]`)), `tensors["a"].shape: element count of shape [4294967296 4294967296 16] overflows 64 bits`},
		{"shape-bits-overflow", fileOf(entry(`"dtype":"U64","shape":[2305843009213693952],"data_offsets":[0,0]`)), "overflow a 64-bit bit count"},
		{"shape-float", fileOf(entry(`"dtype":"U8","shape":[1.5],"data_offsets":[0,1]`), 0), ".shape: got 1.5, want a non-negative integer (not a float)"},
		{"shape-negative", fileOf(entry(`"dtype":"U8","shape":[-1],"data_offsets":[0,0]`)), ".shape: got negative -1"},
		{"shape-negative-zero", fileOf(entry(`"dtype":"U8","shape":[-0],"data_offsets":[0,1]`), 0), "got negative -0"},
		{"shape-too-big", fileOf(entry(`"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]`)), "18446744073709551616 exceeds 2^63-1"},
		{"shape-nested", fileOf(entry(`"dtype":"U8","shape":[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]],"data_offsets":[0,1]`), 0), ".shape: got an array nested in the array, want a non-negative integer"},
		{"shape-deep-nesting", fileOf(entry(`"dtype":"U8","shape":`+strings.Repeat("[", 10000)+strings.Repeat("]", 10000)+`,"data_offsets":[0,1]`), 0), "got an array nested in the array"},
		{"shape-null", fileOf(entry(`"dtype":"U8","shape":null,"data_offsets":[0,1]`), 0), ".shape: got null, want an array"},
		{"shape-bool", fileOf(entry(`"dtype":"U8","shape":[true],"data_offsets":[0,1]`), 0), ".shape: got boolean true"},
		{"f4-odd-elements", fileOf(entry(`"dtype":"F4","shape":[3],"data_offsets":[0,1]`), 0), "3 elements of F4 make 12 bits, not a whole number of bytes"},
		{"f6-misaligned", fileOf(entry(`"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,1]`), 0), "not a whole number of bytes"},
		{"trailing-bytes", fileOf(`{`+a4+`}`, zeros(5)...), "data: 1 trailing bytes after the last tensor"},
		{"no-tensors-with-data", fileOf(`{}`, 1, 2, 3), "data: 3 trailing bytes after the last tensor (tensors end at 0"},
		{"data-past-eof", fileOf(`{`+a4+`}`, 0, 0, 0), "data: tensors need 4 bytes but the data section holds only 3"},
		{"data-past-eof-huge", fileOf(entry(`"dtype":"U8","shape":[1152921504606846976],"data_offsets":[0,1152921504606846976]`)), "tensors need 1152921504606846976 bytes but the data section holds only 0"},
		{"metadata-non-string", fileOf(`{"__metadata__":{"k":1}}`), `metadata["k"]: got number 1, want a string`},
		{"metadata-nested", fileOf(`{"__metadata__":{"k":{"x":"y"}}}`), `metadata["k"]: got an object, want a string`},
		{"metadata-array", fileOf(`{"__metadata__":["k"]}`), "metadata: got an array, want an object of strings"},
		{"metadata-string", fileOf(`{"__metadata__":"k"}`), `metadata: got string "k"`},
		// Valid files: these must parse.
		{"ok-reference-example", fileOf(`{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}`, zeros(16)...), "ok"},
		{"ok-empty-object", fileOf(`{}`), "ok"},
		{"ok-metadata-only", fileOf(`{"__metadata__":{"kvaudit.manifest":"{\"format\":\"kvaudit-dump/1\"}"}}      `), "ok"},
		{"ok-metadata-null", fileOf(`{"__metadata__":null,`+a4+`}`, zeros(4)...), "ok"},
		{"ok-unsorted-zero-sized", fileOf(`{"z":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"e":{"dtype":"BF16","shape":[0,5],"data_offsets":[4,4]},"a":{"dtype":"F4","shape":[8],"data_offsets":[0,4]},"s":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, zeros(12)...), "ok"},
		{"ok-whitespace", fileOf("{ \"a\" :\n{\"data_offsets\" : [ 0 , 1 ] ,\t\"shape\":[ ],\"dtype\":\"I8\"}\r\n}  ", 7), "ok"},
		{"ok-escaped-backslash-u", fileOf(`{"\\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), "ok"},
		{"ok-escaped-names", fileOf(`{"\u00e9\ud83d\ude00\"\\":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"":{"dtype":"BOOL","shape":[],"data_offsets":[1,2]}}`, 1, 0), "ok"},
	}
}

func formatCasesTxt(cases []hostileCase) []byte {
	var b bytes.Buffer
	b.WriteString("# Expected outcomes of the safetensors files in this directory: NAME.safetensors,\n")
	b.WriteString("# then a substring of its error, or ok. Generated from hostileFiles in\n")
	b.WriteString("# safetensors_test.go (go test ./internal/safetensors -run TestSafetensorsCorpusUpToDate -update-safetensors-corpus).\n")
	for _, c := range cases {
		fmt.Fprintf(&b, "%s: %s\n", c.name, c.want)
	}
	return b.Bytes()
}

const corpusDir = "testdata/hostile"

// TestSafetensorsCorpusUpToDate checks that the committed corpus is what
// hostileFiles describes, and rewrites it with -update-safetensors-corpus.
func TestSafetensorsCorpusUpToDate(t *testing.T) {
	cases := hostileFiles()
	if *updateSafetensorsCorpus {
		old, _ := filepath.Glob(filepath.Join(corpusDir, "*.safetensors"))
		for _, p := range old {
			os.Remove(p)
		}
		os.MkdirAll(corpusDir, 0o755)
		for _, c := range cases {
			if err := os.WriteFile(filepath.Join(corpusDir, c.name+".safetensors"), c.file, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(corpusDir, "cases.txt"), formatCasesTxt(cases), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		got, err := os.ReadFile(filepath.Join(corpusDir, c.name+".safetensors"))
		if err != nil || !bytes.Equal(got, c.file) {
			t.Errorf("%s.safetensors differs from hostileFiles (err %v); rerun with -update-safetensors-corpus", c.name, err)
		}
	}
	got, err := os.ReadFile(filepath.Join(corpusDir, "cases.txt"))
	if err != nil || !bytes.Equal(got, formatCasesTxt(cases)) {
		t.Errorf("cases.txt differs from hostileFiles (err %v); rerun with -update-safetensors-corpus", err)
	}
}

// TestSafetensorsCorpus runs every file of testdata/hostile through both
// entry points and checks the outcome cases.txt names.
func TestSafetensorsCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("%s holds %d .safetensors files, want at least 20", corpusDir, len(files))
	}
	cases := testfiles.ReadCases(t, filepath.Join(corpusDir, "cases.txt"))
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".safetensors")
		want, ok := cases[name]
		if !ok {
			t.Errorf("%s has no line in cases.txt", path)
			continue
		}
		delete(cases, name)
		t.Run(name, func(t *testing.T) {
			file, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Parse(path, file)
			checkOutcome(t, "Parse", path, s, err, want)
			if s != nil {
				checkInvariants(t, s, file)
			}
			s, err = Open(path)
			checkOutcome(t, "Open", path, s, err, want)
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	for name := range cases {
		t.Errorf("cases.txt names %q, which has no file", name)
	}
}

func checkOutcome(t *testing.T, entry, path string, s *File, err error, want string) {
	t.Helper()
	if want == "ok" {
		if err != nil || s == nil {
			t.Errorf("%s: %v, want success", entry, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s succeeded, want an error containing %q", entry, want)
		return
	}
	if s != nil {
		t.Errorf("%s returned a non-nil result with error %v", entry, err)
	}
	se := parse.As(err, parse.Safetensors)
	if se == nil {
		t.Errorf("%s error %v is a %T, want *parse.Error (parse.Safetensors)", entry, err, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, want) {
		t.Errorf("%s error\n\t%s\ndoes not contain\n\t%s", entry, msg, want)
	}
	if !strings.HasPrefix(msg, "safetensors "+strconv.Quote(path)+": ") {
		t.Errorf("%s error %q does not start by naming the file", entry, msg)
	}
}

// checkInvariants re-validates a parse result against the raw file.
func checkInvariants(t *testing.T, s *File, file []byte) {
	t.Helper()
	dataStart := 8 + int64(binary.LittleEndian.Uint64(file))
	if s.DataOffset != dataStart {
		t.Fatalf("DataOffset = %d, want %d", s.DataOffset, dataStart)
	}
	var pos int64
	for i, ti := range s.Tensors {
		if ti.Begin != pos {
			t.Fatalf("tensor %d %q begins at %d, previous ends at %d", i, ti.Name, ti.Begin, pos)
		}
		size, err := ti.Dtype.ByteSize(ti.Shape)
		if err != nil || size != ti.End-ti.Begin || int64(len(ti.Data)) != size {
			t.Fatalf("tensor %q: size %d (%v), offsets [%d, %d], %d data bytes", ti.Name, size, err, ti.Begin, ti.End, len(ti.Data))
		}
		if cap(ti.Data) != len(ti.Data) {
			t.Fatalf("tensor %q: Data has spare capacity %d", ti.Name, cap(ti.Data)-len(ti.Data))
		}
		if size > 0 && &ti.Data[0] != &file[dataStart+ti.Begin] {
			t.Fatalf("tensor %q: Data is not the file's bytes at %d", ti.Name, dataStart+ti.Begin)
		}
		if got, ok := s.Tensor(ti.Name); !ok || got.Name != ti.Name || got.Begin != ti.Begin {
			t.Fatalf("Tensor(%q) = %v, %t", ti.Name, got.Name, ok)
		}
		if _, err := ParseDtype(ti.Dtype.Name); err != nil {
			t.Fatalf("tensor %q has dtype %v: %v", ti.Name, ti.Dtype, err)
		}
		pos = ti.End
	}
	if dataStart+pos != int64(len(file)) {
		t.Fatalf("tensors end at %d, file is %d bytes", dataStart+pos, len(file))
	}
}

// roundTripTensors has one tensor of every dtype plus zero-element and
// scalar tensors.
func roundTripTensors() []TensorData {
	var ts []TensorData
	fill := func(name string, d Dtype, shape ...int64) {
		size, err := d.ByteSize(shape)
		if err != nil {
			panic(err)
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(len(ts)*31 + i*7)
		}
		ts = append(ts, TensorData{Name: name, Dtype: d, Shape: shape, Data: data})
	}
	for _, d := range dtypes {
		switch d.Bits {
		case 4:
			fill("model.layers.0."+d.Name, d, 3, 6)
		case 6:
			fill("model.layers.0."+d.Name, d, 2, 4)
		default:
			fill("model.layers.0."+d.Name, d, 2, 3)
		}
	}
	bf16, _ := ParseDtype("BF16")
	f4, _ := ParseDtype("F4")
	fill("zero.first", bf16, 0, 128)
	fill("scalar", bf16)
	fill("zero.f4", f4, 0)
	fill("zero.last", bf16, 4, 0, 2)
	fill("name with \"quotes\", <html> & ünïcödé", bf16, 1)
	return ts
}

func TestSafetensorsRoundTrip(t *testing.T) {
	for _, meta := range []map[string]string{nil, {}, {"kvaudit.manifest": `{"format":"kvaudit-dump/1"}`, "a": "", "": "empty key", "ü": "\x00\n"}} {
		tensors := roundTripTensors()
		var buf bytes.Buffer
		if err := Write(&buf, meta, tensors); err != nil {
			t.Fatal(err)
		}
		file := buf.Bytes()
		n := binary.LittleEndian.Uint64(file)
		if n%8 != 0 || file[8+n-1] != '}' && file[8+n-1] != ' ' {
			t.Errorf("header length %d is not a multiple of 8 or not space-padded", n)
		}
		path := filepath.Join(t.TempDir(), "rt.safetensors")
		if err := os.WriteFile(path, file, 0o644); err != nil {
			t.Fatal(err)
		}
		parsed, err := Parse(path, file)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, parsed, file)
		opened, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*File{parsed, opened} {
			wantMeta := meta
			if len(meta) == 0 {
				wantMeta = nil
			}
			if !reflect.DeepEqual(s.Metadata, wantMeta) {
				t.Errorf("metadata = %q, want %q", s.Metadata, wantMeta)
			}
			if len(s.Tensors) != len(tensors) {
				t.Fatalf("%d tensors, want %d", len(s.Tensors), len(tensors))
			}
			// Written in order, data contiguous: sorted by Begin is the
			// written order except among zero-sized tensors at one offset.
			for _, want := range tensors {
				got, ok := s.Tensor(want.Name)
				if !ok {
					t.Fatalf("tensor %q missing", want.Name)
				}
				if got.Dtype != want.Dtype || !slices.Equal(got.Shape, want.Shape) && len(got.Shape)+len(want.Shape) > 0 || !bytes.Equal(got.Data, want.Data) {
					t.Errorf("tensor %q = %v %v %d bytes, want %v %v %d bytes", want.Name, got.Dtype, got.Shape, len(got.Data), want.Dtype, want.Shape, len(want.Data))
				}
			}
			if _, ok := s.Tensor("absent"); ok {
				t.Error(`Tensor("absent") found a tensor`)
			}
		}
		if err := opened.Close(); err != nil {
			t.Fatal(err)
		}
		if err := opened.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := parsed.Close(); err != nil {
			t.Fatalf("Close of a parsed file: %v", err)
		}
		// Deterministic output.
		var again bytes.Buffer
		if err := Write(&again, meta, tensors); err != nil || !bytes.Equal(again.Bytes(), file) {
			t.Errorf("second write differs (err %v)", err)
		}
	}
}

func TestWriteSafetensorsGolden(t *testing.T) {
	u8, _ := ParseDtype("U8")
	var buf bytes.Buffer
	err := Write(&buf, map[string]string{"b": "2", "a": "1"}, []TensorData{
		{Name: "y", Dtype: u8, Shape: []int64{2}, Data: []byte{1, 2}},
		{Name: "x", Dtype: u8, Shape: []int64{1, 1}, Data: []byte{3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	header := `{"__metadata__":{"a":"1","b":"2"},"y":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"x":{"dtype":"U8","shape":[1,1],"data_offsets":[2,3]}}`
	header += strings.Repeat(" ", (8-len(header)%8)%8)
	want := fileOf(header, 1, 2, 3)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("Write wrote\n%q\nwant\n%q", buf.Bytes(), want)
	}
	buf.Reset()
	if err := Write(&buf, nil, nil); err != nil || !bytes.Equal(buf.Bytes(), fileOf("{}      ")) {
		t.Errorf("empty file: %q, %v", buf.Bytes(), err)
	}
}

func TestWriteSafetensorsRejects(t *testing.T) {
	u8, _ := ParseDtype("U8")
	f4x2, _ := TorchDtype("float4_e2m1fn_x2")
	ok := TensorData{Name: "a", Dtype: u8, Shape: []int64{1}, Data: []byte{0}}
	for _, c := range []struct {
		meta    map[string]string
		tensors []TensorData
		want    string
	}{
		{nil, []TensorData{ok, ok}, `tensors["a"]: duplicate tensor name`},
		{nil, []TensorData{{Name: "__metadata__", Dtype: u8, Shape: []int64{0}}}, "reserved"},
		{nil, []TensorData{{Name: "\xff", Dtype: u8, Shape: []int64{0}}}, "not valid UTF-8"},
		{map[string]string{"k": "\xff"}, nil, `metadata["k"]: not valid UTF-8`},
		{nil, []TensorData{{Name: "a", Dtype: u8, Shape: []int64{2}, Data: []byte{0}}}, "shape [2] of U8 needs 2 bytes, got 1"},
		{nil, []TensorData{{Name: "a", Dtype: Dtype{"bf16", 16}, Shape: []int64{0}}}, `unknown dtype "bf16"`},
		{nil, []TensorData{{Name: "a", Dtype: f4x2, Shape: []int64{1}, Data: []byte{0}}}, `dtype "F4" with 8 bits is not a safetensors dtype`},
		{nil, []TensorData{{Name: "a", Dtype: u8, Shape: []int64{-1}}}, "negative dimension"},
		{nil, []TensorData{{Name: "a", Dtype: u8, Shape: []int64{1 << 32, 1 << 32}}}, "overflows"},
	} {
		var buf bytes.Buffer
		err := Write(&buf, c.meta, c.tensors)
		se := parse.As(err, parse.Safetensors)
		if se == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Write error = %v, want a *parse.Error (parse.Safetensors) containing %q", err, c.want)
		}
		if buf.Len() != 0 {
			t.Errorf("Write wrote %d bytes before failing", buf.Len())
		}
	}
}

func TestSafetensorsErrorFormat(t *testing.T) {
	e := &parse.Error{Format: parse.Safetensors, File: "x/y.safetensors", Field: `tensors["a.b"].data_offsets`, Msg: "begin 2 is after end 1"}
	if got, want := e.Error(), `safetensors "x/y.safetensors": tensors["a.b"].data_offsets: begin 2 is after end 1`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e.Field = ""
	if got, want := e.Error(), `safetensors "x/y.safetensors": begin 2 is after end 1`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestOpenSafetensorsMissing(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "absent.safetensors"))
	if s != nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(absent) = %v, %v; want ErrNotExist", s, err)
	}
}

func TestOpenSafetensorsTruncatedWhileMapped(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("files are read into memory on " + runtime.GOOS)
	}
	u8, _ := ParseDtype("U8")
	big := bytes.Repeat([]byte{7}, 8*os.Getpagesize())
	var buf bytes.Buffer
	if err := Write(&buf, nil, []TensorData{{Name: "big", Dtype: u8, Shape: []int64{int64(len(big))}, Data: big}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shrinking.safetensors")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Truncate(path, int64(os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
	tensor, _ := s.Tensor("big")
	err = mapped.Guard(path, func() error {
		var sum int
		for _, b := range tensor.Data {
			sum += int(b)
		}
		return fmt.Errorf("read all %d bytes (sum %d) of a truncated file", len(tensor.Data), sum)
	})
	var fe *mapped.FaultError
	if !errors.As(err, &fe) || fe.What != path {
		t.Fatalf("Guard error = %v, want a *FaultError naming %q", err, path)
	}
}
