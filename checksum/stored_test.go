package checksum_test

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
)

// TestStoredTagByteOrder pins how a hex block hash becomes the tag: bytes in
// string order, the first 8 read little-endian, XOR the fingerprint.
func TestStoredTagByteOrder(t *testing.T) {
	for _, c := range []struct {
		hash string
		fp   uint64
		want uint64
	}{
		{"0102030405060708", 0, 0x0807060504030201},
		{"0x0102030405060708aabbccdd", 0, 0x0807060504030201},
		{"0102030405060708", 0x0807060504030201, 0},
		{"FF00000000000000" + strings.Repeat("00", 24), 1, 0xfe},
	} {
		got, err := checksum.StoredTag(c.hash, c.fp)
		if err != nil || got != c.want {
			t.Errorf("StoredTag(%q, %#x) = %#x, %v; want %#x", c.hash, c.fp, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "0x", "01020304050607", "0102030405060708a", "zz02030405060708", "0x 0102030405060708"} {
		if _, err := checksum.StoredTag(bad, 0); err == nil {
			t.Errorf("StoredTag(%q): no error", bad)
		}
	}
}

// FuzzParseBlockHash: any string either decodes to at least 8 bytes whose
// hex is the string's digits (lower-cased, without 0x), or is an error;
// never a panic.
func FuzzParseBlockHash(f *testing.F) {
	for _, s := range []string{"", "0x", "0102030405060708", "0x0102030405060708aa", "ABCDEF0123456789", "zz", "0x0x00000000000000", strings.Repeat("ff", 32)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := checksum.ParseBlockHash(s)
		if err != nil {
			if b != nil {
				t.Errorf("%q: bytes and an error", s)
			}
			return
		}
		if len(b) < 8 || hex.EncodeToString(b) != strings.ToLower(strings.TrimPrefix(s, "0x")) {
			t.Errorf("%q: decoded to %x", s, b)
		}
	})
}
