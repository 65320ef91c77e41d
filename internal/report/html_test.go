package report

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// hostileID is a request id as an untrusted dump may name it: an image
// whose error handler runs a script, were it markup.
const hostileID = `<img src=x onerror=alert(1)>`

// hostileLayer is a layer name that would mark the page, were it markup
// and its script run.
const hostileLayer = `model.layers.2.attn"><script>document.body.setAttribute("data-pwned","1")</script>`

// htmlFixture is a crafted comparison: request hostileID mismatches at
// position 3 of group 0 (4 layers x 8 global heads), where one bit of
// layer 2 head 6 is flipped, with a map of 5 positions (_..X-), beside a
// verified request and an unverified one, and the consumer audits.
func htmlFixture() *verify.Result {
	names := []string{"model.layers.0.attn", "model.layers.1.attn", hostileLayer, "model.layers.3.attn"}
	heat := drill.Heat{Group: 0, Position: 3, Layers: []int{0, 1, 2, 3}, LayerNames: names, Heads: 8, Replicas: 1, Bytes: make([]int, 32)}
	heat.Bytes[2*8+6] = 1
	m := []verify.PositionState{verify.PosNotLoaded, verify.PosVerified, verify.PosVerified, verify.PosMismatch, verify.PosNotCompared}
	res := &verify.DiffResult{Verdict: verify.Mismatch, Requests: []*verify.RequestVerdict{
		{ID: hostileID, ProducerID: hostileID, Verdict: verify.Mismatch, Numbering: "request", NumTokens: 70,
			Groups: []*verify.GroupVerdict{{ID: 0, Kind: "full_attention", Verdict: verify.Mismatch, Positions: []int{3}, Checks: []int{0},
				BlockSize: 16, ProducerBlockSize: 16, Map: m}},
			Details: []drill.Detail{{Group: 0, Position: 3, Layer: 2, LayerName: hostileLayer, LastLayer: 2, Layers: []int{2}, Head: 6, LastHead: 6, Heads: []int{6}, Slices: 1,
				FirstToken: 50, LastToken: 50, Bytes: 1, Bits: 1, Hint: "1 bit flipped", TPRank: 1, File: "c/rank-0-1.safetensors", Block: 5, Offset: 4242}},
			Heat:  []drill.Heat{heat},
			Notes: []string{"a note on " + hostileID}},
		{ID: "req-1", ProducerID: "req-1", Verdict: verify.Verified, Numbering: "request", NumTokens: 32,
			Groups: []*verify.GroupVerdict{{ID: 0, Kind: "full_attention", Verdict: verify.Verified, BlockSize: 16, ProducerBlockSize: 32,
				Map: []verify.PositionState{verify.PosVerified, verify.PosVerified}}}},
		{ID: "req-2", ProducerID: "req-2", Verdict: verify.Unverified, Numbering: "request", Reasons: []string{verify.ReasonNoChecksums},
			Hints: []string{"the producer has no request req-2"}},
	}}
	return &verify.Result{Diff: res, Audits: auditsFixture(),
		Producer: side.SideInfo{Form: "dumps", TPSize: 1, PPSize: 1, Ranks: []string{"pp 0 tp 0"}, Files: []string{"p/rank-0-0.safetensors"}},
		Consumer: side.SideInfo{Form: "dumps", TPSize: 2, PPSize: 1, Ranks: []string{"pp 0 tp 0", "pp 0 tp 1"},
			Files: []string{"c/rank-0-0.safetensors", "c/rank-0-1.safetensors"}}}
}

// htmlInfo is a fixed run, for golden files.
var htmlInfo = HTMLInfo{Command: "kvaudit diff --html r.html p c", Producer: "p", Consumer: "c", Exit: 1,
	Version: "kvaudit test", Time: time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)}

func renderHTML(t *testing.T, res *verify.Result) string {
	t.Helper()
	return string(render(t, func(b *bytes.Buffer) error { return RenderDiffHTML(b, res, htmlInfo) }))
}

// TestGoldenHTML: the HTML pages of a comparison with audits, and of a
// passing and a failing campaign.
func TestGoldenHTML(t *testing.T) {
	golden(t, "diff.html", []byte(renderHTML(t, htmlFixture())))
	info := htmlInfo
	info.Command, info.Producer, info.Consumer = "kvaudit campaign --html c.html", "", ""
	for name, pass := range map[string]bool{"campaign-pass.html": true, "campaign-fail.html": false} {
		info.Exit = map[bool]int{true: 0, false: 1}[pass]
		golden(t, name, render(t, func(b *bytes.Buffer) error { return RenderCampaignHTML(b, campaignResult(pass), info) }))
	}
}

// fetching matches whatever in a page could make a browser fetch or run
// something: a URL, a stylesheet import or url(), an element that loads,
// an event handler attribute (in a tag, its quoted values left out).
var (
	fetching = regexp.MustCompile(`(?i)https?:|//[a-z]|url\(|@import|<(script|img|link|iframe|object|embed|base|form|audio|video|source)\b`)
	tags     = regexp.MustCompile(`<[a-zA-Z][^>]*>`)
	quoted   = regexp.MustCompile(`"[^"]*"`)
	handler  = regexp.MustCompile(`(?i)\son[a-z]+\s*=`)
)

// TestHTMLEscapes: ids and layer names from dumps reach the page as text:
// nothing in it could load or run anything, and the policy forbids it
// anyway.
func TestHTMLEscapes(t *testing.T) {
	out := renderHTML(t, htmlFixture())
	if !strings.Contains(out, `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'">`) {
		t.Error("no Content-Security-Policy forbidding scripts and fetches")
	}
	if m := fetching.FindAllString(out, -1); len(m) > 0 {
		t.Errorf("the page could fetch or run: %q", m)
	}
	for _, tag := range tags.FindAllString(out, -1) {
		if handler.MatchString(quoted.ReplaceAllString(tag, `""`)) {
			t.Errorf("an event handler: %s", tag)
		}
	}
	for _, want := range []string{"&lt;img src=x onerror=alert(1)&gt;", "&lt;script&gt;document.body.setAttribute("} {
		if !strings.Contains(out, want) {
			t.Errorf("the hostile text is not shown as text (%q)", want)
		}
	}
}

// TestHTMLHeatmap: the mismatching position's heatmap has one cell per
// (layer, head), the flipped one alone marked with its hint and tokens;
// the block map has one cell per position, with its tokens on hover.
func TestHTMLHeatmap(t *testing.T) {
	out := renderHTML(t, htmlFixture())
	maps := heatTables.FindAllString(out, -1)
	if len(maps) != 1 {
		t.Fatalf("%d heatmaps, want 1", len(maps))
	}
	cells := heatCells.FindAllStringSubmatch(maps[0], -1)
	if len(cells) != 32 {
		t.Fatalf("%d heatmap cells, want 4 layers x 8 heads", len(cells))
	}
	for i, c := range cells {
		marked := strings.Contains(c[1], "k-flip")
		if want := i == 2*8+6; marked != want {
			t.Errorf("cell %d (layer %d head %d): marked %v, want %v: %s", i, i/8, i%8, marked, want, c[0])
		}
	}
	if c := cells[2*8+6][0]; !strings.Contains(c, `title="layer 2 · head 6 · 1 byte(s) differ · 1 bit flipped · token 50 · 1 bit(s) · rank 0:1 (pp:tp) · block 5 · c/rank-0-1.safetensors at offset 4242"`) {
		t.Errorf("flipped cell %s", c)
	}
	strip := regexp.MustCompile(`<span class="b (s-[a-z]+)" tabindex="0" title="([^"]*)">`).FindAllStringSubmatch(out, -1)
	var got []string
	for _, s := range strip[:7] { // the legend has none; req-0's 5, req-1's 2
		got = append(got, s[1]+": "+s[2])
	}
	want := []string{
		"s-nl: position 0 · tokens 0-15 · not loaded", "s-ok: position 1 · tokens 16-31 · verified", "s-ok: position 2 · tokens 32-47 · verified",
		"s-x: position 3 · tokens 48-63 · mismatch in check(s) 0", "s-nc: position 4 · tokens 64-69 · not compared",
		"s-ok: position 0 · tokens 0-15 · verified", "s-ok: position 1 · tokens 16-31 · verified",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("block map cells:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestHTMLHeatmapFolded: a detail that folds layers 1-2 x heads 5 and 7
// (drill.Detail) shades each of its four slices with its hint, the hover
// saying which fold it is and where; the hint counts the slices.
func TestHTMLHeatmapFolded(t *testing.T) {
	res := htmlFixture()
	rv := res.Diff.Requests[0]
	h := &rv.Heat[0]
	clear(h.Bytes)
	for _, l := range []int{1, 2} {
		for _, head := range []int{5, 7} {
			h.Bytes[l*8+head] = 512
		}
	}
	rv.Details = []drill.Detail{{Group: 0, Position: 3, Layer: 1, LayerName: "model.layers.1.attn", LastLayer: 2, Layers: []int{1, 2},
		Head: 5, LastHead: 7, Heads: []int{5, 7}, Slices: 4, FirstToken: 48, LastToken: 63, Bytes: 2048, Bits: 8000,
		Hint: "holds the block of position 0", PPRank: 0, TPRank: 1, File: "c/rank-0-1.safetensors", Block: 5, Offset: 8192}}
	out := renderHTML(t, res)
	cells := heatCells.FindAllStringSubmatch(heatTables.FindString(out), -1)
	if len(cells) != 32 {
		t.Fatalf("%d heatmap cells, want 4 layers x 8 heads", len(cells))
	}
	for i, c := range cells {
		l, head := i/8, i%8
		want := (l == 1 || l == 2) && (head == 5 || head == 7)
		if marked := strings.Contains(c[1], "k-held"); marked != want {
			t.Errorf("cell layer %d head %d: marked %v, want %v: %s", l, head, marked, want, c[0])
		}
		if want && !strings.Contains(c[0], "holds the block of position 0 · tokens 48-63 · 8000 bit(s) · one of 4 slices (layers 1-2, heads 5,7) · rank 0:1 (pp:tp) · block 5 · c/rank-0-1.safetensors at offset 8192") {
			t.Errorf("cell layer %d head %d: %s", l, head, c[0])
		}
	}
	if !strings.Contains(out, "holds the block of position 0 in 4 slices") {
		t.Error("the hint does not count the detail's 4 slices")
	}
}

var (
	heatTables = regexp.MustCompile(`(?s)<table class="hm">.*?</table>`)
	heatCells  = regexp.MustCompile(`<td([^>]*)>[^<]*</td>`)
)

// TestHTMLNotDrilled: slices the drill-down did not compare are drawn as
// not drilled, never equal; a mismatching position without a heat is
// named as not drilled.
func TestHTMLNotDrilled(t *testing.T) {
	res := htmlFixture()
	rv := res.Diff.Requests[0]
	rv.Heat[0].Bytes[0] = drill.HeatNotDrilled
	rv.Groups[0].Positions = []int{3, 4}
	out := renderHTML(t, res)
	cells := heatCells.FindAllStringSubmatch(heatTables.FindString(out), -1)
	if !strings.Contains(cells[0][0], `class="nd"`) || !strings.Contains(cells[0][0], "not drilled") {
		t.Errorf("cell 0 %s, want not drilled", cells[0][0])
	}
	if !strings.Contains(out, "not drilled (the drill-down needs dumps on both sides, and --no-drill skips it): request &lt;img src=x onerror=alert(1)&gt; group 0 position(s) 4") {
		t.Error("position 4 is not said to be not drilled")
	}
}

// everywhere is a comparison of a pair mismatching everywhere: requests
// of positions positions each, every slice of every position differing
// (a 2 GB pair of Llama-3-8B-shaped KV is 1000 positions of 32 layers x 8
// heads), with vary making each request's map and each position's
// pattern distinct (the worst case for folding), and the drill-down's
// details at their default cap.
func everywhere(requests, positions int, vary bool) *verify.Result {
	const layers, heads = 32, 8
	names := make([]string, layers)
	nums := make([]int, layers)
	for l := range layers {
		names[l], nums[l] = fmt.Sprintf("model.layers.%d.self_attn.attn", l), l
	}
	res := &verify.DiffResult{Verdict: verify.Mismatch}
	for r := range requests {
		rv := &verify.RequestVerdict{ID: fmt.Sprintf("req-%d", r), Verdict: verify.Mismatch, Numbering: "request", NumTokens: positions * 16}
		rv.ProducerID = rv.ID
		g := &verify.GroupVerdict{ID: 0, Kind: "full_attention", Verdict: verify.Mismatch, Checks: []int{0}, BlockSize: 16, ProducerBlockSize: 16}
		for p := range positions {
			g.Positions = append(g.Positions, p)
			s := verify.PosMismatch
			if vary && (r>>p)&1 == 1 {
				s = verify.PosVerified
			}
			g.Map = append(g.Map, s)
			h := drill.Heat{Group: 0, Position: p, Layers: nums, LayerNames: names, Heads: heads, Replicas: 1, Bytes: make([]int, layers*heads)}
			for i := range h.Bytes {
				h.Bytes[i] = 16 * 512
			}
			if k := r*positions + p; vary {
				h.Bytes[k%len(h.Bytes)], h.Bytes[(k/len(h.Bytes)+7)%len(h.Bytes)] = 1, 0
			}
			rv.Heat = append(rv.Heat, h)
			for i := 0; i < layers*heads && len(rv.Details) < drill.DefaultMaxDetails; i++ {
				rv.Details = append(rv.Details, drill.Detail{Group: 0, Position: p, Layer: i / heads, LayerName: names[i/heads], Head: i % heads,
					LastHead: i % heads, FirstToken: p * 16, LastToken: p*16 + 15, Bytes: 16 * 512, Bits: 30000, Hint: "random bytes"})
			}
		}
		rv.Groups = []*verify.GroupVerdict{g}
		rv.Notes = []string{fmt.Sprintf("group 0: %d (layer, head, replica) slices differ", positions*layers*heads)}
		res.Requests = append(res.Requests, rv)
	}
	var findings []verify.TailFinding
	for i := range 5000 {
		findings = append(findings, verify.TailFinding{Request: "req-0", Group: 0, Position: i, Layer: names[0], Bytes: 9, File: "x.safetensors", Offset: int64(i)})
	}
	return &verify.Result{Diff: res, Audits: &verify.Audits{Tail: &verify.TailAudit{Checked: 5000, Findings: findings}}}
}

// htmlBound is the most bytes a report may take, whatever the result: the
// caps of html.go hold it.
const htmlBound = 4 << 20

// TestHTMLBounded: a pair mismatching everywhere gives a bounded page:
// alike rows fold into one and one heatmap; with every request and
// pattern distinct, the caps hold and the page says what it left out.
func TestHTMLBounded(t *testing.T) {
	alike := renderHTML(t, everywhere(4, 250, false))
	if n := len(heatTables.FindAllString(alike, -1)); n != 1 {
		t.Errorf("%d heatmaps of one pattern, want 1", n)
	}
	if n := strings.Count(alike, `<td class="ids">`); n != 1 {
		t.Errorf("%d block-map rows of alike requests, want 1", n)
	}
	if !strings.Contains(alike, "and 988 more places with the same pattern") || !strings.Contains(alike, "each cell: 2 positions") {
		t.Error("the folded heatmap does not count its places, or the long map is not scaled")
	}
	hostile := everywhere(150, 8, true)
	// Ids and names of 200 kB, and a group too big to draw (300
	// layers x 128 heads).
	long := strings.Repeat("<x>", 1<<16)
	for _, rv := range hostile.Diff.Requests[:20] {
		rv.ID += long
		rv.Details[0].LayerName = long
		rv.Notes = append(rv.Notes, long)
	}
	big := drill.Heat{Group: 1, Layers: make([]int, 300), LayerNames: make([]string, 300), Heads: 128, Replicas: 1, Bytes: make([]int, 300*128)}
	big.Bytes[7] = 1
	hostile.Diff.Requests[0].Heat = append([]drill.Heat{big}, hostile.Diff.Requests[0].Heat...)
	worst := renderHTML(t, hostile)
	t.Logf("alike: %d bytes; distinct: %d bytes", len(alike), len(worst))
	if len(worst) > htmlBound {
		t.Errorf("the page is %d bytes, more than %d", len(worst), htmlBound)
	}
	heatmaps := heatTables.FindAllString(worst, -1)
	if n := len(heatmaps); n > htmlMaxHeatmaps {
		t.Errorf("%d heatmaps, more than the cap %d", n, htmlMaxHeatmaps)
	}
	// The big group's heat alone is more cells than the cap: it is not
	// drawn.
	if n := len(heatCells.FindAllString(strings.Join(heatmaps, ""), -1)); n > htmlHeatCells {
		t.Errorf("%d heatmap cells, more than the cap %d", n, htmlHeatCells)
	}
	for _, want := range []string{"more distinct row(s) not shown", "more pattern(s) not drawn", "more row(s) not shown"} {
		if !strings.Contains(worst, want) {
			t.Errorf("the page does not say %q", want)
		}
	}
}

// TestHTMLStrength: the diff page says what the table says of the
// comparison's strength: which requests vLLM's checksum alone judged and
// what that misses, and the positions only kvaudit's mix check caught; a
// load whose one mismatch is the mix check's is a mismatch in the title
// and verdict, as everywhere (docs/spec.md §9).
func TestHTMLStrength(t *testing.T) {
	g := func(mix ...uint64) *side.GroupChecks {
		gc := &side.GroupChecks{ID: 0, Kind: "full_attention", BlockSize: 16, Start: 0, Fingerprint: 1, FingerprintFlat: 2, HasFlat: true,
			Checks: [][]uint64{{1, 2, 3}}}
		if mix != nil {
			gc.ChecksMix = [][]uint64{mix}
		}
		return gc
	}
	req := func(id string, gc *side.GroupChecks) *side.RequestChecks {
		return &side.RequestChecks{ID: id, NumTokens: 40, TPSize: 1, Groups: []*side.GroupChecks{gc}}
	}
	prod := &side.Checks{TPSize: 1, Complete: true, Requests: []*side.RequestChecks{req("mixed", g(7, 8, 9)), req("plain", g())}}
	cons := &side.Checks{TPSize: 1, Complete: true, Requests: []*side.RequestChecks{req("mixed", g(7, 0, 9)), req("plain", g(7, 8, 9))}}
	res := verify.Diff(prod, cons)
	out := untok(renderHTML(t, &verify.Result{Diff: res}))
	for _, want := range []string{
		"<title>kvaudit diff: mismatch</title>",
		`<b id="verdict">mismatch</b>`,
		"position(s) 1 differ in kvaudit&#39;s mix check only: vLLM&#39;s checksum alone would have verified them",
		"<li>compared by vLLM&#39;s checksum only (the producer&#39;s checks have no mix check: the cuda engine&#39;s, or records from before it) for plain: " +
			strings.ReplaceAll(verify.MissedByVLLM, "'", "&#39;"),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(out, "differ in kvaudit&#39;s mix check only"); n != 1 {
		t.Errorf("%d mix-only lines, want 1 (request mixed alone)", n)
	}
}

// TestHTMLMapRowIDs: a folded block-map row names at most htmlMaxIDs
// requests and counts the others, and a request compared with a producer
// request of another id names both.
func TestHTMLMapRowIDs(t *testing.T) {
	res := everywhere(htmlMaxIDs+4, 2, false)
	res.Diff.Requests[0].ProducerID = "prod-0"
	out := untok(renderHTML(t, res))
	rows := regexp.MustCompile(`<td class="ids">.*?</td>`).FindAllString(out, -1)
	if len(rows) != 1 {
		t.Fatalf("%d block-map rows of alike requests, want 1", len(rows))
	}
	if !strings.Contains(rows[0], "<code>req-0 ← prod-0</code>") {
		t.Errorf("row %s does not name req-0's producer request", rows[0])
	}
	if n := strings.Count(rows[0], "<code>"); n != htmlMaxIDs || !strings.Contains(rows[0], "and 4 more alike") {
		t.Errorf("row %s: %d ids, want %d and 4 more alike", rows[0], n, htmlMaxIDs)
	}
}

// tokSpan is a token the page keeps on one line (splitWords).
var tokSpan = regexp.MustCompile(`<span class="tok">([^<]*)</span>`)

// untok is a page without its token spans: the text as a person reads
// it, in the page's markup.
func untok(page string) string { return tokSpan.ReplaceAllString(page, "$1") }

// TestSplitWords: the tokens that hold a hyphen are cut out of the
// text, every other character kept where it was.
func TestSplitWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []word
	}{
		{"", nil},
		{"plain text", []word{{S: "plain text"}}},
		{"req-1", []word{{S: "req-1", Tok: true}}},
		{"- --flag x", []word{{S: "- "}, {S: "--flag", Tok: true}, {S: " x"}}},
		{"request chatcmpl-a-b: tokens 0-15 of  x", []word{{S: "request "}, {S: "chatcmpl-a-b:", Tok: true}, {S: " tokens "}, {S: "0-15", Tok: true}, {S: " of  x"}}},
		{" a-b\tc\n", []word{{S: " "}, {S: "a-b", Tok: true}, {S: "\tc\n"}}},
	} {
		if got := splitWords(c.in); !slices.Equal(got, c.want) {
			t.Errorf("splitWords(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// TestTokensOf: the tokens a block position holds, cut at num_tokens.
func TestTokensOf(t *testing.T) {
	for _, c := range []struct {
		p, bs, n int
		want     string
	}{
		{0, 16, 40, "tokens 0-15"}, {2, 16, 40, "tokens 32-39"}, {2, 16, 33, "token 32"}, {3, 16, 40, "tokens past num_tokens"},
		{1, 16, 0, "tokens 16-31"}, {1, 0, 40, ""},
	} {
		if got := tokensOf(c.p, c.bs, c.n); got != c.want {
			t.Errorf("tokensOf(%d, %d, %d) = %q, want %q", c.p, c.bs, c.n, got, c.want)
		}
	}
}
