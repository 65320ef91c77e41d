package verify

import (
	"testing"

	"github.com/kvaudit/kvaudit/layout"
)

// TestTailExtent: the tail audit's findings are (block, layer) regions;
// its extent counts the blocks and the layers, and the regions when they
// are not every block in every layer.
func TestTailExtent(t *testing.T) {
	f := func(req string, pos int, tp int, layer string) TailFinding {
		return TailFinding{Request: req, Position: pos, Rank: layout.Rank{TP: tp}, Layer: layer}
	}
	for _, c := range []struct {
		findings []TailFinding
		want     string
	}{
		{nil, ""},
		{[]TailFinding{f("a", 2, 0, "l0")}, "1 block over 1 layer"},
		{[]TailFinding{f("a", 2, 0, "l0"), f("a", 2, 0, "l1"), f("a", 2, 0, "l2"), f("a", 2, 0, "l3")}, "1 block over 4 layers"},
		// the same position on two ranks is two blocks
		{[]TailFinding{f("a", 2, 0, "l0"), f("a", 2, 1, "l0")}, "2 blocks over 1 layer"},
		{[]TailFinding{f("a", 2, 0, "l0"), f("a", 2, 0, "l1"), f("b", 3, 0, "l0")}, "2 blocks over 2 layers, 3 block-layer regions"},
	} {
		if got := (&TailAudit{Findings: c.findings}).Extent(); got != c.want {
			t.Errorf("%d findings: %q, want %q", len(c.findings), got, c.want)
		}
	}
}
