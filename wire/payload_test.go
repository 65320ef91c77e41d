package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/parse"
)

// leValues returns the little-endian bytes of vs, as Python's
// struct.pack("<%dQ") writes them.
func leValues(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestPayloadFlatVector decodes the bytes msgspec writes for
// (1, 40, [(0, 2**64-5, 0, values), (3, 200, 2, values)]), built here byte by
// byte, and encodes them back.
func TestPayloadFlatVector(t *testing.T) {
	v0 := []uint64{0x000000021b8b4990, 0x00000002a65023b8, math.MaxUint64}
	v1 := []uint64{7}
	wire := cat(
		[]byte{0x93}, // fixarray of 3: (version, num_tokens, groups)
		[]byte{0x01}, // version 1
		[]byte{0x28}, // num_tokens 40
		[]byte{0x92}, // fixarray of 2 groups
		[]byte{0x94}, // group 0: fixarray of 4
		[]byte{0x00}, // group_id 0
		[]byte{0xcf}, // uint64
		[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfb}, // 2**64-5
		[]byte{0x00},       // start 0
		[]byte{0xc4, 0x18}, // bin8 of 24 bytes
		[]byte{0x90, 0x49, 0x8b, 0x1b, 0x02, 0x00, 0x00, 0x00},
		[]byte{0xb8, 0x23, 0x50, 0xa6, 0x02, 0x00, 0x00, 0x00},
		[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		[]byte{0x94},       // group 1: fixarray of 4
		[]byte{0x03},       // group_id 3
		[]byte{0xcc, 0xc8}, // uint8 200
		[]byte{0x02},       // start 2
		[]byte{0xc4, 0x08}, // bin8 of 8 bytes
		[]byte{0x07, 0, 0, 0, 0, 0, 0, 0},
	)
	want := &Payload{
		Form:      FormFlat,
		NumTokens: 40,
		Groups: []PayloadGroup{
			{ID: 0, Fingerprint: 1<<64 - 5, Start: 0, Values: v0},
			{ID: 3, Fingerprint: 200, Start: 2, Values: v1},
		},
	}
	checkVector(t, wire, want)
}

// TestPayloadNestedVector decodes the bytes msgspec writes for
// (1, (1000, 2, [(0, 0x9abcdef0, 0, 16, 40 values), (1, 0x12345, 300, 256, b"")])),
// with uint16 integers, uint32 fingerprints and a bin16, and encodes them back.
func TestPayloadNestedVector(t *testing.T) {
	v0 := make([]uint64, 40)
	for i := range v0 {
		v0[i] = uint64(i)*0x0101010101010101 + 1
	}
	wire := cat(
		[]byte{0x92},                         // fixarray of 2: (version, body)
		[]byte{0x01},                         // version 1
		[]byte{0x93},                         // body: fixarray of 3
		[]byte{0xcd, 0x03, 0xe8},             // num_tokens: uint16 1000
		[]byte{0x02},                         // tp_size 2
		[]byte{0x92},                         // fixarray of 2 groups
		[]byte{0x95},                         // group 0: fixarray of 5
		[]byte{0x00},                         // group_id 0
		[]byte{0xce, 0x9a, 0xbc, 0xde, 0xf0}, // fingerprint: uint32
		[]byte{0x00},                         // start 0
		[]byte{0x10},                         // block_size 16
		[]byte{0xc5, 0x01, 0x40},             // bin16 of 320 bytes
		leValues(v0...),
		[]byte{0x95},                         // group 1: fixarray of 5
		[]byte{0x01},                         // group_id 1
		[]byte{0xce, 0x00, 0x01, 0x23, 0x45}, // fingerprint: uint32 0x12345
		[]byte{0xcd, 0x01, 0x2c},             // start: uint16 300
		[]byte{0xcd, 0x01, 0x00},             // block_size: uint16 256
		[]byte{0xc4, 0x00},                   // empty bin8
	)
	want := &Payload{
		Form:      FormNested,
		NumTokens: 1000,
		TPSize:    2,
		Groups: []PayloadGroup{
			{ID: 0, Fingerprint: 0x9abcdef0, Start: 0, BlockSize: 16, Values: v0},
			{ID: 1, Fingerprint: 0x12345, Start: 300, BlockSize: 256},
		},
	}
	checkVector(t, wire, want)
}

func checkVector(t *testing.T, wire []byte, want *Payload) {
	t.Helper()
	got, err := DecodePayload(wire)
	if err != nil {
		t.Fatalf("DecodePayload: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodePayload = %+v, want %+v", got, want)
	}
	enc, err := EncodePayload(got)
	if err != nil {
		t.Fatalf("EncodePayload: %v", err)
	}
	if !bytes.Equal(enc, wire) {
		t.Fatalf("EncodePayload =\n%x, want\n%x", enc, wire)
	}
	if ref := referenceEncoding(want); !bytes.Equal(ref, wire) {
		t.Fatalf("msgpack/v5 encodes\n%x, the vector is\n%x", ref, wire)
	}
	text := base64.StdEncoding.EncodeToString(wire)
	if s, err := EncodePayloadBase64(want); err != nil || s != text {
		t.Fatalf("EncodePayloadBase64 = %q, %v; want %q", s, err, text)
	}
	got, err = DecodePayloadBase64(" \t" + text + "\r\n")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodePayloadBase64 = %+v, %v; want %+v", got, err, want)
	}
}

// referenceEncoding encodes p with msgpack/v5's primitives, which write the
// smallest encoding of each integer, array header and bin header, as
// msgspec does.
func referenceEncoding(p *Payload) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	var err error
	must := func(e error) { err = errors.Join(err, e) }
	if p.Form == FormNested {
		must(e.EncodeArrayLen(2))
		must(e.EncodeUint(1))
		must(e.EncodeArrayLen(3))
		must(e.EncodeUint(uint64(p.NumTokens)))
		must(e.EncodeUint(uint64(p.TPSize)))
	} else {
		must(e.EncodeArrayLen(3))
		must(e.EncodeUint(1))
		must(e.EncodeUint(uint64(p.NumTokens)))
	}
	must(e.EncodeArrayLen(len(p.Groups)))
	for _, g := range p.Groups {
		switch {
		case p.Form == FormNested && g.Mix != nil:
			must(e.EncodeArrayLen(6))
		case p.Form == FormNested:
			must(e.EncodeArrayLen(5))
		default:
			must(e.EncodeArrayLen(4))
		}
		must(e.EncodeUint(uint64(g.ID)))
		must(e.EncodeUint(g.Fingerprint))
		must(e.EncodeUint(uint64(g.Start)))
		if p.Form == FormNested {
			must(e.EncodeUint(uint64(g.BlockSize)))
		}
		must(e.EncodeBytes(append([]byte{}, leValues(g.Values...)...)))
		if g.Mix != nil {
			must(e.EncodeBytes(append([]byte{}, leValues(g.Mix...)...)))
		}
	}
	if err != nil {
		panic(err) // writing to a bytes.Buffer does not fail
	}
	return buf.Bytes()
}

// payloadsEqual compares payloads treating nil and empty Values alike.
func payloadsEqual(a, b *Payload) bool {
	if a.Form != b.Form || a.NumTokens != b.NumTokens || a.TPSize != b.TPSize || len(a.Groups) != len(b.Groups) {
		return false
	}
	for i := range a.Groups {
		x, y := a.Groups[i], b.Groups[i]
		if x.ID != y.ID || x.Fingerprint != y.Fingerprint || x.Start != y.Start || x.BlockSize != y.BlockSize || len(x.Values) != len(y.Values) {
			return false
		}
		for k := range x.Values {
			if x.Values[k] != y.Values[k] {
				return false
			}
		}
		if (x.Mix == nil) != (y.Mix == nil) || !slices.Equal(x.Mix, y.Mix) {
			return false
		}
	}
	return true
}

func TestPayloadForm(t *testing.T) {
	for _, f := range []PayloadForm{FormNested, FormFlat} {
		got, err := ParsePayloadForm(f.String())
		if err != nil || got != f {
			t.Errorf("ParsePayloadForm(%q) = %v, %v", f.String(), got, err)
		}
	}
	if FormNested.String() != "nested" || FormFlat.String() != "flat" || PayloadForm(7).String() != "PayloadForm(7)" {
		t.Errorf("String: %q %q %q", FormNested, FormFlat, PayloadForm(7))
	}
	for _, s := range []string{"", "Nested", "FLAT", " flat", "tuple"} {
		if _, err := ParsePayloadForm(s); err == nil || !strings.Contains(err.Error(), "unknown payload form") {
			t.Errorf("ParsePayloadForm(%q) = %v, want an unknown-form error", s, err)
		}
	}
}

func TestPayloadErrorString(t *testing.T) {
	e := &parse.Error{Format: parse.Payload, Field: "groups[2].values", Msg: "bin length 13 is not a multiple of 8"}
	if got, want := e.Error(), "payload: groups[2].values: bin length 13 is not a multiple of 8"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (&parse.Error{Format: parse.Payload, Msg: "empty input"}).Error(); got != "payload: empty input" {
		t.Errorf("Error() = %q", got)
	}
}

func TestEncodePayloadRejects(t *testing.T) {
	nested := func(mut func(p *Payload)) *Payload {
		p := &Payload{Form: FormNested, NumTokens: 40, TPSize: 1, Groups: []PayloadGroup{
			{ID: 0, Fingerprint: 1, Start: 0, BlockSize: 16, Values: []uint64{1, 2, 3}},
			{ID: 1, Fingerprint: 2, Start: 1, BlockSize: 16, Values: []uint64{4}},
		}}
		mut(p)
		return p
	}
	manyGroups := func(dupAt, of int) *Payload {
		p := &Payload{Form: FormFlat}
		for i := range 100 {
			p.Groups = append(p.Groups, PayloadGroup{ID: 1000 - i})
		}
		p.Groups[dupAt].ID = p.Groups[of].ID
		return p
	}
	cases := []struct {
		name     string
		p        *Payload
		contains string
	}{
		{"nil", nil, "payload: nil payload"},
		{"form", nested(func(p *Payload) { p.Form = 2 }), "form: unknown payload form 2"},
		{"num_tokens negative", nested(func(p *Payload) { p.NumTokens = -1 }), "num_tokens: value -1 is out of range"},
		{"num_tokens huge", nested(func(p *Payload) { p.NumTokens = 1<<40 + 1 }), "num_tokens: value 1099511627777"},
		{"tp_size 0", nested(func(p *Payload) { p.TPSize = 0 }), "tp_size: value 0 is out of range [1, 65536]"},
		{"flat tp_size", nested(func(p *Payload) { p.Form = FormFlat; p.Groups = nil }), "tp_size: tp_size 1 is not carried by the flat form"},
		{"flat block_size", nested(func(p *Payload) { p.Form = FormFlat; p.TPSize = 0 }), "groups[0].block_size: block_size 16 is not carried by the flat form"},
		{"id negative", nested(func(p *Payload) { p.Groups[1].ID = -1 }), "groups[1].id: value -1 is out of range"},
		{"id huge", nested(func(p *Payload) { p.Groups[1].ID = 1 << 31 }), "groups[1].id: value 2147483648"},
		{"start", nested(func(p *Payload) { p.Groups[0].Start = -3 }), "groups[0].start: value -3"},
		{"block_size", nested(func(p *Payload) { p.Groups[1].BlockSize = 1<<20 + 1 }), "groups[1].block_size: value 1048577"},
		{"duplicate", nested(func(p *Payload) { p.Groups[1].ID = 0 }), "groups[1].id: duplicate group id 0 (also groups[0])"},
		{"flat mix", nested(func(p *Payload) {
			p.Form, p.TPSize = FormFlat, 0
			for i := range p.Groups {
				p.Groups[i].BlockSize = 0
			}
			p.Groups[1].Mix = []uint64{9}
		}), "groups[1].mix: the flat form does not carry the mix check"},
		{"mix length", nested(func(p *Payload) { p.Groups[0].Mix = []uint64{7, 8} }), "groups[0].mix: 2 values, values has 3"},
		{"duplicate sorted path", manyGroups(70, 20), "groups[70].id: duplicate group id 980 (also groups[20])"},
		{"earliest duplicate", manyGroups(99, 98), "groups[99].id: duplicate group id 902 (also groups[98])"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := EncodePayload(c.p)
			pe := parse.As(err, parse.Payload)
			if b != nil || pe == nil || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("EncodePayload = %x, %v; want a *parse.Error (parse.Payload) containing %q", b, err, c.contains)
			}
			if s, err := EncodePayloadBase64(c.p); s != "" || err == nil {
				t.Fatalf("EncodePayloadBase64 = %q, %v; want an error", s, err)
			}
		})
	}
}

// genPayload draws a valid payload of either form: groups with distinct ids,
// integers spread over every encoding width, values of 0 to 70 positions.
func genPayload(t *rapid.T) *Payload {
	form := rapid.SampledFrom([]PayloadForm{FormNested, FormFlat}).Draw(t, "form")
	widthInt := func(max uint64, label string) uint64 {
		hi := rapid.SampledFrom([]uint64{0x7f, 0xff, 0xffff, 0xffffffff, max}).Draw(t, label+"_width")
		return rapid.Uint64Range(0, min(hi, max)).Draw(t, label)
	}
	p := &Payload{Form: form, NumTokens: int(widthInt(payloadMaxTokens, "num_tokens"))}
	if form == FormNested {
		p.TPSize = int(rapid.Uint64Range(1, payloadMaxTPSize).Draw(t, "tp_size"))
	}
	ids := rapid.SliceOfNDistinct(rapid.IntRange(0, payloadMaxGroupID), 0, 20, rapid.ID[int]).Draw(t, "ids")
	for _, id := range ids {
		g := PayloadGroup{
			ID:          id,
			Fingerprint: widthInt(math.MaxUint64, "fingerprint"),
			Start:       int(widthInt(payloadMaxTokens, "start")),
			Values:      rapid.SliceOfN(rapid.Uint64(), 0, 70).Draw(t, "values"),
		}
		if form == FormNested {
			g.BlockSize = int(rapid.Uint64Range(1, payloadMaxBlockSize).Draw(t, "block_size"))
			if rapid.Bool().Draw(t, "mix") {
				g.Mix = make([]uint64, len(g.Values))
				for k := range g.Mix {
					g.Mix[k] = rapid.Uint64().Draw(t, "mix value")
				}
			}
		}
		p.Groups = append(p.Groups, g)
	}
	return p
}

func TestPayloadRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPayload(t)
		b, err := EncodePayload(p)
		if err != nil {
			t.Fatalf("EncodePayload: %v", err)
		}
		if len(b) != cap(b) {
			t.Fatalf("EncodePayload wrote %d bytes into %d allocated", len(b), cap(b))
		}
		if ref := referenceEncoding(p); !bytes.Equal(b, ref) {
			t.Fatalf("EncodePayload =\n%x, msgpack/v5 encodes\n%x", b, ref)
		}
		q, err := DecodePayload(b)
		if err != nil {
			t.Fatalf("DecodePayload: %v", err)
		}
		if !payloadsEqual(p, q) {
			t.Fatalf("round trip: %+v, want %+v", q, p)
		}
		s, err := EncodePayloadBase64(p)
		if err != nil {
			t.Fatal(err)
		}
		if q, err = DecodePayloadBase64(s); err != nil || !payloadsEqual(p, q) {
			t.Fatalf("base64 round trip: %+v, %v", q, err)
		}
		// msgpack/v5 reads the same structure back.
		var generic []any
		if err := msgpack.Unmarshal(b, &generic); err != nil {
			t.Fatalf("msgpack/v5 cannot read the encoding: %v", err)
		}
		groups := generic[len(generic)-1]
		if p.Form == FormNested {
			body := generic[1].([]any)
			if toUint(body[0]) != uint64(p.NumTokens) || toUint(body[1]) != uint64(p.TPSize) {
				t.Fatalf("msgpack/v5 reads body %v", body)
			}
			groups = body[2]
		} else if toUint(generic[1]) != uint64(p.NumTokens) {
			t.Fatalf("msgpack/v5 reads num_tokens %v", generic[1])
		}
		gs := groups.([]any)
		if len(gs) != len(p.Groups) {
			t.Fatalf("msgpack/v5 reads %d groups, want %d", len(gs), len(p.Groups))
		}
		for i, g := range gs {
			fields := g.([]any)
			if toUint(fields[1]) != p.Groups[i].Fingerprint {
				t.Fatalf("msgpack/v5 reads fingerprint %v, want %d", fields[1], p.Groups[i].Fingerprint)
			}
			values := fields[len(fields)-1]
			if p.Groups[i].Mix != nil {
				values = fields[4]
				if !bytes.Equal(fields[5].([]byte), leValues(p.Groups[i].Mix...)) {
					t.Fatalf("msgpack/v5 reads mix %x", fields[5])
				}
			}
			if !bytes.Equal(values.([]byte), leValues(p.Groups[i].Values...)) {
				t.Fatalf("msgpack/v5 reads values %x", values)
			}
		}
	})
}

func toUint(v any) uint64 {
	switch x := v.(type) {
	case int8:
		return uint64(x)
	case int16:
		return uint64(x)
	case int32:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	}
	panic("not an integer")
}

// TestPayloadDuplicatesAgree checks the sorting duplicate finder against the
// quadratic one.
func TestPayloadDuplicatesAgree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SliceOfN(rapid.IntRange(0, 40), 0, 60).Draw(t, "ids")
		groups := make([]PayloadGroup, len(ids))
		for i, id := range ids {
			groups[i].ID = id
		}
		f1, d1 := firstDuplicateSmall(groups)
		f2, d2 := firstDuplicate[int32](groups)
		f3, d3 := firstDuplicate[int](groups)
		if f1 != f2 || d1 != d2 || f1 != f3 || d1 != d3 {
			t.Fatalf("small (%d, %d), sorted int32 (%d, %d), sorted int (%d, %d)", f1, d1, f2, d2, f3, d3)
		}
	})
}

// decodeEntryPoints runs a vector through every entry point that takes it:
// msgpack through DecodePayload and, as base64 with and without surrounding
// whitespace, through DecodePayloadBase64; text through DecodePayloadBase64.
func decodeEntryPoints(v testfiles.PayloadVector) map[string]func() (*Payload, error) {
	if v.Form == "base64" {
		return map[string]func() (*Payload, error){
			"DecodePayloadBase64": func() (*Payload, error) { return DecodePayloadBase64(string(v.Input)) },
		}
	}
	text := base64.StdEncoding.EncodeToString(v.Input)
	return map[string]func() (*Payload, error){
		"DecodePayload":              func() (*Payload, error) { return DecodePayload(v.Input) },
		"DecodePayloadBase64":        func() (*Payload, error) { return DecodePayloadBase64(text) },
		"DecodePayloadBase64/spaced": func() (*Payload, error) { return DecodePayloadBase64("\n " + text + "\t\n") },
	}
}

func TestPayloadCorpus(t *testing.T) {
	for _, v := range testfiles.ReadPayloadVectors(t, filepath.Join("testdata", "payload")) {
		t.Run(v.Name, func(t *testing.T) {
			for entry, decode := range decodeEntryPoints(v) {
				p, err := decode()
				if v.Form != "base64" && len(v.Input) == 0 && entry != "DecodePayload" {
					// Empty msgpack is empty text: the base64 layer reports it.
					if err == nil || !strings.Contains(err.Error(), "base64: empty input") {
						t.Errorf("%s: %v, want a base64 empty-input error", entry, err)
					}
					continue
				}
				checkOutcome(t, entry, v, p, err)
				limit := 16*inputLen(v, entry) + 4096
				if got := bytesAllocated(func() { _, _ = decode() }); got > uint64(limit) {
					t.Errorf("%s allocated %d bytes for %d input bytes, want at most %d", entry, got, inputLen(v, entry), limit)
				}
			}
		})
	}
}

func inputLen(v testfiles.PayloadVector, entry string) int {
	if entry == "DecodePayload" || v.Form == "base64" {
		return len(v.Input)
	}
	return base64.StdEncoding.EncodedLen(len(v.Input))
}

func checkOutcome(t *testing.T, entry string, v testfiles.PayloadVector, p *Payload, err error) {
	t.Helper()
	if v.Expect == "error" {
		pe := parse.As(err, parse.Payload)
		if p != nil || pe == nil {
			t.Fatalf("%s = %+v, %v; want nil and a *parse.Error (parse.Payload)", entry, p, err)
		}
		if !strings.Contains(err.Error(), v.Contains) {
			t.Fatalf("%s: error %q does not contain %q", entry, err, v.Contains)
		}
		if !strings.HasPrefix(err.Error(), "payload: ") {
			t.Fatalf("%s: error %q lacks the \"payload: \" prefix", entry, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", entry, err)
	}
	if p.Form.String() != v.Shape {
		t.Fatalf("%s: form %v, want %s", entry, p.Form, v.Shape)
	}
	checkReencode(t, p)
}

// checkReencode asserts that a decoded payload encodes, and that its
// encoding decodes to the same payload and re-encodes to the same bytes.
func checkReencode(t testing.TB, p *Payload) {
	t.Helper()
	if len(p.Notes) > 0 || checkPayload(p) != nil {
		// Decoded leniently (docs/spec.md §8): a negative or huge integer, a
		// repeated group id. Only a sane payload is written back.
		return
	}
	b, err := EncodePayload(p)
	if err != nil {
		t.Fatalf("EncodePayload of a decoded payload: %v", err)
	}
	q, err := DecodePayload(b)
	if err != nil {
		t.Fatalf("DecodePayload of an encoded payload: %v", err)
	}
	if !payloadsEqual(p, q) {
		t.Fatalf("re-encoded payload decodes to %+v, want %+v", q, p)
	}
	if b2, err := EncodePayload(q); err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("encoding is not canonical: %x then %x (%v)", b, b2, err)
	}
}

// bytesAllocated returns the heap bytes f allocates, averaged over a few runs.
func bytesAllocated(f func()) uint64 {
	const runs = 4
	f() // warm up
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs
}

// TestPayloadHostileLarge covers inputs too large to keep as files: deep
// nesting, huge claimed lengths, and the densest valid payloads, where the
// decoded value is largest relative to the input.
func TestPayloadHostileLarge(t *testing.T) {
	deep := func(prefix []byte, n int, suffix ...byte) []byte {
		return cat(prefix, bytes.Repeat([]byte{0x91}, n), suffix)
	}
	flatGroups := func(n int) []byte {
		b := appendArrayHeader([]byte{0x93, 1, 40}, n)
		for i := range n {
			b = append(b, 0x94)
			b = appendUint(b, uint64(i))
			b = append(b, 0, 0, 0xc4, 0)
		}
		return b
	}
	nestedGroups := func(n int, values int) []byte {
		b := appendArrayHeader([]byte{0x92, 1, 0x93, 40, 1}, n)
		for i := range n {
			b = append(b, 0x95)
			b = appendUint(b, uint64(i))
			b = append(b, 0, 0, 1)
			b = appendBinHeader(b, 8*values)
			b = append(b, make([]byte, 8*values)...)
		}
		return b
	}
	// 100001 groups, the last repeating id 12345.
	dup := appendArrayHeader([]byte{0x93, 1, 40}, 100001)
	dup = append(dup, flatGroups(100000)[8:]...)
	dup = append(dup, 0x94, 0xcd, 0x30, 0x39, 0, 0, 0xc4, 0)
	all := flatGroups(100000)
	cases := []struct {
		name     string
		input    []byte
		contains string // empty: must decode
	}{
		{"depth 100000 top", deep(nil, 100000, 1), "top level: array length 1"},
		{"depth 100000 body", deep([]byte{0x92, 1}, 100000, 1), "body: array length 1"},
		{"depth 100000 groups", deep([]byte{0x93, 1, 40}, 100000), "groups[0]: array length 1"},
		{"depth 100000 values", deep([]byte{0x93, 1, 40, 0x91, 0x94, 0, 0, 0}, 100000), "groups[0].values: want bin, found fixarray"},
		{"array16 top", []byte{0xdc, 0xff, 0xff}, "array length 65535"},
		{"bin32 max", []byte{0x93, 1, 40, 0x91, 0x94, 0, 0, 0, 0xc6, 0xff, 0xff, 0xff, 0xff}, "runs past the end"},
		{"bin32 just short", cat([]byte{0x93, 1, 40, 0x91, 0x94, 0, 0, 0, 0xc6, 0, 1, 0, 0}, make([]byte, 65535)), "bin32 (0xc6) data of 65536 bytes"},
		{"groups claimed one too many", cat(all[:3], appendArrayHeader(nil, 100001+len(all)/6), all[8:]), "but only"},
		{"last group truncated", all[:len(all)-3], "groups[99999].start: input ends at offset"},
		{"100000 minimal flat groups", flatGroups(100000), ""},
		{"100000 minimal nested groups", nestedGroups(100000, 0), ""},
		{"100000 nested groups of 1 value", nestedGroups(100000, 1), ""},
		{"one group of 1000000 values", nestedGroups(1, 1000000), ""},
		{"duplicate among 100001", dup, ""},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := DecodePayload(c.input)
			if c.contains == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.name == "duplicate among 100001" {
					// As vLLM's consumer: the last entry of id 12345 is kept,
					// in its place (the end), with a note.
					note := "group id 12345 listed more than once: the last entry (groups[100000]) is used, as vLLM's consumer does"
					if n := len(p.Groups); n != 100000 || p.Groups[n-1].ID != 12345 || p.Groups[12345].ID == 12345 || !slices.Equal(p.Notes, []string{note}) {
						t.Fatalf("%d groups, last id %d, groups[12345] id %d, notes %q; want 100000 groups ending with id 12345 and the note %q", n, p.Groups[n-1].ID, p.Groups[12345].ID, p.Notes, note)
					}
				} else if len(p.Notes) > 0 {
					t.Fatalf("notes %q, want none", p.Notes)
				}
				checkReencode(t, p)
			} else {
				pe := parse.As(err, parse.Payload)
				if p != nil || pe == nil || !strings.Contains(err.Error(), c.contains) {
					t.Fatalf("DecodePayload = %v, %v; want a *parse.Error (parse.Payload) containing %q", p != nil, err, c.contains)
				}
			}
			limit := uint64(16*len(c.input) + 4096)
			if got := bytesAllocated(func() { _, _ = DecodePayload(c.input) }); got > limit {
				t.Errorf("DecodePayload allocated %d bytes for %d input bytes, want at most %d", got, len(c.input), limit)
			}
			text := base64.StdEncoding.EncodeToString(c.input)
			limit = uint64(16*len(text) + 4096)
			if got := bytesAllocated(func() { _, _ = DecodePayloadBase64(text) }); got > limit {
				t.Errorf("DecodePayloadBase64 allocated %d bytes for %d input bytes, want at most %d", got, len(text), limit)
			}
		})
	}
}

// TestDecodePayloadAllocs pins the number of allocations of a decode: the
// payload, its groups, one slice per non-empty values bin.
func TestDecodePayloadAllocs(t *testing.T) {
	p := &Payload{Form: FormNested, NumTokens: 100, TPSize: 2, Groups: []PayloadGroup{
		{ID: 0, Fingerprint: 1, BlockSize: 16, Values: []uint64{1, 2, 3, 4, 5, 6, 7}},
		{ID: 1, Fingerprint: 2, BlockSize: 16, Values: []uint64{1, 2, 3, 4, 5, 6, 7}},
		{ID: 2, Fingerprint: 3, BlockSize: 16},
	}}
	b, err := EncodePayload(p)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodePayload(b) }); n != 4 {
		t.Errorf("DecodePayload made %v allocations, want 4", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = EncodePayload(p) }); n != 1 {
		t.Errorf("EncodePayload made %v allocations, want 1", n)
	}
}
