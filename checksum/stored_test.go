package checksum_test

import (
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
