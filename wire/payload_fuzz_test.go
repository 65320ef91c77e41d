package wire

import (
	"path/filepath"
	"testing"

	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/parse"
)

// FuzzDecodePayload feeds arbitrary bytes to DecodePayload and, as text, to
// DecodePayloadBase64. Neither may panic; a failure is a nil payload and a
// *parse.Error (parse.Payload); a success holds no more than the input can carry, encodes,
// and its encoding decodes to the same payload. Seeds: every vector of
// testdata/payload (its msgpack, or its text for base64 vectors) and a few
// valid encodings of both forms.
func FuzzDecodePayload(f *testing.F) {
	for _, v := range testfiles.ReadPayloadVectors(f, filepath.Join("testdata", "payload")) { // fails on an empty glob
		f.Add(v.Input)
	}
	for _, p := range []*Payload{
		{Form: FormFlat, NumTokens: 40, Groups: []PayloadGroup{
			{ID: 0, Fingerprint: 1<<64 - 5, Values: []uint64{1, 2, 3}},
			{ID: 3, Fingerprint: 200, Start: 2, Values: []uint64{1 << 63}},
		}},
		{Form: FormNested, NumTokens: 1000, TPSize: 2, Groups: []PayloadGroup{
			{ID: 0, Fingerprint: 0x9abcdef0, BlockSize: 16, Values: make([]uint64, 40)},
			{ID: 1, Fingerprint: 0x12345, Start: 300, BlockSize: 256},
		}},
		{Form: FormNested, TPSize: 1},
	} {
		b, err := EncodePayload(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		s, err := EncodePayloadBase64(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePayload(data)
		checkFuzzResult(t, "DecodePayload", len(data), p, err)
		p, err = DecodePayloadBase64(string(data))
		checkFuzzResult(t, "DecodePayloadBase64", len(data), p, err)
		q, qerr := decodeInPlace(data, true)
		checkSame(t, "DecodePayloadInPlace", p, err, q, qerr)
		p, err = DecodePayload(data)
		q, qerr = decodeInPlace(data, false)
		checkSame(t, "DecodePayloadInPlace msgpack", p, err, q, qerr)
	})
}

func checkFuzzResult(t *testing.T, entry string, inputLen int, p *Payload, err error) {
	t.Helper()
	if err != nil {
		pe := parse.As(err, parse.Payload)
		if p != nil || pe == nil {
			t.Fatalf("%s = %+v, %v; want nil and a *parse.Error (parse.Payload)", entry, p, err)
		}
		return
	}
	if p == nil {
		t.Fatalf("%s = nil, nil", entry)
	}
	// What the decoder allocated for the result is bounded by the input:
	// a group takes at least 6 bytes on the wire, a value 8.
	footprint := 128 + 56*len(p.Groups)
	for _, g := range p.Groups {
		footprint += 8 * len(g.Values)
	}
	if footprint > 16*inputLen+4096 {
		t.Fatalf("%s: a payload of %d bytes from %d input bytes", entry, footprint, inputLen)
	}
	checkReencode(t, p)
}
