package report

import (
	"io"
	"testing"
)

// BenchmarkProseBelow renders a table of many rows whose Prose column
// moves below the grid (a scrub's records not verified, each with its
// own reason), at 80 columns.
func BenchmarkProseBelow(b *testing.B) {
	t := &Table{Header: []string{"path", "status", "reason"}, Prose: []string{"reason"}}
	for i := range 3000 {
		t.Add(C("store/file-%d", i), C("mismatch"), C("record %d: the stored checksum differs from the one computed over the value", i))
	}
	for b.Loop() {
		if err := t.Render(io.Discard, FormatTable, Style{Aligned: true, Width: 80}); err != nil {
			b.Fatal(err)
		}
	}
}
