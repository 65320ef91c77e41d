package report

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// TestInspectHybridFits: a hybrid dump's inspect table (attention and
// mamba state groups, TP 2), styled and aligned on a terminal 80 and 60
// cells wide, has no line wider than the terminal and keeps the kind
// column: read back from the grid, the rows' kinds are, in order, the
// kinds of the dump's caches (full_attention for the attention layers,
// mamba for the state layers).
func TestInspectHybridFits(t *testing.T) {
	paths := goldenSide(t, filepath.Join(t.TempDir(), "hybrid"), synth.Config{Preset: "mamba2-hybrid", TP: 2})
	d, err := layout.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := NewInspectJSON([]*layout.Dump{d})
	var want []string
	for _, g := range in.Dumps[0].Groups {
		for range g.Caches {
			want = append(want, g.Kind)
		}
	}
	if !slices.Contains(want, "full_attention") || !slices.Contains(want, "mamba") {
		t.Fatalf("the hybrid's caches are of kinds %q, want attention and mamba", want)
	}
	tables := InspectTables(in)
	for _, width := range []int{80, 60} {
		for _, style := range []Style{{Aligned: true, Width: width}, {Color: true, Width: width}} {
			var b bytes.Buffer
			if err := tables[0].Render(&b, FormatTable, style); err != nil {
				t.Fatal(err)
			}
			out := ansi.Strip(b.String())
			kindCol := -1
			var got []string
			for l := range strings.SplitSeq(out, "\n") {
				if w := ansi.StringWidth(l); w > width {
					t.Errorf("width %d (%+v): line %d cells wide: %q", width, style, w, l)
				}
				if !strings.HasPrefix(l, "│") {
					continue
				}
				cells := strings.Split(l, "│")
				for i := range cells {
					cells[i] = strings.TrimSpace(cells[i])
				}
				if kindCol < 0 {
					kindCol = slices.Index(cells, "kind")
					if kindCol < 0 {
						t.Fatalf("width %d (%+v): no kind column in the header %q:\n%s", width, style, l, out)
					}
					continue
				}
				if cells[kindCol] != "" {
					got = append(got, cells[kindCol])
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("width %d (%+v): the rows' kinds are %q, want %q:\n%s", width, style, got, want, out)
			}
		}
	}
}
