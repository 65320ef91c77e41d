package report

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/internal/picture"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
)

// transfersFixture is a violated transfer audit of one consumer log: the
// request hostileID's transfer 7 read another request's producer block
// (confined), and a byte no transfer delivered is not zero (zeroed).
func transfersFixture() *transfer.Result {
	return &transfer.Result{
		Format: transfer.ResultFormat, Verdict: transfer.Violated,
		Logs: []transfer.LogSummary{{File: "nixl/consumer-pp0-tp0.jsonl", Agent: "consumer-0", Side: "consumer", Lists: 2, Xfers: 2, Pairs: 8, Done: 2}},
		Requests: []transfer.RequestSummary{
			{ID: hostileID, ProducerID: "p-0", Transfers: []int{7}, Pairs: 4, Bytes: 65536, Findings: map[string]int{transfer.Confined: 1, transfer.Zeroed: 1}},
			{ID: "req-1", ProducerID: "p-1", Transfers: []int{8}, Pairs: 4, Bytes: 65536, Findings: map[string]int{}},
		},
		Findings: []transfer.Finding{
			{Invariant: transfer.Confined, Request: hostileID, Transfer: 7, Descriptor: 2, Log: "nixl/consumer-pp0-tp0.jsonl", Line: 9,
				Group: 0, Position: 1, Block: 5, Layer: 1, LayerName: "model.layers.1.self_attn.attn", Part: "K", Heads: [2]int{0, 3}, Tokens: [2]int{16, 31},
				Bytes: 16384, Side: "remote", Source: &transfer.Source{Agent: "producer-0", Block: 12, Request: "p-1", Position: 1, Expected: "p-0"},
				Message: "transfer 7 read producer block 12 (rank pp 0 tp 0), which holds request p-1's KV (position 1), not request p-0's"},
			{Invariant: transfer.Zeroed, Request: hostileID, Transfer: transfer.NoTransfer, Descriptor: -1, Rank: layout.Rank{}, Group: 0, Position: 2, Block: 6,
				Layer: 0, LayerName: "model.layers.0.self_attn.attn", Part: "V", Heads: [2]int{0, 3}, Tokens: [2]int{32, 39}, Bytes: 40,
				Message: "request " + hostileID + " V (position 2, block 6, rank 0:0): 40 bytes no transfer delivered are not zero"},
		},
		Unresolved: []string{},
		Notes:      []string{"1 transfer of a request the consumer's dumps do not hold is left out"},
		Pairing:    []string{`log "nixl/other.jsonl" (agent "` + hostileID + `") matches neither dump`},
	}
}

// transfersInfo is a fixed run of kvaudit transfers, for golden files.
var transfersInfo = HTMLInfo{Command: "kvaudit transfers --html t.html --producer p --consumer c nixl", Producer: "p", Consumer: "c", Logs: "nixl", Exit: 1,
	Version: "kvaudit test", Time: time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)}

// TestGoldenTransfers: kvaudit transfers' output in every format and its
// HTML page.
func TestGoldenTransfers(t *testing.T) {
	res := transfersFixture()
	for _, g := range goldenFormats {
		golden(t, "transfers."+g.ext, g.render(t, func(b *bytes.Buffer) error {
			return RenderTransfers(b, res, g.f, g.style, 0)
		}))
	}
	golden(t, "transfers.html", render(t, func(b *bytes.Buffer) error { return RenderTransfersHTML(b, res, transfersInfo) }))
}

// TestTransfersHTML: the page of kvaudit transfers --html says the
// audit's verdict, its exit code and, unless clean, its summary; it
// draws the requests and findings tables with untrusted ids as text and
// lists the logs read; a diff's page carries the transfer audit too.
func TestTransfersHTML(t *testing.T) {
	out := untok(string(render(t, func(b *bytes.Buffer) error { return RenderTransfersHTML(b, transfersFixture(), transfersInfo) })))
	for _, want := range []string{
		`<header class="top t-bad">`,
		`<span id="title">kvaudit transfers: violated</span>`,
		`verdict <b id="verdict">violated</b> · exit code <b id="exit">1</b> · <span id="summary">transfers: 2 finding(s) (confined 1, zeroed 1): `,
		`<h2>kvaudit transfers: violated</h2>`,
		`<h2>transfer findings: 2</h2>`,
		`<code>nixl/consumer-pp0-tp0.jsonl</code>`,
		"&lt;img src=x onerror=alert(1)&gt;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if m := fetching.FindAllString(out, -1); len(m) > 0 {
		t.Errorf("the page could fetch or run: %q", m)
	}

	// A clean audit is good, but where a log matches neither dump (a
	// mistake in the inputs, said beside the verdict).
	for verdict, want := range map[string]string{transfer.Clean: `<header class="top t-good">`, transfer.Unresolved: `<header class="top t-warn">`, "clean, a log of neither dump": `<header class="top t-warn">`} {
		res := transfersFixture()
		res.Verdict, res.Findings, res.Pairing = verdict, nil, nil
		if verdict != transfer.Clean && verdict != transfer.Unresolved {
			res.Verdict, res.Pairing = transfer.Clean, transfersFixture().Pairing
		}
		if verdict == transfer.Unresolved {
			res.Unresolved = []string{`log "x.jsonl": agent "nobody" names no dump`}
		}
		out := string(render(t, func(b *bytes.Buffer) error { return RenderTransfersHTML(b, res, transfersInfo) }))
		if !strings.Contains(out, want) {
			t.Errorf("%s: the page lacks %q", verdict, want)
		}
		if hasSummary := strings.Contains(out, `id="summary"`); hasSummary != (res.Verdict != transfer.Clean) {
			t.Errorf("%s: a summary shown: %v", verdict, hasSummary)
		}
	}

	res := htmlFixture()
	res.Audits.Transfers = transfersFixture()
	diff := renderHTML(t, res)
	if !strings.Contains(diff, `<h2>transfer audit: violated (1 log(s), 2 transfer(s), 2 finding(s))</h2>`) {
		t.Error("a diff's page lacks the transfer audit's table")
	}
	if strings.Contains(diff, `<section id="picture">`) {
		t.Error("a diff's page draws a picture of an audit that drew none")
	}
	// With the audit's picture, the diff's page draws it: a hole at
	// token 1 of layer 1, named by its hover.
	cov := picture.Coverage{Request: hostileID, NumTokens: 2, Pulled: 2, Served: true, Per: 1, Columns: 2}
	for l := range 2 {
		row := picture.CoverageRow{Layer: l, LayerName: "model.layers." + strconv.Itoa(l)}
		for k := range 2 {
			c := picture.Cell{State: picture.CellDelivered, Transfer: 7, Descriptor: 2*l + k, Log: "nixl/consumer-pp0-tp0.jsonl", Bytes: [2]uint64{0x1000, 0x1800}}
			if l == 1 && k == 1 {
				c = picture.Cell{State: picture.CellHole, Transfer: transfer.NoTransfer, Descriptor: -1}
			}
			row.Cells = append(row.Cells, c)
		}
		cov.Rows = append(cov.Rows, row)
	}
	res.Audits.Transfers.Coverage = []picture.Coverage{cov}
	diff = renderHTML(t, res)
	for _, want := range []string{
		`<section id="picture">`,
		`title="layer 0 (model.layers.0), token 1: delivered · transfer 7 descriptor 1 · consumer bytes 0x1000-0x17ff · log nixl/consumer-pp0-tp0.jsonl" data-state="delivered">✓</td>`,
		`title="layer 1 (model.layers.1), token 1: hole · delivered by no transfer that reached DONE" data-state="hole">✗</td>`,
		"request <code>&lt;img src=x onerror=alert(1)&gt;</code>",
	} {
		if !strings.Contains(diff, want) {
			t.Errorf("a diff's page with the audit's picture lacks %q", want)
		}
	}
	if res.Verdict() != verify.Mismatch {
		t.Errorf("verdict %s, want mismatch", res.Verdict())
	}
}

// TestSpan: a range of one value is written as that value, an unknown
// one as "-" (the goldens' findings all span several heads and tokens).
func TestSpan(t *testing.T) {
	for _, c := range []struct {
		r    [2]int
		want string
	}{{[2]int{-1, -1}, "-"}, {[2]int{3, 3}, "3"}, {[2]int{0, 7}, "0-7"}} {
		if got := span(c.r); got != c.want {
			t.Errorf("span(%v) = %q, want %q", c.r, got, c.want)
		}
	}
}

// TestLayerList: rows of layers alike are named as a range when the
// layers are consecutive, else listed (a sliding window group's layers
// interleave with the full attention group's), at most four of them.
func TestLayerList(t *testing.T) {
	rows := func(layers ...int) []picture.CoverageRow {
		var out []picture.CoverageRow
		for _, l := range layers {
			out = append(out, picture.CoverageRow{Layer: l})
		}
		return out
	}
	for _, c := range []struct {
		layers []int
		want   string
	}{{[]int{0, 1, 2, 3}, "0-3"}, {[]int{0, 2}, "0,2"}, {[]int{1, 3, 5, 7, 9}, "1,3,5,7,… (5)"}} {
		if got := layerList(rows(c.layers...)); got != c.want {
			t.Errorf("layerList(%v) = %q, want %q", c.layers, got, c.want)
		}
	}
}
