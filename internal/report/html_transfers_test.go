package report_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/picture"
	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
)

// pull is a producer, a consumer (as a campaign prepares it) and the logs
// of a correct pull between them, synthesized.
type pull struct {
	logs       string
	prod, cons []*layout.Dump
}

func openSide(t *testing.T, paths []string) []*layout.Dump {
	t.Helper()
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { layout.CloseAll(dumps) })
	return dumps
}

func synthPull(t *testing.T, p, c synth.Config, lookahead int) pull {
	t.Helper()
	dir := t.TempDir()
	p.Seed, c.Seed = 4, 4
	prodPaths, err := synth.Write(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	c.Role = "consumer"
	raw, err := synth.Write(filepath.Join(dir, "raw"), c)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := inject.Prepare(context.Background(), openSide(t, raw), filepath.Join(dir, "consumer"), inject.PrepareOptions{ZeroTails: true, ExtraBlocks: 1, Stored: true})
	if err != nil {
		t.Fatal(err)
	}
	pl := pull{logs: filepath.Join(dir, "nixl"), prod: openSide(t, prodPaths), cons: openSide(t, paths)}
	if _, err := nixl.WritePlan(pl.logs, pl.prod, pl.cons, false, nixl.PlanOptions{Planner: nixl.PlannerExact, Lookahead: lookahead}); err != nil {
		t.Fatal(err)
	}
	return pl
}

// pictureCell is a cell of a rendered picture: its request, rank,
// layer, first token, state and hover.
type pictureCell struct {
	request, rank string
	layer, token  int
	state, tip    string
}

var (
	picFigure = regexp.MustCompile(`(?s)<figure class="xpic">\s*<figcaption>request <code>([^<]*)</code> · consumer rank ([^·]*) ·.*?</figure>`)
	picRow    = regexp.MustCompile(`<tr><th scope="row" title="[^"]*">L(\d+)(?:-(\d+))?( state)?</th>(.*?)</tr>`)
	picCell   = regexp.MustCompile(`<td class="xc x-[a-z]" tabindex="0" title="([^"]*)" data-state="([^"]*)">[^<]*</td>`)
	picPer    = regexp.MustCompile(`each cell (\d+) tokens`)
	// picCellTag counts a page's cells.
	picCellTag = regexp.MustCompile(`<td class="xc `)
)

// pictureCells reads the cells of every picture of a page, a cell per
// layer of rows drawn as one.
func pictureCells(t *testing.T, page string) []pictureCell {
	t.Helper()
	var out []pictureCell
	for _, f := range picFigure.FindAllStringSubmatch(page, -1) {
		per := 1
		if m := picPer.FindStringSubmatch(f[0]); m != nil {
			per, _ = strconv.Atoi(m[1])
		}
		rows := picRow.FindAllStringSubmatch(f[0], -1)
		if n := strings.Count(f[0], `<tr><th scope="row"`); n != len(rows) {
			t.Fatalf("request %s: %d rows, %d of them read (a label of layers not a range?)", f[1], n, len(rows))
		}
		for _, r := range rows {
			lo, _ := strconv.Atoi(r[1])
			hi := lo
			if r[2] != "" {
				hi, _ = strconv.Atoi(r[2])
			}
			cells := picCell.FindAllStringSubmatch(r[4], -1)
			if len(cells) == 0 {
				t.Fatalf("a row of no cells: %s", r[0])
			}
			for l := lo; l <= hi; l++ {
				for k, c := range cells {
					tok := k * per
					if r[3] != "" {
						tok = -1
					}
					out = append(out, pictureCell{request: html.UnescapeString(f[1]), rank: strings.TrimSpace(f[2]), layer: l, token: tok, state: html.UnescapeString(c[2]), tip: html.UnescapeString(c[1])})
				}
			}
		}
	}
	return out
}

// Cell states as the page names them.
const (
	stDelivered  = "delivered"
	stPrefix     = "not required: prefix hit"
	stRecomputed = "not required: recomputed"
	stZeroed     = "zeroed"
	stHole       = "hole"
	stTwice      = "written twice"
	stForeign    = "another request's block"
	stOtherKV    = "other KV"
	stIntruded   = "written by another"
	stLate       = "read after the lease"
)

// The pull the tests draw: 2 requests of 49 tokens, blocks of 16, a
// prefix hit of 16 tokens on the consumer, and a lookahead of 3 (tokens
// 47 and 48 recomputed: not required, though the pull of whole blocks
// delivers token 47), and the slots 49-63 zeroed.
const (
	picTokens, picPrefix, picLookahead, picBlocks = 49, 16, 3, 64
	picPulled                                     = 47
)

func picturePull(t *testing.T) pull {
	return synthPull(t, synth.Config{Preset: "llama", Layers: 2, Layout: "nhd", Requests: 2, Tokens: picTokens},
		synth.Config{Preset: "llama", Layers: 2, Layout: "nhd", Requests: 2, Tokens: picTokens, PrefixTokens: picPrefix}, picLookahead)
}

// healthy is the state a correct pull leaves at a token.
func healthy(token int) string {
	switch {
	case token < picPrefix:
		return stPrefix
	case token < picPulled:
		return stDelivered
	case token < picTokens:
		return stRecomputed
	}
	return stZeroed
}

func renderPicture(t *testing.T, res *transfer.Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := report.RenderTransfersHTML(&b, res, report.HTMLInfo{Command: "kvaudit transfers", Exit: 1}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestTransfersPictureClean: a correct pull's picture is, for both
// requests and both layers, the prefix hit, then delivered tokens, the
// recomputed ones and the zeroed slots, each where the pull put them;
// a delivered cell's hover names its transfer, descriptor and bytes.
func TestTransfersPictureClean(t *testing.T) {
	pl := picturePull(t)
	logs, err := transfer.FindLogs([]string{pl.logs})
	if err != nil {
		t.Fatal(err)
	}
	res, err := transfer.Audit(context.Background(), logs, pl.prod, pl.cons, transfer.Options{Lookahead: picLookahead})
	if err != nil || res.Verdict != transfer.Clean {
		t.Fatalf("%v %v", res.Summary(), err)
	}
	cells := pictureCells(t, renderPicture(t, res))
	if want := 2 * 2 * picBlocks; len(cells) != want {
		t.Fatalf("%d cells, want %d (2 requests x 2 layers x %d tokens)", len(cells), want, picBlocks)
	}
	tip := regexp.MustCompile(`^(layers \d+-\d+ alike; )?layer \d \(.*\), token \d+: delivered · transfer \d+ descriptor \d+ · consumer bytes 0x[0-9a-f]+-0x[0-9a-f]+( · and \d+ more descriptor\(s\))? · log .*consumer-pp0-tp0\.jsonl$`)
	for _, c := range cells {
		if want := healthy(c.token); c.state != want {
			t.Errorf("%s layer %d token %d: %s, want %s", c.request, c.layer, c.token, c.state, want)
		}
		if c.state == stDelivered && !tip.MatchString(c.tip) {
			t.Errorf("hover %q names no transfer, descriptor and bytes", c.tip)
		}
	}
}

// TestTransfersPictureFaults: for each transfer fault kvaudit inject
// makes, the cells of the tokens and layer each expected finding names
// show the fault's state, and every other cell what a correct pull
// leaves (but the victim of a write into another request's block).
func TestTransfersPictureFaults(t *testing.T) {
	pl := picturePull(t)
	ctx := context.Background()
	want := map[inject.Kind]map[string][]string{
		inject.XferLocalOther:  {transfer.Confined: {stHole}, transfer.Covered: {stHole}, transfer.Zeroed: {stHole}},
		inject.XferRemoteShift: {transfer.Confined: {stForeign}, transfer.Aligned: {stOtherKV, stForeign}},
		inject.XferDrop:        {transfer.Covered: {stHole}, transfer.Zeroed: {stHole}},
		inject.XferLapsedLease: {transfer.Confined: {stForeign}},
		inject.XferDuplicate:   {transfer.Aligned: {stTwice, stOtherKV}, transfer.Twice: {stTwice, stOtherKV}},
		inject.XferLateRead:    {transfer.Lease: {stLate}},
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		drawn := 0
		for seed := range uint64(3) {
			out := filepath.Join(t.TempDir(), "out")
			f, err := inject.Inject(ctx, pl.cons, out, inject.Options{Kind: k, Seed: seed, Transfers: []string{pl.logs}, Producer: pl.prod})
			if errors.As(err, new(*inject.NotApplicableError)) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			res, err := transfer.AuditPaths(ctx, []string{filepath.Join(out, "nixl")}, []string{filepath.Dir(pl.prod[0].Path)}, []string{out}, transfer.Options{Lookahead: picLookahead})
			if err != nil {
				t.Fatal(err)
			}
			cells := pictureCells(t, renderPicture(t, res))
			if len(cells) != 2*2*picBlocks {
				t.Fatalf("%s: %d cells", k, len(cells))
			}
			// The cells each expected finding names.
			faulted := map[pictureCell]bool{}
			for _, e := range f.Expect.Transfers {
				states := want[k][e.Invariant]
				if states == nil {
					t.Fatalf("%s: no state expected of a %s finding", k, e.Invariant)
				}
				lo, hi := e.Tokens[0], e.Tokens[1]
				switch e.Invariant {
				case transfer.Lease: // the request as a whole: what it pulled
					lo, hi = picPrefix, picPulled-1
				}
				if slices.Equal(states, []string{stHole}) {
					// The fault leaves whole blocks stale; the tokens
					// the consumer recomputes are not required.
					hi = min(hi, picPulled-1)
				}
				n := 0
				for _, c := range cells {
					if c.request != e.Request || (c.layer != e.Layer && e.Invariant != transfer.Lease) || c.token < lo || c.token > hi {
						continue
					}
					n++
					faulted[c] = true
					if !slices.Contains(states, c.state) {
						t.Errorf("%s seed %d: %s layer %d token %d: %s, want one of %q (finding %s)", k, seed, c.request, c.layer, c.token, c.state, states, e.Invariant)
					}
				}
				if n == 0 {
					t.Errorf("%s seed %d: no cell at %s layer %d tokens %d-%d", k, seed, e.Request, e.Layer, lo, hi)
				}
			}
			victims := 0
			for _, c := range cells {
				switch {
				case faulted[c]:
				case c.state == healthy(c.token):
				case c.token >= picPulled && faultedAt(faulted, c):
					// A faulty descriptor's bytes of tokens not
					// required (it reads whole blocks).
				case k == inject.XferLocalOther && (c.state == stTwice || c.state == stIntruded):
					victims++
				default:
					t.Errorf("%s seed %d: %s layer %d token %d: %s, want %s (no finding there)", k, seed, c.request, c.layer, c.token, c.state, healthy(c.token))
				}
			}
			if k == inject.XferLocalOther && victims == 0 {
				t.Errorf("%s seed %d: no cell of another request shows the write into its block", k, seed)
			}
			drawn++
		}
		if drawn == 0 {
			t.Errorf("%s: no seed applies", k)
		}
	}
}

// faultedAt says whether a faulted cell lies in c's request, layer and
// block (a descriptor writes whole blocks).
func faultedAt(faulted map[pictureCell]bool, c pictureCell) bool {
	for f := range faulted {
		if f.request == c.request && f.layer == c.layer && f.token/16 == c.token/16 {
			return true
		}
	}
	return false
}

// TestTransfersPictureLong: a request longer than transfer.MaxColumns
// tokens is drawn in columns of a power of two of tokens, the caption
// says how many, and each column shows its tokens' gravest state: 193
// tokens (blocks of 16, 208 slots) in 52 columns of 4, the 16-token
// prefix hit in the first 4, tokens 16-190 delivered (and 191, which the
// lookahead recomputes, delivered with its block: column 47 is
// delivered), token 192 recomputed alone in the last block, which the
// pull leaves (column 48, with zeroed slots 193-195), the zeroed slots
// in the last three.
func TestTransfersPictureLong(t *testing.T) {
	const tokens = 193
	pl := synthPull(t, synth.Config{Preset: "llama", Layers: 2, Layout: "nhd", Requests: 1, Tokens: tokens},
		synth.Config{Preset: "llama", Layers: 2, Layout: "nhd", Requests: 1, Tokens: tokens, PrefixTokens: 16}, picLookahead)
	logs, err := transfer.FindLogs([]string{pl.logs})
	if err != nil {
		t.Fatal(err)
	}
	res, err := transfer.Audit(context.Background(), logs, pl.prod, pl.cons, transfer.Options{Lookahead: picLookahead})
	if err != nil || res.Verdict != transfer.Clean {
		t.Fatalf("%v %v", res.Summary(), err)
	}
	page := renderPicture(t, res)
	if !strings.Contains(page, "each cell 4 tokens") {
		t.Error("the caption does not say a cell holds 4 tokens")
	}
	cells := pictureCells(t, page)
	if len(cells) != 2*52 {
		t.Fatalf("%d cells, want 2 layers x 52 columns", len(cells))
	}
	for _, c := range cells {
		want := stDelivered
		switch {
		case c.token < 16:
			want = stPrefix
		case c.token == 192:
			want = stRecomputed
		case c.token > 192:
			want = stZeroed
		}
		if c.state != want {
			t.Errorf("layer %d tokens %d-%d: %s, want %s", c.layer, c.token, c.token+3, c.state, want)
		}
	}
}

// TestTransfersPictureCaps: a page draws at most its cells' worth of
// requests, those with findings first, and names the rest; the audit's
// own cap is said.
func TestTransfersPictureCaps(t *testing.T) {
	res := &transfer.Result{Format: transfer.ResultFormat, Verdict: transfer.Clean, CoverageLeft: 7}
	const rows, cols, n = 10, transfer.MaxColumns, 40
	for i := range n {
		c := picture.Coverage{Request: fmt.Sprintf("req-%d", i), NumTokens: cols, Pulled: cols, Served: true, Per: 1, Columns: cols}
		if i == n-1 {
			c.Findings = 1 // the last, drawn first
		}
		for l := range rows {
			row := picture.CoverageRow{Layer: l, LayerName: fmt.Sprintf("layer.%d", l)}
			for k := range cols {
				st := picture.CellDelivered
				if k == l { // rows differ: none folds
					st = picture.CellHole
				}
				row.Cells = append(row.Cells, picture.Cell{State: st, Transfer: transfer.NoTransfer, Descriptor: -1})
			}
			c.Rows = append(c.Rows, row)
		}
		res.Coverage = append(res.Coverage, c)
	}
	page := renderPicture(t, res)
	const maxCells = 12288
	drawn := maxCells / (rows * cols)
	figs := picFigure.FindAllStringSubmatch(page, -1)
	if len(figs) != drawn {
		t.Fatalf("%d requests drawn, want %d (%d cells a page)", len(figs), drawn, maxCells)
	}
	if figs[0][1] != fmt.Sprintf("req-%d", n-1) {
		t.Errorf("the first drawn is %s, want the one with findings", figs[0][1])
	}
	for _, want := range []string{
		fmt.Sprintf("The page draws at most %d cells: %d more request(s) not drawn.", maxCells, n-drawn),
		fmt.Sprintf("The audit draws at most %d request(s), those with findings first: 7 more not drawn.", transfer.MaxCoverage),
		"not drawn: <code>req-" + strconv.Itoa(drawn-1) + " (pp 0 tp 0)</code>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not say %q", want)
		}
	}
	if len(page) > 4<<20 {
		t.Errorf("the page is %d bytes", len(page))
	}
}

// TestTransfersPictureFoldsRows: consecutive rows of a group whose cells
// are all alike are drawn as one, labelled with their layers (a range
// when they are consecutive, else a list cut after four), and a row
// unlike its neighbours, or of another group, stays a row of its own.
func TestTransfersPictureFoldsRows(t *testing.T) {
	const cols = 4
	row := func(group, layer int, hole bool) picture.CoverageRow {
		r := picture.CoverageRow{Group: group, Layer: layer, LayerName: fmt.Sprintf("layer.%d", layer)}
		for k := range cols {
			st := picture.CellDelivered
			if hole && k == 0 {
				st = picture.CellHole
			}
			r.Cells = append(r.Cells, picture.Cell{State: st, Transfer: transfer.NoTransfer, Descriptor: -1})
		}
		return r
	}
	c := picture.Coverage{Request: "req-0", NumTokens: cols, Pulled: cols, Served: true, Per: 1, Columns: cols, Rows: []picture.CoverageRow{
		row(0, 0, false), row(0, 1, false), row(0, 2, false), row(0, 3, true), row(0, 4, false),
		row(1, 5, false), row(1, 7, false), row(1, 9, false), row(1, 11, false), row(1, 13, false),
	}}
	res := &transfer.Result{Format: transfer.ResultFormat, Verdict: transfer.Clean, Coverage: []picture.Coverage{c}}
	page := renderPicture(t, res)
	rows := regexp.MustCompile(`<tr><th scope="row" title="([^"]*)">([^<]*)</th>(.*?)</tr>`).FindAllStringSubmatch(page, -1)
	want := []struct{ label, title string }{
		{"L0-2", "layers 0-2, 3 layers alike; hover names layer 0 (layer.0)"},
		{"L3", "layer 3 (layer.3)"},
		{"L4", "layer 4 (layer.4)"},
		{"L5,7,9,11,… (5)", "layers 5,7,9,11,… (5), 5 layers alike; hover names layer 5 (layer.5)"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %q", len(rows), len(want), rows)
	}
	for i, w := range want {
		if got, title := html.UnescapeString(rows[i][2]), html.UnescapeString(rows[i][1]); got != w.label || title != w.title {
			t.Errorf("row %d: %q (%q), want %q (%q)", i, got, title, w.label, w.title)
		}
		if n := len(picCellTag.FindAllString(rows[i][3], -1)); n != cols {
			t.Errorf("row %d: %d cells, want %d", i, n, cols)
		}
	}
	if tip := "layers 0-2 alike; layer 0 (layer.0), token 0: delivered"; !strings.Contains(html.UnescapeString(rows[0][3]), `title="`+tip+`"`) {
		t.Errorf("the folded row's first cell does not say %q: %s", tip, rows[0][3])
	}
}
