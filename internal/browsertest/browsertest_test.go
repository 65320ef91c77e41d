package browsertest

import (
	"io"
	"net"
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

// The proxy counts what was asked for: a request line, http or CONNECT,
// also one cut short after its target; a connection that sends nothing
// (Chromium opens such speculative connections and drops them) or sends
// no request line asks for nothing. TestHarness shows that a page's
// request still reaches it.
func TestProxyCountsRequestLines(t *testing.T) {
	p := newProxy(t)
	for _, sent := range []string{
		"",
		"GET http://a.example/x.png HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"\r\n",
		"CONNECT b.example:443 HTTP/1.1\r\n\r\n",
		"\x16\x03\x01\x02\x00\x01",
		"GET http://c.example/cut",
		"CONNECT update.googleapis.com:443 HTTP/1.1\r\n\r\n",
		"hello there friend\r\n",
	} {
		c, err := net.Dial("tcp", p.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(sent)); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c) // the proxy closes it once it has read the line
		c.Close()
	}
	got := p.close()
	want := []string{"http://a.example/x.png", "b.example:443", "http://c.example/cut"}
	if !slices.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
	if p.idle != 4 {
		t.Errorf("%d connections without a request line, want 4", p.idle)
	}
}
