package layout

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Hex64 is a uint64 that kvaudit's JSON writes as a 0x-prefixed 16-digit
// lower-case hex string (JSON numbers cannot carry every uint64 exactly).
type Hex64 uint64

// String returns the value as 0x followed by 16 lower-case hex digits.
func (h Hex64) String() string { return fmt.Sprintf("0x%016x", uint64(h)) }

// MarshalJSON writes the value as a hex string.
func (h Hex64) MarshalJSON() ([]byte, error) { return []byte(`"` + h.String() + `"`), nil }

// UnmarshalJSON reads a hex string as ParseHex64 does; a JSON number is an
// error.
func (h *Hex64) UnmarshalJSON(b []byte) error {
	// Fast path, without a string or a decoder: "0x" and hex digits.
	if len(b) >= 5 && len(b) <= 20 && b[0] == '"' && b[len(b)-1] == '"' && b[1] == '0' && b[2] == 'x' {
		var v uint64
		ok := true
		for _, c := range b[3 : len(b)-1] {
			switch {
			case '0' <= c && c <= '9':
				v = v<<4 | uint64(c-'0')
			case 'a' <= c && c <= 'f':
				v = v<<4 | uint64(c-'a'+10)
			case 'A' <= c && c <= 'F':
				v = v<<4 | uint64(c-'A'+10)
			default:
				ok = false
			}
		}
		if ok {
			*h = Hex64(v)
			return nil
		}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a 0x-prefixed hex string, got %s", b)
	}
	v, err := ParseHex64(s)
	if err != nil {
		return err
	}
	*h = Hex64(v)
	return nil
}

// ParseHex64 parses "0x" followed by 1 to 16 hex digits.
func ParseHex64(s string) (uint64, error) {
	digits, ok := strings.CutPrefix(s, "0x")
	if !ok || len(digits) == 0 || len(digits) > 16 {
		return 0, fmt.Errorf("%q is not 0x followed by 1 to 16 hex digits", s)
	}
	v, err := strconv.ParseUint(digits, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not 0x followed by 1 to 16 hex digits", s)
	}
	return v, nil
}
