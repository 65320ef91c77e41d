package report_test

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/cmd/kvaudit/cli"
	"github.com/kvaudit/kvaudit/internal/browsertest"
	"github.com/kvaudit/kvaudit/internal/report"
)

// demoReport runs `kvaudit demo --out demo` in a temporary working
// directory and returns its report's path (as the demo says it).
func demoReport(t *testing.T) string {
	t.Helper()
	t.Chdir(t.TempDir())
	var out, errs bytes.Buffer
	if code := cli.Main([]string{"demo", "--out", "demo"}, &cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errs}); code != 0 {
		t.Fatalf("kvaudit demo: exit %d\n%s%s", code, out.String(), errs.String())
	}
	const said = "for a browser (block maps, a heatmap of layers by heads, the drill-down): demo/report.html\n"
	if !strings.Contains(out.String(), said) {
		t.Fatalf("the demo does not say where its report is (%q):\n%s", said, out.String())
	}
	return filepath.Join("demo", "report.html")
}

// TestDemoReportInBrowser opens the report `kvaudit demo` writes in
// headless Chromium: the verdict kvaudit diff gives it (mismatch, exit
// code 1), the heatmap of the mismatching position (4 layers x 8 global
// heads) with the demo's flipped bit (layer 1, global head 5) alone
// marked, the block map's 3 cells (40 tokens in blocks of 16), and no
// request to the network.
func TestDemoReportInBrowser(t *testing.T) {
	b := browsertest.Find(t)
	dom, requests := b.DOM(t, demoReport(t))
	if len(requests) > 0 {
		t.Errorf("the page sent requests: %q", requests)
	}
	text := regexp.MustCompile(`<span class="tok">([^<]*)</span>`).ReplaceAllString(dom, "$1") // ids kept on one line
	for _, want := range []string{`<span id="title">kvaudit diff: mismatch</span>`, `<b id="exit">1</b>`, "at request req-0 group 0 position 1 (tokens 16-31)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not show %s", want)
		}
	}
	report.CheckDOM(t, dom, report.DOMWant{Layers: 4, Heads: 8, FlipLayer: 1, FlipHead: 5, MapCells: 3})
}

// The README's screenshot of the demo's report, docs/report.png, is
// made by this test:
//
//	go test ./report -run TestScreenshot -update
//
// Without -update it takes the screenshot anyway (the page renders) and
// checks that docs/report.png is a PNG of that size.
const (
	shotWidth, shotHeight = 1100, 880
	shotFile              = "../../docs/report.png"
)

func TestScreenshot(t *testing.T) {
	b := browsertest.Find(t)
	shot, err := filepath.Abs(shotFile)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "report.png")
	if requests := b.Screenshot(t, demoReport(t), out, shotWidth, shotHeight, false); len(requests) > 0 {
		t.Errorf("the page sent requests: %q", requests)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if *report.Update {
		if err := os.WriteFile(shot, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("%v (go test ./report -run TestScreenshot -update makes it)", err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width != shotWidth || cfg.Height != shotHeight {
		t.Errorf("%s: %dx%d (%v), want a %dx%d PNG (go test ./report -run TestScreenshot -update makes it)", shotFile, cfg.Width, cfg.Height, err, shotWidth, shotHeight)
	}
}
