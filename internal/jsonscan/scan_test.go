package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/kvaudit/kvaudit/internal/testlong"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) { os.Exit(testlong.Main(m)) }

// tok is one token as a test compares it.
type tok struct {
	kind Kind
	text string
	key  bool
}

// scanAll returns the tokens of a document and the error that ended it.
func scanAll(s *Scanner) ([]tok, error) {
	var out []tok
	for {
		k, err := s.Next()
		if err != nil {
			return out, err
		}
		if k == End {
			return out, nil
		}
		t := tok{kind: k, key: s.IsKey()}
		if k == String || k == Number {
			t.text = string(s.Bytes())
		}
		out = append(out, t)
	}
}

// reference returns encoding/json's tokens of data and, for an invalid
// document, the syntax error json.Unmarshal gives (whose Offset counts
// the bytes read, the offending one included).
func reference(data []byte) ([]tok, error) {
	var v json.RawMessage
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out []tok
	for {
		t, err := dec.Token()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var k tok
		switch v := t.(type) {
		case json.Delim:
			k.kind = Kind(v)
		case string:
			k = tok{kind: String, text: v}
		case json.Number:
			k = tok{kind: Number, text: string(v)}
		case bool:
			k.kind = False
			if v {
				k.kind = True
			}
		case nil:
			k.kind = Null
		}
		out = append(out, k)
	}
}

// referenceKeys marks which strings of toks are keys, from the brackets.
func referenceKeys(toks []tok) {
	type frame struct{ object, wantKey bool }
	var st []frame
	for i := range toks {
		t := &toks[i]
		top := len(st) - 1
		switch t.kind {
		case ObjectStart, ArrayStart:
			if top >= 0 && st[top].object {
				st[top].wantKey = true
			}
			st = append(st, frame{object: t.kind == ObjectStart, wantKey: t.kind == ObjectStart})
			t.key = false
			continue
		case ObjectEnd, ArrayEnd:
			st = st[:top]
			t.key = false
			continue
		}
		if top >= 0 && st[top].object {
			t.key = st[top].wantKey
			st[top].wantKey = !st[top].wantKey
		} else {
			t.key = false
		}
	}
}

// compare checks the scanner against encoding/json on data: the same
// tokens for a valid document, the same message and offset for an invalid
// one. Documents that are not valid UTF-8 are skipped (encoding/json
// takes them, replacing bytes; the scanner refuses them, tested apart).
func compare(t interface {
	Helper()
	Fatalf(string, ...any)
}, data []byte) {
	t.Helper()
	if !utf8.Valid(data) {
		return
	}
	want, werr := reference(data)
	referenceKeys(want)
	opt := Options{MaxDepth: 20000, MaxNumber: 1 << 20, LoneSurrogates: true}
	for _, s := range []*Scanner{New(data, opt), NewReader(iotest.OneByteReader(bytes.NewReader(data)), opt),
		NewReader(iotest.HalfReader(bytes.NewReader(data)), opt)} {
		got, gerr := scanAll(s)
		if werr != nil {
			var se *json.SyntaxError
			if !errors.As(werr, &se) {
				t.Fatalf("%q: encoding/json says %v", data, werr)
			}
			var e *Error
			if !errors.As(gerr, &e) {
				t.Fatalf("%q: scanner says %v, encoding/json %v", data, gerr, werr)
			}
			off := e.Offset + 1
			if e.Code == ErrEOF {
				off = e.Offset
			}
			// At the end, encoding/json steps a space through its
			// state machine and words the error after it.
			eof := e.Code == ErrEOF && se.Offset == int64(len(data)) && strings.HasPrefix(se.Error(), "invalid character ' ' ")
			if !eof && (e.Error() != se.Error() || off != se.Offset) {
				t.Fatalf("%q: scanner says %v at %d, encoding/json %v after %d bytes", data, e, e.Offset, se, se.Offset)
			}
			continue
		}
		if gerr != nil {
			t.Fatalf("%q: scanner says %v, encoding/json takes it", data, gerr)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q:\nscanner  %v\nencoding %v", data, got, want)
		}
	}
}

// genDoc generates JSON text: valid, with random whitespace, escapes and
// number forms.
func genDoc(t *rapid.T, depth int) string {
	ws := func() string {
		return rapid.SampledFrom([]string{"", "", "", " ", "\n", "\t", "\r\n  "}).Draw(t, "ws")
	}
	kind := rapid.IntRange(0, 7).Draw(t, "kind")
	if depth <= 0 && kind >= 6 {
		kind = 0
	}
	switch kind {
	case 0:
		return genNumber(t)
	case 1:
		return rapid.SampledFrom([]string{"null", "true", "false"}).Draw(t, "lit")
	case 2, 3:
		return genString(t)
	case 6:
		n := rapid.IntRange(0, 4).Draw(t, "n")
		parts := make([]string, n)
		for i := range parts {
			parts[i] = ws() + genDoc(t, depth-1) + ws()
		}
		return "[" + ws() + strings.Join(parts, ",") + "]"
	}
	n := rapid.IntRange(0, 4).Draw(t, "n")
	parts := make([]string, n)
	for i := range parts {
		parts[i] = ws() + genString(t) + ws() + ":" + ws() + genDoc(t, depth-1) + ws()
	}
	return "{" + ws() + strings.Join(parts, ",") + "}"
}

func genNumber(t *rapid.T) string {
	s := rapid.SampledFrom([]string{"", "-"}).Draw(t, "sign")
	if rapid.Bool().Draw(t, "zero") {
		s += "0"
	} else {
		s += rapid.StringMatching(`[1-9][0-9]{0,25}`).Draw(t, "int")
	}
	if rapid.Bool().Draw(t, "frac") {
		s += "." + rapid.StringMatching(`[0-9]{1,5}`).Draw(t, "frac")
	}
	if rapid.Bool().Draw(t, "exp") {
		s += rapid.StringMatching(`[eE][+-]?[0-9]{1,3}`).Draw(t, "exp")
	}
	return s
}

func genString(t *rapid.T) string {
	var b strings.Builder
	b.WriteByte('"')
	n := rapid.IntRange(0, 8).Draw(t, "len")
	for range n {
		b.WriteString(rapid.SampledFrom([]string{
			"a", "Z", " ", "é", "日本", "😀", `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`,
			`\u0041`, `\u00e9`, `\uFFFF`, `\ud83d\ude00`, `\ud800`, `\udc00`, `\ud800\u0041`, `\ud800\ud800\udc00`,
		}).Draw(t, "piece"))
	}
	b.WriteByte('"')
	return b.String()
}

// mutate breaks a document: a byte removed, inserted or replaced from a
// JSON-ish alphabet, or the document cut short.
func mutate(t *rapid.T, doc string) string {
	if doc == "" {
		return doc
	}
	i := rapid.IntRange(0, len(doc)-1).Draw(t, "at")
	c := rapid.SampledFrom([]string{"{", "}", "[", "]", ",", ":", `"`, `\`, "0", "-", ".", "e", "n", "x", " ", "\x01", "\n"}).Draw(t, "byte")
	switch rapid.IntRange(0, 3).Draw(t, "how") {
	case 0:
		return doc[:i] + doc[i+1:]
	case 1:
		return doc[:i] + c + doc[i:]
	case 2:
		return doc[:i] + c + doc[i+1:]
	}
	return doc[:i]
}

// TestAgainstEncodingJSON: on random valid documents and on random breaks
// of them, the scanner gives encoding/json's tokens, or its error at its
// offset.
func TestAgainstEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		doc := genDoc(t, 4)
		compare(t, []byte(doc))
		for range 8 {
			compare(t, []byte(mutate(t, doc)))
		}
		compare(t, []byte(doc+" "+doc))
	})
}

// hostile are documents a fuzzer starts from: deep nesting, huge
// numbers, bad UTF-8, lone surrogates, truncated escapes.
var hostile = []string{
	``, ` `, `{`, `[`, `"`, `"\`, `"\u`, `"\u12`, `"\ud800`, `"\ud800\`, `"\ud800\u`, `"\ud800\udc0`,
	`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud83d\ude00"`, `"a` + "\xff" + `b"`, "\xc3\x28", `"` + "\xed\xa0\x80" + `"`,
	strings.Repeat("[", 100000), strings.Repeat("[", 64) + strings.Repeat("]", 64), strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65),
	strings.Repeat("9", 5000), "-" + strings.Repeat("0", 10), "1e" + strings.Repeat("9", 400), "0.", "-", "1e+", "01",
	`{"a":1,}`, `[1,]`, `{"a" 1}`, `{1:2}`, `nul`, `tru`, `falsey`, `[1 2]`, `{"a":1}{}`, "\"\t\"", `"\x"`,
	`{"a":[{"b":null,"c":[true,false,-0.5e-3]}],"d":"\u00e9\n"}`,
}

// TestHostile: the hostile seeds against encoding/json, and the limits.
func TestHostile(t *testing.T) {
	for _, h := range hostile {
		if !strings.HasPrefix(h, "[[[[[[[[[[[[") || len(h) < 10000 {
			compare(t, []byte(h))
		}
	}
	for _, c := range []struct {
		in   string
		opt  Options
		code Code
		off  int64
	}{
		{strings.Repeat("[", 64) + strings.Repeat("]", 64), Options{}, 0, 0},
		{strings.Repeat("[", 65), Options{}, ErrDepth, 64},
		{`{"a":[[1]]}`, Options{MaxDepth: 2}, ErrDepth, 6},
		{strings.Repeat("[", 100000), Options{}, ErrDepth, 64},
		{strings.Repeat("9", 5000), Options{}, ErrLongNumber, 4096},
		{"1e" + strings.Repeat("9", 10), Options{MaxNumber: 8}, ErrLongNumber, 8},
		{`"abcdef"`, Options{MaxString: 5}, ErrLongString, 6},
		{`"abc\tef"`, Options{MaxString: 5}, ErrLongString, 7},
		{`"abcd\t"`, Options{MaxString: 4}, ErrLongString, 5},
		{`"abcde"`, Options{MaxString: 5}, 0, 0},
		{`"a\uFFFF"`, Options{MaxString: 3}, ErrLongString, 2}, // the escape's offset, streamed too
		// Too long and not UTF-8: the first error, however the input is read.
		{`"aa` + "\xa9" + `a"`, Options{MaxString: 3}, ErrUTF8, 3},
		{`"aaaa` + "\xa9" + `"`, Options{MaxString: 3}, ErrLongString, 4},
		{`"日` + "\x9c\xac" + `"`, Options{MaxString: 3}, ErrUTF8, 4},
		{`"a` + "\xff" + `b"`, Options{}, ErrUTF8, 2},
		{`"\u00e9` + "\xc3" + `"`, Options{}, ErrUTF8, 7},
		{`"\ud800"`, Options{}, ErrSurrogate, 1},
		{`"x\udc00"`, Options{}, ErrSurrogate, 2},
		{`"\ud800\u0041"`, Options{}, ErrSurrogate, 1},
		{`"\ud83d\ude00"`, Options{}, 0, 0},
		{`"\ud800"`, Options{LoneSurrogates: true}, 0, 0},
		{"{\"a\":\n1}", Options{Lines: true}, ErrLineEnd, 5},
		{"\"a\nb\"", Options{Lines: true}, ErrLineEnd, 2},
		{"\"a\\\nb\"", Options{Lines: true}, ErrLineEnd, 3},
		{"[1,\n", Options{Lines: true}, ErrLineEnd, 3},
		{"1 2", Options{Stream: true}, 0, 0},
		{"", Options{Stream: true}, 0, 0},
		{"", Options{}, ErrEOF, 0},
		{"[1,", Options{}, ErrEOF, 3},
	} {
		for _, s := range []*Scanner{New([]byte(c.in), c.opt), NewReader(iotest.OneByteReader(strings.NewReader(c.in)), c.opt),
			NewReader(iotest.HalfReader(strings.NewReader(c.in)), c.opt)} {
			_, err := scanAll(s)
			var e *Error
			switch {
			case c.code == 0 && err != nil:
				t.Errorf("%.40q: %v", c.in, err)
			case c.code == 0:
			case !errors.As(err, &e) || e.Code != c.code || e.Offset != c.off:
				t.Errorf("%.40q: got %v (%+v), want code %d at %d", c.in, err, e, c.code, c.off)
			}
		}
	}
}

// TestUint reads integers as the log does, each refusal by its code.
func TestUint(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  uint64
		want uint64
		code Code
	}{
		{"0", 10, 0, 0}, {"10,", 10, 10, 0}, {"11", 10, 0, ErrRange}, {"18446744073709551615", 1<<64 - 1, 1<<64 - 1, 0},
		{"18446744073709551616", 1<<64 - 1, 0, ErrRange}, {"-1", 10, 0, ErrNegative}, {"1.5", 10, 0, ErrFraction},
		{"1e3", 10000, 0, ErrFraction}, {"01", 10, 0, ErrLeadingZero}, {"x", 10, 0, ErrChar}, {"", 10, 0, ErrEOF},
	} {
		for _, s := range []*Scanner{New([]byte(c.in), Options{}), NewReader(iotest.OneByteReader(strings.NewReader(c.in)), Options{})} {
			v, err := s.Uint(c.max)
			var e *Error
			if c.code == 0 && (err != nil || v != c.want) || c.code != 0 && (!errors.As(err, &e) || e.Code != c.code) {
				t.Errorf("%q: got %d, %v; want %d, code %d", c.in, v, err, c.want, c.code)
			}
		}
	}
}

// TestLines reads JSON Lines through the lexer as the log reader does.
func TestLines(t *testing.T) {
	s := NewReader(strings.NewReader("\"a\" \r\n  \"b\"x\n\"c\""), Options{Lines: true})
	var got []string
	for {
		c, err := s.Peek()
		if err != nil || c != '"' {
			t.Fatalf("peek: %q, %v", c, err)
		}
		b, err := s.String()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
		end, eof, err := s.EndLine()
		if err != nil {
			t.Fatal(err)
		}
		if eof {
			break
		}
		if end != '\n' {
			got = append(got, string(end))
			s.Advance()
			if end, _, _ := s.EndLine(); end != '\n' {
				t.Fatalf("after %q: %q", end, end)
			}
		}
	}
	if fmt.Sprint(got) != "[a b x c]" || !s.AtEnd() {
		t.Errorf("got %q", got)
	}
}

// errReader fails after its data.
type errReader struct{ data []byte }

var errBroken = errors.New("broken pipe")

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, errBroken
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestReadError: the reader's error is returned as it is.
func TestReadError(t *testing.T) {
	for _, in := range []string{`{"a":`, `"abc`, `12`, `nu`} {
		s := NewReader(&errReader{[]byte(in)}, Options{})
		if _, err := scanAll(s); err != errBroken {
			t.Errorf("%q: %v, want the reader's error", in, err)
		}
	}
}

// TestStringNoCopy: a string without escapes is the input's own bytes,
// and a scan of an in-memory document allocates nothing per token.
func TestStringNoCopy(t *testing.T) {
	data := []byte(`{"key":["value",12,true,null,"é"]}`)
	s := New(data, Options{})
	s.Next()
	s.Next()
	if b := s.Bytes(); &b[0] != &data[2] {
		t.Error("the key was copied")
	}
	allocs := testing.AllocsPerRun(100, func() {
		s := Scanner{buf: data, rerr: io.EOF}
		s.setOptions(Options{})
		s.stack = make([]byte, 0, 8)
		if _, err := scanAll2(&s); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("%.0f allocations a scan", allocs)
	}
}

// scanAll2 scans without keeping the tokens.
func scanAll2(s *Scanner) (int, error) {
	n := 0
	for {
		k, err := s.Next()
		if err != nil || k == End {
			return n, err
		}
		n++
	}
}

// skipTrace reads data token by token, skipping each container that
// opens at depth skipAt (Skip, or refSkip, which calls Next), and returns
// what it saw: the tokens, the offsets after each skip, and the error.
func skipTrace(s *Scanner, skipAt int, ref bool) string {
	var out strings.Builder
	for {
		k, err := s.Next()
		if err == nil && (k == ObjectStart || k == ArrayStart) && s.Depth() == skipAt {
			if ref {
				err = refSkip(s)
			} else {
				err = s.Skip(k)
			}
			if err == nil { // after an error, only the error counts
				fmt.Fprintf(&out, "skip %c to %d (%d) depth %d; ", k, s.Offset(), s.TokenOffset(), s.Depth())
			}
		} else if err == nil {
			fmt.Fprintf(&out, "%c at %d; ", k, s.TokenOffset())
			if k == String || k == Number {
				fmt.Fprintf(&out, "%q; ", s.Bytes())
			}
		}
		var e *Error
		if errors.As(err, &e) {
			fmt.Fprintf(&out, "error %v at %d", e, e.Offset)
			return out.String()
		}
		if err != nil || k == End {
			fmt.Fprint(&out, err)
			return out.String()
		}
	}
}

// refSkip is Skip as Next's loop: the reference of its fast path.
func refSkip(s *Scanner) error {
	for depth := s.Depth(); s.Depth() >= depth; {
		if _, err := s.Next(); err != nil {
			return err
		}
	}
	return nil
}

// compareSkip checks Skip against refSkip on data, in memory and streamed,
// skipping at depths 1 to 3.
func compareSkip(t interface {
	Helper()
	Fatalf(string, ...any)
}, data []byte, opt Options) {
	t.Helper()
	for skipAt := 1; skipAt <= 3; skipAt++ {
		want := skipTrace(New(data, opt), skipAt, true)
		for _, s := range []*Scanner{New(data, opt), NewReader(iotest.OneByteReader(bytes.NewReader(data)), opt),
			NewReader(iotest.HalfReader(bytes.NewReader(data)), opt)} {
			if got := skipTrace(s, skipAt, false); got != want {
				t.Fatalf("%q, %+v, skipping at depth %d:\nSkip %s\nNext %s", data, opt, skipAt, got, want)
			}
		}
	}
}

// TestSkipAgainstNext: Skip (its fast path and Next where it stops) reads
// random documents, broken ones and several in a stream as Next does,
// under random limits, to the same offsets and the same errors.
func TestSkipAgainstNext(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		opt := Options{
			MaxDepth:       rapid.SampledFrom([]int{0, 2, 3}).Draw(t, "depth"),
			MaxString:      rapid.SampledFrom([]int{0, 3}).Draw(t, "string"),
			MaxNumber:      rapid.SampledFrom([]int{0, 4}).Draw(t, "number"),
			Lines:          rapid.Bool().Draw(t, "lines"),
			Stream:         rapid.Bool().Draw(t, "stream"),
			LoneSurrogates: rapid.Bool().Draw(t, "surrogates"),
		}
		doc := genDoc(t, 4)
		compareSkip(t, []byte(doc), opt)
		for range 4 {
			compareSkip(t, []byte(mutate(t, doc)), opt)
		}
		compareSkip(t, []byte(doc+" "+doc), opt)
	})
}

// FuzzScanner: no input panics the scanner, in memory or streamed a byte
// at a time; both give the same tokens and error; valid UTF-8 input agrees
// with encoding/json; Skip agrees with Next.
func FuzzScanner(f *testing.F) {
	for _, h := range hostile {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, errA := scanAll(New(data, Options{MaxString: 1 << 10}))
		b, errB := scanAll(NewReader(iotest.OneByteReader(bytes.NewReader(data)), Options{MaxString: 1 << 10}))
		if fmt.Sprint(a, errA) != fmt.Sprint(b, errB) {
			t.Fatalf("in memory %v %v, streamed %v %v", a, errA, b, errB)
		}
		var e *Error
		if errA != nil && !errors.As(errA, &e) {
			t.Fatalf("%T %v", errA, errA)
		}
		if e != nil && (e.Offset < 0 || e.Offset > int64(len(data))) {
			t.Fatalf("offset %d of %d bytes", e.Offset, len(data))
		}
		if len(data) < 1000 && bytes.Count(data, []byte("[")) < 60 && bytes.Count(data, []byte("{")) < 60 {
			compare(t, data)
		}
		if len(data) < 4000 {
			compareSkip(t, data, Options{MaxString: 1 << 10, Stream: true})
			compareSkip(t, data, Options{MaxDepth: 3, MaxString: 4, MaxNumber: 5, Lines: true})
		}
	})
}

// TestPlainRun: the word-at-a-time test passes over no special byte,
// whatever its value and place, and over every block of plain bytes.
func TestPlainRun(t *testing.T) {
	for c := range 256 {
		for p := range 24 {
			buf := bytes.Repeat([]byte("a"), 27)
			buf[p] = byte(c)
			got := plainRun(buf, 0)
			want := 24 // the blocks of 8 before the last, shorter one
			if special[c] {
				want = p / 8 * 8
			}
			if got != want {
				t.Fatalf("byte %#x at %d: plainRun %d, want %d", c, p, got, want)
			}
		}
	}
}
