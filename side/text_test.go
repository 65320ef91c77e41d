package side

import (
	"encoding/base64"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

// TestRepeatedKeys: only the top level's keys count, each escape and
// string value skipped; a key given once is not listed.
func TestRepeatedKeys(t *testing.T) {
	for text, want := range map[string]map[string]int{
		`{"a": 1, "a": 2}`:                                   {"a": 2},
		`{"a": 1, "a": 2, "a": 3, "b": 0}`:                   {"a": 3},
		`{"a": 1, "b": 2}`:                                   {},
		`{"a": {"a": 1, "a": 2}, "b": [{"b": 1}, {"b": 2}]}`: {},
		`{"a\"b": 1, "a\"b": 2}`:                             {`a"b`: 2},
		`{"a": "x, \"a\": y", "a": 3}`:                       {"a": 2},
		`{"a": "a", "b": "a", "c": ["a", "a"]}`:              {},
		`{"k": [1, 2], "k": [3], "z": {}}`:                   {"k": 2},
		`{"x\\": 1, "x\\": 2}`:                               {`x\`: 2},
		// Keys as encoding/json decodes them: a byte of invalid UTF-8
		// (whichever) and a lone surrogate are each U+FFFD.
		"{\"a\xff\": 1, \"a\xfe\": 2}": {"a\uFFFD": 2},
		`{"\ud800": 1, "\udc00": 2}`:   {"\uFFFD": 2},
	} {
		if got := repeatedKeys([]byte(text)); !maps.Equal(got, want) {
			t.Errorf("repeatedKeys(%s) = %v, want %v", text, got, want)
		}
	}
}

// TestIsText: printable ASCII and the three whitespace controls are text;
// every other control, DEL and any byte past it are not.
func TestIsText(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, "abc+/=": true, " \t\n\r~": true, "\x20": true, "\x7e": true,
		"\x1f": false, "\x00": false, "\x0b": false, "\x7f": false, "\x80": false, "é": false, "ab\x01": false,
	} {
		if got := isText([]byte(s)); got != want {
			t.Errorf("isText(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestPayloadTextHead: base64 text is payload text when its first bytes
// are a msgpack array of 2 or 3 starting with an unsigned integer, and it
// is 8 characters long at least.
func TestPayloadTextHead(t *testing.T) {
	text := func(b0, b1 byte, n int) string {
		s := base64.StdEncoding.EncodeToString([]byte{b0, b1, 0})
		return s + strings.Repeat("A", max(0, n-len(s)))
	}
	for _, c := range []struct {
		b0, b1 byte
		n      int
		want   bool
	}{
		{0x92, 0x01, 8, true}, {0x93, 0x7f, 8, true}, {0x92, 0xcc, 8, true}, {0x93, 0xcf, 12, true},
		{0x92, 0x01, 7, false}, {0x91, 0x01, 8, false}, {0x94, 0x01, 8, false},
		{0x92, 0x80, 8, false}, {0x92, 0xcb, 8, false}, {0x92, 0xd0, 8, false},
	} {
		s := text(c.b0, c.b1, c.n)
		if c.n < 8 {
			s = s[:c.n]
		}
		if got := payloadText(s); got != c.want {
			t.Errorf("payloadText(%q) (head %#x %#x, %d chars) = %v, want %v", s, c.b0, c.b1, len(s), got, c.want)
		}
	}
	if !cannotBePath("\x00abc", nil) || !cannotBePath("ab\x00", nil) || cannotBePath("abc", nil) {
		t.Error("cannotBePath: a NUL byte anywhere (first included) makes a non-path")
	}
	if s := strings.Repeat("x", 40); shortArg(s) != s {
		t.Errorf("shortArg of 40 bytes: %q", shortArg(s))
	}
	if got := shortArg(strings.Repeat("x", 41)); got != strings.Repeat("x", 37)+"..." {
		t.Errorf("shortArg of 41 bytes: %q", got)
	}
}

// TestPayloadNotes: a payload that does not decode is noted (bare, in
// place, or by id), one that does is not, and only a repeated key gets a
// repeated-key note; a payload side is named as given, else "the
// payload".
func TestPayloadNotes(t *testing.T) {
	p := &wire.Payload{Form: wire.FormNested, NumTokens: 16, TPSize: 1, Groups: []wire.PayloadGroup{{ID: 0, BlockSize: 16, Fingerprint: 7, Values: []uint64{1}}}}
	good, err := wire.EncodePayloadBase64(p)
	if err != nil {
		t.Fatal(err)
	}
	open := func(payload, name string) *Source {
		t.Helper()
		s, err := Open(Input{Payload: []byte(payload), Name: name})
		if err != nil {
			t.Fatalf("%s: %v", payload, err)
		}
		return s
	}
	if s := open(good, ""); len(s.Notes()) != 0 || s.Bare() == nil || len(s.Bare().Notes) != 0 || s.Name() != "the payload" {
		t.Errorf("a good bare payload: notes %v, bare %+v, name %q", s.Notes(), s.Bare(), s.Name())
	}
	if s := open("kgGTnotapayload", "x"); s.Notes()[""] == "" || s.Name() != "x" {
		t.Errorf("a broken bare payload: notes %v, name %q", s.Notes(), s.Name())
	}
	if s := open(`{"kv_checksums": "`+good+`"}`, ""); len(s.Notes()) != 0 || len(s.Bare().Notes) != 0 {
		t.Errorf("kv_checksums once: notes %v, %v", s.Notes(), s.Bare().Notes)
	}
	if s := open(`{"kv_checksums": "x", "kv_checksums": "`+good+`"}`, ""); len(s.Bare().Notes) != 1 || !strings.Contains(s.Bare().Notes[0], "appears 2 times") {
		t.Errorf("kv_checksums twice: %v", s.Bare().Notes)
	}
	s := open(`{"r0": "`+good+`", "r1": "!!", "r1": "`+good+`", "r2": "!!"}`, "")
	ids := slices.Collect(maps.Keys(s.Notes()))
	if !slices.Equal(ids, []string{"r2"}) || len(s.ByID()) != 3 || len(s.ByID()[0].Notes) != 0 || len(s.ByID()[1].Notes) != 1 || len(s.ByID()[2].Notes) != 0 {
		t.Errorf("payloads by id: notes %v, requests %+v", s.Notes(), s.ByID())
	}
}

// TestProgressStart: a nil Progress, or one given no dumps, is not called
// and returns a done that does nothing; one given dumps is called.
func TestProgressStart(t *testing.T) {
	called := 0
	p := Progress(func(string, []*layout.Dump, []string) (func(int64), func()) {
		called++
		return func(int64) {}, func() {}
	})
	add, done := Progress(nil).Start("side", []*layout.Dump{{}}, nil)
	done()
	if add != nil {
		t.Error("a nil Progress gave an add")
	}
	if _, done := p.Start("side", nil, nil); done == nil || called != 0 {
		t.Errorf("no dumps: called %d times", called)
	}
	if add, _ := p.Start("side", []*layout.Dump{{}}, nil); add == nil || called != 1 {
		t.Errorf("dumps: called %d times", called)
	}
}

// TestMissingRanksPP: ranks are named with their PP stage only when there
// are several.
func TestMissingRanksPP(t *testing.T) {
	rec := func(pp, tp int) *wire.Record { return &wire.Record{PPRank: pp, TPRank: tp} }
	if got := missingRanks([]*wire.Record{rec(0, 0)}, 2, 1); !slices.Equal(got, []string{"tp 1 of 2"}) {
		t.Errorf("tp 2 pp 1: %q", got)
	}
	if got := missingRanks([]*wire.Record{rec(0, 0), rec(0, 1)}, 2, 2); !slices.Equal(got, []string{"tp 0 of 2, pp 1 of 2", "tp 1 of 2, pp 1 of 2"}) {
		t.Errorf("tp 2 pp 2: %q", got)
	}
}

// TestAddColumn: column k of values with several replica keys per
// position is added row by row (not column 0, not another row's).
func TestAddColumn(t *testing.T) {
	vals := wire.NewValues(3, 2)
	for i := range 3 {
		vals.At(i)[0], vals.At(i)[1] = uint64(10*i+1), uint64(10*i+2)
	}
	sums, borrowed := map[[2]int][]uint64{}, map[[2]int]bool{}
	key := [2]int{2, 1}
	addColumn(sums, borrowed, 3, key, vals, 1)
	addColumn(sums, borrowed, 3, key, vals, 1)
	if got := sums[key]; !slices.Equal(got, []uint64{4, 24, 44}) || borrowed[key] {
		t.Errorf("sums %v (borrowed %v), want [4 24 44]", got, borrowed[key])
	}
}

// TestPayloadRequestCopies: PayloadRequest shares no memory with the
// payload (values and mix check copied), gives an empty check for a
// group of no values, keeps a nested payload's fingerprint as nested and
// a flat one's as flat only.
func TestPayloadRequestCopies(t *testing.T) {
	p := &wire.Payload{Form: wire.FormNested, NumTokens: 32, TPSize: 2, Groups: []wire.PayloadGroup{
		{ID: 1, BlockSize: 16, Fingerprint: 9, Values: []uint64{1, 2}, Mix: []uint64{3, 4}},
		{ID: 0, BlockSize: 16, Fingerprint: 8},
	}}
	r := PayloadRequest("r", p)
	p.Groups[0].Values[0], p.Groups[0].Mix[0] = 100, 300
	g0, g1 := r.Group(0), r.Group(1)
	if r.Groups[0] != g0 || g1 == nil || !slices.Equal(g1.Checks[0], []uint64{1, 2}) || !slices.Equal(g1.ChecksMix[0], []uint64{3, 4}) {
		t.Fatalf("checks %+v %+v: sorted by id and copied", g0, g1)
	}
	if g0.Checks[0] == nil || len(g0.Checks[0]) != 0 || g0.ChecksMix != nil || g0.Fingerprint != 8 || g0.HasFlat || g0.FlatOnly {
		t.Errorf("a group of no values: %+v", g0)
	}
	p.Form = wire.FormFlat
	if g := PayloadRequest("r", p).Group(1); g.Fingerprint != 0 || g.FingerprintFlat != 9 || !g.HasFlat || !g.FlatOnly {
		t.Errorf("a flat payload's group: %+v", g)
	}
}
