package memlimit

import (
	"runtime/debug"
	"testing"
)

// TestBytes: on Linux and macOS the machine's memory is known; Go's soft
// limit lowers the answer.
func TestBytes(t *testing.T) {
	n := Bytes()
	if n <= 0 {
		t.Skip("no memory size on this system")
	}
	old := debug.SetMemoryLimit(n / 2)
	defer debug.SetMemoryLimit(old)
	if got := Bytes(); got != n/2 {
		t.Errorf("with GOMEMLIMIT at %d: got %d", n/2, got)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		n    float64
		want string
	}{{512, "512 B"}, {1536, "1.5 KiB"}, {1 << 40, "1.0 TiB"}, {1e15, "909.5 TiB"}} {
		if got := Format(c.n); got != c.want {
			t.Errorf("Format(%v) = %q, want %q", c.n, got, c.want)
		}
	}
}
