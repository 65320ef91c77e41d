package report_test

import (
	"context"
	"encoding/json"
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
// box); the page does not scroll sideways, nor does any part of the
// picture pass the window's edge; the holes the drop left are drawn. KVAUDIT_SHOTS=DIR also keeps screenshots (light and dark) there.
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
	if cells == 0 {
		t.Fatal("the page draws no picture")
	}
	widths := []int{1400, 390}
	var frames []browsertest.Frame
	for _, w := range widths {
		frames = append(frames, browsertest.Frame{File: file, Width: w, Height: 900})
	}
	results, requests := b.Measure(t, frames, false, pictureScript)
	if len(requests) > 0 {
		t.Errorf("the page sent requests: %q", requests)
	}
	for fi, width := range widths {
		var l pictureSeen
		if err := json.Unmarshal([]byte(results[fi]), &l); err != nil || l.Error != "" {
			t.Fatalf("%s: %v %s", results[fi], err, l.Error)
		}
		if l.Width != width {
			t.Fatalf("measured a window %d wide, want %d", l.Width, width)
		}
		if len(l.Cells) != cells {
			t.Fatalf("%d px: %d cells laid out, the page has %d", width, len(l.Cells), cells)
		}
		if l.Scroll > l.Width {
			t.Errorf("%d px: the page scrolls sideways (%d px wide)", width, l.Scroll)
		}
		// The picture's parts (its legend, notes, captions, and the
		// boxes the grids scroll in) stay inside the window.
		for i, p := range l.Parts {
			if p.X < 0 || p.X+p.W > float64(width)+0.5 {
				t.Errorf("%d px: part %d of the picture spans x %g-%g", width, i, p.X, p.X+p.W)
			}
		}
		seen := 0
		for i, c := range l.Cells {
			if c.W < 8 || c.H < 8 {
				t.Errorf("%d px: cell %d is %gx%g px", width, i, c.W, c.H)
			}
			if c.Visible {
				seen++
			}
		}
		if width == 1400 && seen != cells {
			t.Errorf("%d px: %d of %d cells in view", width, seen, cells)
		}
		if width == 390 {
			// The first cell of each row (rows are picBlocks cells).
			for i := 0; i < len(l.Cells); i += picBlocks {
				if !l.Cells[i].Visible {
					t.Errorf("%d px: the first cell of row %d is out of view (x %g)", width, i/picBlocks, l.Cells[i].X)
				}
			}
		}
		if l.Holes == 0 {
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

// pictureScript measures what a person sees of a transfers page's
// picture (browsertest.Measure): the window's and the page's width, the
// boxes of the picture's parts (a part wider than the window would make
// the page scroll), its cells' boxes and whether each is in view (inside
// the window and the box its grid scrolls in), and its holes.
const pictureScript = `
var out = {width: win.innerWidth, scroll: doc.scrollingElement.scrollWidth, parts: [], cells: [],
  holes: doc.querySelectorAll("table.xg td.x-h").length};
for (var e of doc.querySelectorAll("#picture > *, #picture figure > *")) {
  var r = e.getBoundingClientRect(); out.parts.push({x: r.left, w: r.width});
}
for (var e of doc.querySelectorAll("table.xg td.xc")) {
  var r = e.getBoundingClientRect(), box = e.closest(".xwrap").getBoundingClientRect();
  out.cells.push({x: r.left, w: r.width, h: r.height,
    visible: r.width > 0 && r.height > 0 && r.left >= 0 && r.left < win.innerWidth && r.left >= box.left && r.left < box.right});
}
return out;`

// pictureSeen is what pictureScript reports.
type pictureSeen struct {
	Width, Scroll int
	Parts         []struct{ X, W float64 }
	Cells         []struct {
		X, W, H float64
		Visible bool
	}
	Holes int
	Error string
}
