// Package browsertest opens HTML files in a real browser for tests:
// headless Chromium (Debian's chromium package), driven through its
// command line, gives the DOM after the page loaded (--dump-dom) or a
// screenshot, and every request the browser tried to send to the network,
// caught by an HTTP proxy the test owns: every request, http or https
// (CONNECT), goes to it, and it answers none, so nothing reaches the
// network. (--host-resolver-rules is not used: a rule that maps hosts to
// nothing stops requests before they reach the proxy, hiding them.) It is
// not API.
package browsertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Browser is a headless Chromium found on this machine.
type Browser struct {
	path string
}

// names are the executables tried, in order, when KVAUDIT_CHROMIUM does
// not name one.
var names = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Required says whether a test that needs Chromium must fail without it:
// in CI (CI=true) and when KVAUDIT_REQUIRE_CHROMIUM=1.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("KVAUDIT_REQUIRE_CHROMIUM") == "1"
}

// Find returns the browser, or skips the test with a message (fails it
// where Required).
func Find(t testing.TB) *Browser {
	t.Helper()
	if p := os.Getenv("KVAUDIT_CHROMIUM"); p != "" {
		return &Browser{path: p}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return &Browser{path: p}
		}
	}
	msg := "no Chromium (install Debian's chromium package, or set KVAUDIT_CHROMIUM): the browser test does not run"
	if Required() {
		t.Fatal(msg + ", and CI=true or KVAUDIT_REQUIRE_CHROMIUM=1 requires it")
	}
	t.Skip(msg)
	return nil
}

// ownHosts are hosts Chromium itself talks to at startup, whatever the
// page (component updates, network time, accounts): requests to them are
// caught by the proxy like any other but are not the page's.
var ownHosts = []string{
	"update.googleapis.com", "clients2.google.com", "accounts.google.com", "redirector.gvt1.com",
	"optimizationguide-pa.googleapis.com", "content-autofill.googleapis.com", "safebrowsingohttpgateway.googleapis.com",
	"edgedl.me.gvt1.com", "www.google.com", "android.clients.google.com",
}

// proxy is a local HTTP proxy that records the target of every request
// and answers none. A request is what a request line says (method,
// target, HTTP version): Chromium also opens connections to its proxy
// that it drops without sending anything (preconnects, speculative
// sockets it keeps warm), and such a connection asks for nothing, so it
// is counted apart (idle) and is not one of the page's requests.
type proxy struct {
	ln   net.Listener
	mu   sync.Mutex
	seen []string
	idle int
	wg   sync.WaitGroup
}

func newProxy(t testing.TB) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go p.serve(c)
		}
	}()
	return p
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	target, ok := requestTarget(line)
	p.mu.Lock()
	if ok {
		p.seen = append(p.seen, target)
	} else {
		p.idle++
	}
	p.mu.Unlock()
}

// requestTarget returns the target of an HTTP request line ("GET
// http://host/x HTTP/1.1", "CONNECT host:443 HTTP/1.1"), and false for
// anything else: nothing (a connection closed, or left idle, before a
// byte was sent), or bytes that are no request line. A line cut short
// after its target (the browser exited while sending it) is still that
// request.
func requestTarget(line string) (string, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f) > 3 || !isToken(f[0]) {
		return "", false
	}
	if len(f) == 3 && !strings.HasPrefix(f[2], "HTTP/") {
		return "", false
	}
	return f[1], true
}

// isToken says whether s is an HTTP method: an RFC 9110 token.
func isToken(s string) bool {
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return s != ""
}

// close stops the proxy and returns the targets the page asked for: every
// request but those to the browser's own hosts.
func (p *proxy) close() []string {
	// Connections the browser opened just before it exited may wait in
	// the listen queue: a deadline, not Close, ends the accept loop, so
	// they are accepted and read first.
	p.ln.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
	p.wg.Wait()
	p.ln.Close()
	var out []string
	for _, target := range p.seen {
		host := target
		if u, err := url.Parse(target); err == nil && u.Host != "" {
			host = u.Hostname()
		} else if h, _, err := net.SplitHostPort(target); err == nil {
			host = h
		}
		if !slices.Contains(ownHosts, host) {
			out = append(out, target)
		}
	}
	return out
}

// run starts the browser on file with the extra flags and returns its
// standard output and the requests the page tried to send.
func (b *Browser) run(t testing.TB, file string, flags ...string) (string, []string) {
	t.Helper()
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t)
	args := []string{
		"--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(),
		"--proxy-server=http://" + p.ln.Addr().String(), "--proxy-bypass-list=<-loopback>",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--disable-default-apps", "--disable-breakpad", "--metrics-recording-only",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox") // Chromium refuses to run its sandbox as root
	}
	args = append(append(args, flags...), (&url.URL{Scheme: "file", Path: abs}).String())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.path, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	requests := p.close()
	if p.idle > 0 {
		t.Logf("%d connection(s) to the proxy sent no request line (not requests)", p.idle)
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", b.path, err, tail(stderr.String(), 2000))
	}
	return string(out), requests
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// DOM loads the HTML file and returns its DOM, serialized, after the load
// (scripts, had any run, would have changed it), and the requests the
// page tried to send to the network.
func (b *Browser) DOM(t testing.TB, file string) (dom string, requests []string) {
	t.Helper()
	return b.run(t, file, "--dump-dom")
}

// Screenshot loads the HTML file in a window of width x height pixels
// (in the dark color scheme when dark) and writes what it shows to png.
// It returns the requests the page tried to send.
func (b *Browser) Screenshot(t testing.TB, file, png string, width, height int, dark bool) []string {
	t.Helper()
	abs, err := filepath.Abs(png)
	if err != nil {
		t.Fatal(err)
	}
	flags := []string{"--screenshot=" + abs, "--window-size=" + strconv.Itoa(width) + "," + strconv.Itoa(height), "--force-device-scale-factor=1"}
	if dark {
		flags = append(flags, "--force-dark-mode", "--blink-settings=preferredColorScheme=0")
	}
	_, requests := b.run(t, file, flags...)
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	return requests
}

// Frame is a page to measure (Measure) and the size of the window it is
// seen in.
type Frame struct {
	File          string
	Width, Height int
}

// Measure loads each frame's HTML file as a person would see it in a
// window of the frame's size (in the dark color scheme when dark), all
// in one browser, and returns what script, run on each laid-out page,
// returns (as JSON, in the frames' order), and the requests the pages
// tried to send.
//
// The pages themselves run no script (their policy forbids any): each is
// shown in a frame of exactly its size (srcdoc, so the frame's document
// is the measuring page's), and script, the body of a function of doc
// and win (the frame's document and window), runs in the page around
// them once the page and every frame have loaded, writing its results into that
// page's DOM, which --dump-dom gives back. Frames, not the window, set
// the width: headless Chromium's window is at least 500 pixels wide.
func (b *Browser) Measure(t testing.TB, frames []Frame, dark bool, script string) (results []string, requests []string) {
	t.Helper()
	var probe strings.Builder
	probe.WriteString(`<!DOCTYPE html><html><head><meta charset="utf-8"><style>body{margin:0}iframe{border:0;display:block}</style></head><body>`)
	width, height := 500, 0
	for i, f := range frames {
		page, err := os.ReadFile(f.File)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&probe, `<iframe id="kvaudit-frame-%d" width="%d" height="%d" srcdoc="%s"></iframe>`, i, f.Width, f.Height, html.EscapeString(string(page)))
		width, height = max(width, f.Width), height+f.Height
	}
	fmt.Fprintf(&probe, `<script>var n=%d;function measure(doc,win){%s}`+
		`function done(){var out=[];for(var i=0;i<n;i++){var f=document.getElementById("kvaudit-frame-"+i);`+
		`try{out.push(measure(f.contentDocument,f.contentWindow))}catch(e){out.push({error:String(e)})}}`+
		`var pre=document.createElement("pre");pre.id="kvaudit-result";pre.textContent=JSON.stringify(out);document.body.appendChild(pre)}`+
		`window.addEventListener("load",done);</script></body></html>`,
		len(frames), script)
	wrapper := filepath.Join(t.TempDir(), "measure.html")
	if err := os.WriteFile(wrapper, []byte(probe.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--dump-dom", "--window-size=" + strconv.Itoa(width+40) + "," + strconv.Itoa(min(height, 8000)+100), "--force-device-scale-factor=1"}
	if dark {
		flags = append(flags, "--force-dark-mode", "--blink-settings=preferredColorScheme=0")
	}
	dom, requests := b.run(t, wrapper, flags...)
	m := resultRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the measuring script wrote no result:\n%s", tail(dom, 2000))
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &raw); err != nil || len(raw) != len(frames) {
		t.Fatalf("the measuring script wrote %d result(s) for %d frame(s) (%v)", len(raw), len(frames), err)
	}
	for _, r := range raw {
		results = append(results, string(r))
	}
	return results, requests
}

var resultRE = regexp.MustCompile(`<pre id="kvaudit-result">(.*?)</pre>`)
