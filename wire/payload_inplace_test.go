package wire

import (
	"encoding/base64"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/internal/testfiles"
)

// decodeInPlace runs DecodePayloadInPlace on a fresh aligned copy of in.
func decodeInPlace(in []byte, text bool) (*Payload, error) {
	buf := NewPayloadBuffer(len(in))
	copy(buf, in)
	return DecodePayloadInPlace(buf, text)
}

// TestDecodePayloadInPlace: decoding in place gives what the copying
// decoders give, payload and notes or error, on every corpus vector, as
// text and as msgpack, at aligned and unaligned buffers.
func TestDecodePayloadInPlace(t *testing.T) {
	for _, v := range testfiles.ReadPayloadVectors(t, filepath.Join("testdata", "payload")) {
		text := string(v.Input)
		if v.Form != "base64" {
			text = base64.StdEncoding.EncodeToString(v.Input)
			want, wantErr := DecodePayload(v.Input)
			got, err := decodeInPlace(v.Input, false)
			checkSame(t, v.Name+" msgpack", want, wantErr, got, err)
			// Unaligned: decoded by copying, same result.
			buf := NewPayloadBuffer(len(v.Input) + 1)[1:]
			copy(buf, v.Input)
			got, err = DecodePayloadInPlace(buf, false)
			checkSame(t, v.Name+" msgpack unaligned", want, wantErr, got, err)
		}
		want, wantErr := DecodePayloadBase64(text)
		got, err := decodeInPlace([]byte(text), true)
		checkSame(t, v.Name+" text", want, wantErr, got, err)
	}
}

func checkSame(t *testing.T, name string, want *Payload, wantErr error, got *Payload, err error) {
	t.Helper()
	switch {
	case (wantErr == nil) != (err == nil):
		t.Errorf("%s: in place %v, copying %v", name, err, wantErr)
	case err != nil:
		if err.Error() != wantErr.Error() {
			t.Errorf("%s: in place %q, copying %q", name, err, wantErr)
		}
	case !payloadsEqual(want, got) || !slices.Equal(want.Notes, got.Notes):
		t.Errorf("%s: in place %+v, copying %+v", name, got, want)
	}
}

// TestDecodePayloadInPlaceMemory: a payload of 1M values (8 MB, 10.7 MB
// of base64) decodes in place allocating a few hundred bytes besides its
// buffer (docs/spec.md §8: never more than the input's size), where the copying
// decoder allocates the decoded bytes and the values again.
func TestDecodePayloadInPlaceMemory(t *testing.T) {
	values := make([]uint64, 1<<20)
	for i := range values {
		values[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	p := &Payload{Form: FormFlat, NumTokens: 16 << 20, Groups: []PayloadGroup{{ID: 0, Fingerprint: 1 << 63, Values: values}, {ID: 1, Values: values[:7]}}}
	text, err := EncodePayloadBase64(p)
	if err != nil {
		t.Fatal(err)
	}
	buf := NewPayloadBuffer(len(text))
	var got *Payload
	n := bytesAllocated(func() {
		copy(buf, text)
		got, err = DecodePayloadInPlace(buf, true)
	})
	if err != nil || !payloadsEqual(got, p) {
		t.Fatalf("decoded %v", err)
	}
	if n > 4096 {
		t.Errorf("in place: %d bytes allocated for %d bytes of text", n, len(text))
	}
	if c := bytesAllocated(func() { _, _ = DecodePayloadBase64(text) }); c < uint64(len(text)) {
		t.Errorf("copying decoder: %d bytes, expected at least the text's %d (the test measures nothing)", c, len(text))
	}
}

// BenchmarkDecodePayloadMemory reports the bytes each decoder allocates
// per byte of a 64 MiB base64 payload (alloc-x; the in-place decoder's
// buffer is the input itself and not counted).
func BenchmarkDecodePayloadMemory(b *testing.B) {
	values := make([]uint64, 6<<20)
	p := &Payload{Form: FormFlat, NumTokens: 40, Groups: []PayloadGroup{{ID: 0, Values: values}}}
	text, err := EncodePayloadBase64(p)
	if err != nil {
		b.Fatal(err)
	}
	buf := NewPayloadBuffer(len(text))
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"in-place", func() { copy(buf, text); _, _ = DecodePayloadInPlace(buf, true) }},
		{"copying", func() { _, _ = DecodePayloadBase64(text) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			x := float64(bytesAllocated(c.f)) / float64(len(text))
			for b.Loop() {
				c.f()
			}
			b.ReportMetric(x, "alloc-x")
		})
	}
}
