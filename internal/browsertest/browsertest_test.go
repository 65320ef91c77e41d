package browsertest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The harness catches what the report tests assert never happens: a
// request to the network (an image from another host), a script that
// runs (it marks the body); and a Content-Security-Policy like the
// report's stops both.
func TestHarness(t *testing.T) {
	b := Find(t)
	dir := t.TempDir()
	page := `<!DOCTYPE html><html><head>%s<title>t</title></head><body><p>hello</p>` +
		`<script>document.body.setAttribute("data-ran", "yes")</script><img src="http://probe.kvaudit.example/x.png"></body></html>`
	csp := `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">`
	for _, c := range []struct {
		name, head string
		ran        bool
	}{{"open", "", true}, {"csp", csp, false}} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, c.name+".html")
			if err := os.WriteFile(file, []byte(strings.Replace(page, "%s", c.head, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			dom, requests := b.DOM(t, file)
			if !strings.Contains(dom, "<p>hello</p>") {
				t.Fatalf("DOM without the page's text:\n%s", dom)
			}
			if ran := strings.Contains(dom, `data-ran="yes"`); ran != c.ran {
				t.Errorf("script ran: %v, want %v", ran, c.ran)
			}
			want := []string(nil)
			if c.ran {
				want = []string{"http://probe.kvaudit.example/x.png"}
			}
			if !slices.Equal(requests, want) {
				t.Errorf("requests %q, want %q", requests, want)
			}
		})
	}
}
