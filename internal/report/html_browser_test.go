package report

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/browsertest"
)

// TestHTMLInBrowser opens the crafted report in headless Chromium and
// checks what a person would see: the verdict and exit code, one heatmap
// cell per (layer, head) of the mismatching position with the flipped
// bit's cell alone marked, the block map's cells, the hostile request id
// and layer name shown as text with no script run and no element made of
// them, and no request to the network.
func TestHTMLInBrowser(t *testing.T) {
	b := browsertest.Find(t)
	file := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(file, []byte(renderHTML(t, htmlFixture())), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, requests := b.DOM(t, file)
	if len(requests) > 0 {
		t.Errorf("the page sent requests: %q", requests)
	}
	for _, want := range []string{`<span id="title">kvaudit diff: mismatch</span>`, `<b id="verdict">mismatch</b>`, `<b id="exit">1</b>`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page does not show %s", want)
		}
	}
	checkDOM(t, dom, domWant{Layers: 4, Heads: 8, FlipLayer: 2, FlipHead: 6, MapCells: 5 + 2})
	if regexp.MustCompile(`<body[^>]*data-pwned`).MatchString(dom) {
		t.Error("the hostile layer name's script ran")
	}
	if n := strings.Count(dom, "<img"); n > 0 {
		t.Errorf("the DOM holds %d <img> element(s): the hostile id became markup", n)
	}
	if !strings.Contains(dom, "<code>&lt;img src=x onerror=alert(1)&gt;</code>") {
		t.Error("the hostile id is not shown as text in the block maps")
	}
}

// domWant is what the DOM of a report with one heatmap must hold.
type domWant struct {
	Layers, Heads, FlipLayer, FlipHead int
	// MapCells counts the cells of every block map strip.
	MapCells int
}

var (
	domHeat  = regexp.MustCompile(`(?s)<table class="hm">.*?</table>`)
	domCell  = regexp.MustCompile(`<td([^>]*)>([^<]*)</td>`)
	domStrip = regexp.MustCompile(`(?s)<td><span class="strip">(.*?)</span></td>`)
	domBlock = regexp.MustCompile(`<span class="b s-`)
)

// checkDOM checks the heatmap and block maps of a browser's DOM: one
// heatmap of layers x heads cells in layer-major order, the flipped
// cell alone marked as bits flipped (with its symbol and hint), and
// mapCells block map cells.
func checkDOM(t *testing.T, dom string, w domWant) {
	t.Helper()
	maps := domHeat.FindAllString(dom, -1)
	if len(maps) != 1 {
		t.Fatalf("%d heatmaps in the DOM, want 1", len(maps))
	}
	cells := domCell.FindAllStringSubmatch(maps[0], -1)
	if len(cells) != w.Layers*w.Heads {
		t.Fatalf("%d heatmap cells, want %d layers x %d heads", len(cells), w.Layers, w.Heads)
	}
	for i, c := range cells {
		flip := i == w.FlipLayer*w.Heads+w.FlipHead
		marked := strings.Contains(c[1], "k-flip") && c[2] == "b" && strings.Contains(c[1], "bit flipped")
		if marked != flip || (!flip && c[1] != "") {
			t.Errorf("heatmap cell layer %d head %d: %s (the flipped cell is layer %d head %d)", i/w.Heads, i%w.Heads, c[0], w.FlipLayer, w.FlipHead)
		}
	}
	n := 0
	for _, s := range domStrip.FindAllStringSubmatch(dom, -1) {
		n += len(domBlock.FindAllString(s[1], -1))
	}
	if n != w.MapCells {
		t.Errorf("%d block map cells, want %d", n, w.MapCells)
	}
}
