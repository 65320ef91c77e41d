package ranges_test

import (
	"testing"

	"github.com/kvaudit/kvaudit/internal/ranges"
)

// TestRanges: positions, layers and heads are written as compact ranges,
// ascending, whatever order they come in, without changing the input.
func TestFormat(t *testing.T) {
	if got := ranges.Format([]int{0, 1, 2, 5, 7, 8}); got != "0-2,5,7-8" {
		t.Errorf("Format = %q", got)
	}
	in := []int{8, 0, 2, 1, 7, 5}
	if got := ranges.Format(in); got != "0-2,5,7-8" || in[0] != 8 {
		t.Errorf("Format(%v) = %q", in, got)
	}
	if got := ranges.Format(nil); got != "" {
		t.Errorf("Format(nil) = %q", got)
	}
}
