package checksum

import (
	"encoding/hex"
	"strings"
	"testing"
)

// FuzzParseBlockHash: any string either decodes to at least 8 bytes whose
// hex is the string's digits (lower-cased, without 0x), or is an error;
// never a panic.
func FuzzParseBlockHash(f *testing.F) {
	for _, s := range []string{"", "0x", "0102030405060708", "0x0102030405060708aa", "ABCDEF0123456789", "zz", "0x0x00000000000000", strings.Repeat("ff", 32)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := parseBlockHash(s)
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
