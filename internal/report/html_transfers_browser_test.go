package report_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvaudit/kvaudit/internal/browsertest"
	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/transfer"
)

// TestTransfersPictureInBrowser opens the transfers page of a pull with a
// dropped descriptor in headless Chromium at 1400 and 390 px: every cell
// of the picture is drawn with a size, at 1400 px every cell is in view,
// at 390 px the first cell of every row is (the picture scrolls in its own
// box) and the page does not scroll sideways; the holes the drop left are
// drawn. KVAUDIT_SHOTS=DIR also keeps screenshots (light and dark) there.
func TestTransfersPictureInBrowser(t *testing.T) {
	b := browsertest.Find(t)
	pl := picturePull(t)
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "out")
	if _, err := inject.Inject(ctx, pl.cons, out, inject.Options{Kind: inject.XferDrop, Seed: 0, Transfers: []string{pl.logs}, Producer: pl.prod}); err != nil {
		t.Fatal(err)
	}
	res, err := transfer.AuditPaths(ctx, []string{filepath.Join(out, "nixl")}, []string{filepath.Dir(pl.prod[0].Path)}, []string{out}, transfer.Options{Lookahead: picLookahead})
	if err != nil {
		t.Fatal(err)
	}
	page := renderPicture(t, res)
	file := filepath.Join(t.TempDir(), "transfers.html")
	if err := os.WriteFile(file, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	cells := len(picCellTag.FindAllString(page, -1))
	rows := len(picRowTag.FindAllString(page, -1))
	if cells == 0 || rows == 0 {
		t.Fatal("the page draws no picture")
	}
	for _, width := range []int{1400, 390} {
		l := b.Layout(t, file, width, 900, "table.xg td.xc")
		if len(l.Boxes) != cells {
			t.Fatalf("%d px: %d cells laid out, the page has %d", width, len(l.Boxes), cells)
		}
		// The picture's parts (its legend, notes, captions, and the boxes
		// the grids scroll in) stay inside the page's width.
		for i, box := range b.Layout(t, file, width, 900, "#picture > *, #picture figure > *").Boxes {
			if box.X < 0 || box.X+box.W > float64(l.ClientWidth)+0.5 {
				t.Errorf("%d px: part %d of the picture spans x %g-%g, past the page's %d px", width, i, box.X, box.X+box.W, l.ClientWidth)
			}
		}
		seen := 0
		for i, box := range l.Boxes {
			if box.W < 8 || box.H < 8 {
				t.Errorf("%d px: cell %d is %gx%g px", width, i, box.W, box.H)
			}
			if box.Visible {
				seen++
			}
		}
		if width == 1400 && seen != cells {
			t.Errorf("%d px: %d of %d cells in view", width, seen, cells)
		}
		if width == 390 {
			// The first cell of each row (rows are picBlocks cells).
			for i := 0; i < len(l.Boxes); i += picBlocks {
				if !l.Boxes[i].Visible {
					t.Errorf("%d px: the first cell of row %d is out of view (x %g)", width, i/picBlocks, l.Boxes[i].X)
				}
			}
		}
		holes := b.Layout(t, file, width, 900, "table.xg td.x-h")
		if len(holes.Boxes) == 0 {
			t.Errorf("%d px: no hole drawn", width)
		}
	}
	if dir := os.Getenv("KVAUDIT_SHOTS"); dir != "" {
		for _, s := range []struct {
			name   string
			width  int
			dark   bool
			height int
		}{{"transfers-1400.png", 1400, false, 1300}, {"transfers-390.png", 390, false, 1600}, {"transfers-1400-dark.png", 1400, true, 1300}} {
			b.Screenshot(t, file, filepath.Join(dir, s.name), s.width, s.height, s.dark)
		}
	}
}
