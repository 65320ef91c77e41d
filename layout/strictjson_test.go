package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// keyCases exercise checkJSONKeys: each with the error it must give ("" for
// none), independently of how it is found.
var keyCases = []struct{ in, want string }{
	{`{"a":1,"b":[1,2,{"c":3}]}`, ""},
	{`{"a":1,"a":2}`, `(top level): duplicate key "a"`},
	{`{"a":1,"\u0061":2}`, `(top level): duplicate key "a"`},
	{`{"m":{"x":1,"x":2}}`, `m: duplicate key "x"`},
	{`{"g":[{"x":1},{"x":1,"y":2,"y":3}]}`, `g[]: duplicate key "y"`},
	{`{"g":[[{"k":1,"k":1}]]}`, `g[][]: duplicate key "k"`},
	{`{"Format":1}`, `(top level): key "Format" is not lower-case`},
	{`{"a":{"\u0042":1}}`, `a: key "B" is not lower-case`},
	{`{"s":"{\"A\":1,\"A\":2}","t":"]}"}`, ""},
	{`{"a":"x\\","b":"\"","c":null,"d":true,"e":-1.5e3}`, ""},
	{`{"é":1,"É":2}`, ""}, // only ASCII upper-case is refused
	{strings.Repeat("[", 32) + strings.Repeat("]", 32), ""},
	{strings.Repeat("[", 33) + strings.Repeat("]", 33), "nested deeper than 32 levels"},
	{`{"a":1,"a":2,"B":3}`, `(top level): duplicate key "a"`},
	{`{"B":1,"a":2,"a":3}`, `key "B" is not lower-case`},
	{` [ {"a" : 1 , "a" : 2} ] `, `[]: duplicate key "a"`},
	// not valid JSON: the tokenizer's syntax error, or a key error before it
	{`{"a":1,"a":2,}`, `(top level): duplicate key "a"`},
	{`{"a":1,}`, `invalid character '}'`},
	{`{"a":[1,2}`, `invalid character '}'`},
	{`{"a":1} {"a":1,"a":2}`, `(top level): duplicate key "a"`},
}

func TestCheckJSONKeys(t *testing.T) {
	for _, c := range keyCases {
		err := checkJSONKeys([]byte(c.in))
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.in, err, c.want)
		}
	}
}

// TestCheckJSONKeysAsTokens: the scanner and encoding/json's tokenizer
// give the same outcome on every corpus manifest and key case.
func TestCheckJSONKeysAsTokens(t *testing.T) {
	for _, in := range keyCorpus(t) {
		if !utf8.Valid(in) {
			continue // DecodeStrictJSON refuses it first
		}
		if a, b := checkJSONKeys(in), checkJSONTokens(in); !sameCheck(a, b) {
			t.Errorf("%.80s: scan says %v, tokenizer %v", in, a, b)
		}
	}
}

func keyCorpus(t testing.TB) [][]byte {
	var out [][]byte
	for _, c := range keyCases {
		out = append(out, []byte(c.in))
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "manifest", "*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// blockCases are block tables as a manifest may give them.
var blockCases = []string{
	`[]`, `null`, `[0]`, `[3, null, 5]`, `[null]`, `[ 1 ,2 , 3 ]`, `[-0]`, `[-1]`,
	`[9223372036854775807]`, `[9223372036854775808]`, `[1.5]`, `[1e2]`, `[1E2]`, `[1.0]`,
	`[-2.5e-3]`, `["1"]`, `[true]`, `[false]`, `[{}]`, `[[1]]`, `[{"a":[1,"]"]}, 2]`,
	`5`, `"x"`, `true`, `{}`, `{"a":1}`,
}

type withIDs struct {
	N int                 `json:"n"`
	B map[string]BlockIDs `json:"b"`
	M int                 `json:"m"`
}

type withPointers struct {
	N int               `json:"n"`
	B map[string][]*int `json:"b"`
	M int               `json:"m"`
}

// checkLikePointers decodes data as BlockIDs and as the []*int they
// replace and fails unless both give the same error, or the same ids.
func checkLikePointers(t *testing.T, data []byte) {
	t.Helper()
	var a withIDs
	var b withPointers
	errA, errB := DecodeStrictJSON(data, &a), DecodeStrictJSON(data, &b)
	if fmt.Sprint(errA) != fmt.Sprint(errB) {
		t.Fatalf("%.200s: BlockIDs say %v, []*int %v", data, errA, errB)
	}
	if errA != nil {
		return
	}
	if len(a.B) != len(b.B) {
		t.Fatalf("%.200s: %d tables, want %d", data, len(a.B), len(b.B))
	}
	for k, want := range b.B {
		got, ok := a.B[k]
		if !ok || (got == nil) != (want == nil) || len(got) != len(want) {
			t.Fatalf("%.200s: table %q is %v, want %d entries", data, k, got, len(want))
		}
		for i, p := range want {
			if (p == nil && got[i] != NoBlock) || (p != nil && got[i] != *p) {
				t.Fatalf("%.200s: table %q[%d] = %d, want %v", data, k, i, got[i], p)
			}
		}
	}
}

func TestBlockIDsDecodeLikePointers(t *testing.T) {
	for _, c := range blockCases {
		for _, doc := range []string{
			`{"n":1,"b":{"0":` + c + `},"m":2}`,
			`{"n":"early","b":{"0":` + c + `}}`,          // an earlier error wins
			`{"b":{"0":` + c + `},"m":"late"}`,           // a later one loses
			`{"b":{"0":` + c + `,"1":[1,"x"]},"z":1}`,    // two tables, an unknown field
			`{"b":{"0":[2,null],"1":` + c + `},"m":[1]}`, // a later type error
		} {
			checkLikePointers(t, []byte(doc))
		}
	}
}

func TestBlockIDsMarshal(t *testing.T) {
	for _, c := range []struct {
		ids  BlockIDs
		want string
	}{{nil, `null`}, {BlockIDs{}, `[]`}, {BlockIDs{NoBlock, 0, 7}, `[null,0,7]`}} {
		got, err := c.ids.MarshalJSON()
		if err != nil || string(got) != c.want {
			t.Errorf("%v: got %s, %v; want %s", []int(c.ids), got, err, c.want)
		}
	}
	// The one int that would read back as null is refused, not taken as null.
	var ids BlockIDs
	if err := ids.UnmarshalJSON([]byte(`[-9223372036854775808]`)); err == nil {
		t.Errorf("the int NoBlock stands for decodes as %v", []int(ids))
	}
}

// FuzzStrictJSON: the key check agrees with encoding/json's tokenizer
// (checkJSONTokens), and BlockIDs decode as the []*int they replace.
func FuzzStrictJSON(f *testing.F) {
	for _, in := range keyCorpus(f) {
		f.Add(in)
	}
	for _, c := range blockCases {
		f.Add([]byte(`{"n":1,"b":{"0":` + c + `},"m":2}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return // DecodeStrictJSON refuses it before checkJSONKeys
		}
		if a, b := checkJSONKeys(data), checkJSONTokens(data); !sameCheck(a, b) {
			t.Fatalf("scan says %v, tokenizer %v", a, b)
		}
		if !bytes.Contains(data, []byte("9223372036854775808")) {
			checkLikePointers(t, data)
		}
		checkLikeOldWalkers(t, data)
	})
}

// checkLikeOldWalkers: on valid JSON, unknownField and BlockIDs (through
// internal/jsonscan) agree with the hand-written walkers they replaced.
func checkLikeOldWalkers(t *testing.T, data []byte) {
	t.Helper()
	if !json.Valid(data) || checkJSONKeys(data) != nil {
		return // DecodeStrictJSON refuses it first
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[*knownDoc](), reflect.TypeFor[*withIDs](), reflect.TypeFor[*Manifest]()} {
		if a, b := unknownField(data, typ), oldUnknownField(data, typ); fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("%.200s as %v: unknownField says %v, the old walker %v", data, typ, a, b)
		}
	}
	var a, b BlockIDs
	errA, errB := a.UnmarshalJSON(data), oldUnmarshalBlockIDs(&b, data)
	if fmt.Sprint(errA) != fmt.Sprint(errB) || fmt.Sprint([]int(a)) != fmt.Sprint([]int(b)) || (a == nil) != (b == nil) {
		t.Fatalf("%.200s: BlockIDs %v, %v; the old walker %v, %v", data, []int(a), errA, []int(b), errB)
	}
}

// TestLikeOldWalkers runs checkLikeOldWalkers on the key and block cases
// and the manifest corpus.
func TestLikeOldWalkers(t *testing.T) {
	for _, in := range keyCorpus(t) {
		checkLikeOldWalkers(t, in)
	}
	for _, c := range blockCases {
		checkLikeOldWalkers(t, []byte(c))
		checkLikeOldWalkers(t, []byte(`{"n":1,"b":{"0":`+c+`},"m":2}`))
	}
}

// BenchmarkParseManifestBlockTable parses a 20 MB manifest (as
// MarshalManifest indents it) whose one request holds a block table of 2.5
// million entries. B/op is what it allocates: about 4 times the input
// (encoding/json's growing copy of it, and the table at 8 bytes an entry),
// in some 150 allocations. With []*int tables and a tokenizing key check it
// was about 25 times the input, in 7 allocations an entry.
func BenchmarkParseManifestBlockTable(b *testing.B) {
	big, key, n := bigManifest(b)
	b.SetBytes(int64(len(big)))
	b.ReportAllocs()
	for b.Loop() {
		got, err := ParseManifest("big.json", big)
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Requests[0].BlockTable[key]) != n {
			b.Fatal("table lost entries")
		}
	}
	b.ReportMetric(float64(len(big))/1e6, "input-MB")
}

// bigManifest is BenchmarkParseManifestBlockTable's manifest, the key of
// its block table and the table's length.
func bigManifest(b *testing.B) ([]byte, string, int) {
	data, err := os.ReadFile(filepath.Join("testdata", "manifest", "ok-minimal.json"))
	if err != nil {
		b.Fatal(err)
	}
	m, err := ParseManifest("ok-minimal.json", data)
	if err != nil {
		b.Fatal(err)
	}
	const n = 2_500_000
	key := fmt.Sprint(m.Groups[0].ID)
	m.NumBlocks = 2
	m.Requests = []Request{{ID: "big", NumTokens: 1, BlockTable: map[string]BlockIDs{key: make(BlockIDs, n)}}}
	for i := range m.Requests[0].BlockTable[key] {
		m.Requests[0].BlockTable[key][i] = 1
	}
	big, err := MarshalManifest(m)
	if err != nil {
		b.Fatal(err)
	}
	return big, key, n
}

// sameCheck says whether two key checks agree: the same error, or both a
// syntax error (the tokenizer words some otherwise than json.Unmarshal,
// which the scanner follows: internal/jsonscan's tests).
func sameCheck(a, b error) bool {
	syntax := func(err error) bool {
		s := fmt.Sprint(err)
		return strings.HasPrefix(s, "invalid character ") || s == "unexpected end of JSON input"
	}
	return fmt.Sprint(a) == fmt.Sprint(b) || syntax(a) && syntax(b)
}

// checkJSONKeys is checkKeys's error alone.
func checkJSONKeys(data []byte) error {
	_, _, err := checkKeys(data)
	return err
}

// checkJSONTokens is the key check on encoding/json's tokenizer, the
// reference the scanner is compared with: it reports the first of a key
// error, nesting deeper than maxJSONDepth and a syntax error, as the
// tokens come.
func checkJSONTokens(data []byte) error {
	type frame struct {
		object, expectKey bool
		keys              map[string]bool
		path, key         string
	}
	var stack []frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].expectKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF && len(stack) == 0 {
			return nil
		}
		if err != nil {
			return jsonError(err)
		}
		n := len(stack)
		if n > 0 && stack[n-1].object && stack[n-1].expectKey {
			top := &stack[n-1]
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			k, _ := tok.(string)
			if top.keys[k] {
				return fmt.Errorf("%s: duplicate key %q", displayPath(top.path), k)
			}
			if strings.ContainsFunc(k, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
				return fmt.Errorf("%s: key %q is not lower-case (keys are exact-case)", displayPath(top.path), k)
			}
			top.keys[k], top.key, top.expectKey = true, k, false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if n >= maxJSONDepth {
				return fmt.Errorf("nested deeper than %d levels", maxJSONDepth)
			}
			path := ""
			if n > 0 {
				if top := stack[n-1]; top.object {
					path = joinPath(top.path, top.key)
				} else {
					path = top.path + "[]"
				}
			}
			object := tok == json.Delim('{')
			stack = append(stack, frame{object: object, expectKey: object, keys: map[string]bool{}, path: path})
		case json.Delim(']'):
			stack = stack[:n-1]
			valueDone()
		default:
			valueDone()
		}
	}
}
