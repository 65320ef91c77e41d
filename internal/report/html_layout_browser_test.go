package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/browsertest"
	"github.com/kvaudit/kvaudit/scrub"
	"github.com/kvaudit/kvaudit/verify"
)

// chatID is a request id as vLLM's OpenAI server names one, and
// longLayer a layer name as long as real models' are.
const (
	chatID    = "chatcmpl-0a1b2c3d-4e5f-4789-abcd-ef0123456789"
	longLayer = "model.language_model.layers.31.self_attn.attn"
)

// swappedNote is verify's note on sides given the wrong way round.
const swappedNote = "are the sides swapped? the consumer's checksums cover more tokens than the producer's: give the producer first, then the consumer"

// measureScript reports what a person sees of a report page: the
// window's width and the page's (a page wider than the window scrolls
// sideways), the color scheme and background, the verdict's box and
// tone, the notes beside it (their text, whether they are in the
// verdict's box, where the first one is), and for the id, each place it
// is shown: on how many lines.
const measureScript = `
var out = {width: win.innerWidth, height: win.innerHeight, scroll: doc.scrollingElement.scrollWidth,
  dark: win.matchMedia("(prefers-color-scheme: dark)").matches, background: win.getComputedStyle(doc.body).backgroundColor};
var v = doc.getElementById("verdict"), r = v.getBoundingClientRect();
out.verdict = {text: v.textContent, top: r.top, bottom: r.bottom, left: r.left, right: r.right, tone: doc.querySelector("header.top").className};
var notes = doc.getElementById("notes");
out.notes = [];
if (notes) {
  out.notes_in_header = !!notes.closest("header");
  out.first_note_top = notes.firstElementChild.getBoundingClientRect().top;
  for (var li of notes.children) out.notes.push(li.textContent);
}
out.empty_notes = doc.querySelectorAll("ul.notes li:empty, ul.lead li:empty").length;
out.id_lines = [];
var walk = doc.createTreeWalker(doc.body, NodeFilter.SHOW_TEXT);
for (var n = walk.nextNode(); n; n = walk.nextNode()) {
  for (var i = n.data.indexOf(ID); i >= 0; i = n.data.indexOf(ID, i + 1)) {
    var range = doc.createRange();
    range.setStart(n, i); range.setEnd(n, i + ID.length);
    var tops = new Set();
    for (var rect of range.getClientRects()) if (rect.width > 0) tops.add(Math.round(rect.top));
    // An id wider than its block may break; one that fits never does.
    var box = n.parentNode;
    while (win.getComputedStyle(box).display.startsWith("inline")) box = box.parentNode;
    var cs = win.getComputedStyle(box), room = box.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    var probe = doc.createElement("span");
    probe.style.whiteSpace = "nowrap"; probe.textContent = ID;
    n.parentNode.insertBefore(probe, n);
    var wide = probe.getBoundingClientRect().width;
    probe.remove();
    out.id_lines.push({lines: tops.size, width: Math.round(wide), room: Math.round(room), where: box.tagName + "." + box.className});
  }
}
return out;`

// seen is what measureScript reports.
type seen struct {
	Width, Height, Scroll int
	Dark                  bool
	Background            string
	Verdict               struct {
		Text                     string
		Top, Bottom, Left, Right float64
		Tone                     string
	}
	Notes         []string
	NotesInHeader bool    `json:"notes_in_header"`
	EmptyNotes    int     `json:"empty_notes"`
	FirstNoteTop  float64 `json:"first_note_top"`
	IDLines       []struct {
		Lines, Width, Room int
		Where              string
	} `json:"id_lines"`
	Error string
}

// pageCase is a report page and what a person must see of it.
type pageCase struct {
	name, html string
	// verdict is the verdict shown, tone the verdict box's tone.
	verdict, tone string
	// notes are (parts of) the notes beside the verdict, in order.
	notes []string
	// ids counts the places the page shows chatID (0: it shows none).
	ids int
}

// layoutPages are the HTML pages kvaudit writes (diff, and demo's,
// transfers, campaign, scrub), with real names: chatcmpl ids and long
// layer names.
func layoutPages(t *testing.T) []pageCase {
	t.Helper()
	diff := htmlFixture()
	rv := diff.Diff.Requests[0]
	rv.ID, rv.ProducerID = chatID, chatID
	rv.Details[0].LayerName = longLayer
	rv.Heat[0].LayerNames[2] = longLayer
	rv.Notes = []string{"group 0: 1 (layer, head, replica) slice differs"}
	diff.Audits.Tail.Notes = []string{"rank 0:1 layer \"" + longLayer + "\": not audited: in device memory"}

	swapped := &verify.Result{Diff: &verify.DiffResult{Verdict: verify.Verified, Notes: []string{swappedNote},
		Requests: []*verify.RequestVerdict{{ID: chatID, ProducerID: chatID, Verdict: verify.Verified, Numbering: "request", NumTokens: 32,
			Groups: []*verify.GroupVerdict{{ID: 0, Kind: "full_attention", Verdict: verify.Verified, BlockSize: 16, ProducerBlockSize: 16,
				Strength: verify.StrengthMix, Map: []verify.PositionState{verify.PosVerified, verify.PosVerified}}}}}}}
	swappedInfo := htmlInfo
	swappedInfo.Exit = 0

	tr := transfersFixture()
	tr.Requests[0].ID, tr.Findings[0].Request, tr.Findings[1].Request = chatID, chatID, chatID
	tr.Findings[0].LayerName = longLayer

	camp := campaignResult(false)
	camp.Pairs[0].Notes = []string{swappedNote}
	campInfo := htmlInfo
	campInfo.Command = "kvaudit campaign --html c.html"

	sc := scrubResult(t)
	sc.Skipped = append(sc.Skipped, scrub.Skip{Path: "store/" + chatID + ".tmp", Reason: "a temporary file"})

	page := func(f func(b *bytes.Buffer) error) string { return string(render(t, f)) }
	return []pageCase{
		{name: "diff", html: renderHTML(t, diff), verdict: "mismatch", tone: "t-bad",
			notes: []string{"not audited: in device memory"}, ids: 1 + 1 + 1 + 1 + 1},
		{name: "diff-swapped", html: page(func(b *bytes.Buffer) error { return RenderDiffHTML(b, swapped, swappedInfo) }), verdict: "verified", tone: "t-warn",
			notes: []string{"are the sides swapped?"}, ids: 1},
		{name: "transfers", html: page(func(b *bytes.Buffer) error { return RenderTransfersHTML(b, tr, transfersInfo) }), verdict: "violated", tone: "t-bad",
			notes: []string{"pairing: log", "matches neither dump", "1 transfer of a request the consumer's dumps do not hold is left out"}, ids: 3},
		{name: "campaign", html: page(func(b *bytes.Buffer) error { return RenderCampaignHTML(b, camp, campInfo) }), verdict: "FAIL", tone: "t-bad",
			notes: []string{"pair a<b: are the sides swapped?"}},
		{name: "scrub", html: page(func(b *bytes.Buffer) error {
			return RenderScrubHTML(b, sc, HTMLInfo{Command: "kvaudit scrub store", Exit: 1})
		}),
			verdict: "mismatch", tone: "t-bad", notes: []string{"1 files not read"}},
	}
}

// TestHTMLLayoutInBrowser opens every kind of report page in headless
// Chromium at 1400 and 390 pixels wide, light and dark, and checks what a
// person sees: the verdict at the top, in the tone it has, with the
// notes that qualify it (a mistake in the inputs, what was not audited,
// the logs that match no dump) beside it, in its box; the page never
// wider than the window (wide tables scroll in their own box); a
// chatcmpl id never broken across lines (a browser breaks after a
// hyphen); the dark scheme dark.
func TestHTMLLayoutInBrowser(t *testing.T) {
	b := browsertest.Find(t)
	dir := t.TempDir()
	script := strings.ReplaceAll(measureScript, "ID", `"`+chatID+`"`)
	pages := layoutPages(t)
	type look struct {
		page  pageCase
		width int
		dark  bool
	}
	var looks []look
	for _, dark := range []bool{false, true} {
		var frames []browsertest.Frame
		var these []look
		for _, p := range pages {
			file := filepath.Join(dir, p.name+".html")
			if err := os.WriteFile(file, []byte(p.html), 0o644); err != nil {
				t.Fatal(err)
			}
			widths := []int{1400, 390}
			if dark {
				widths = []int{390}
			}
			for _, w := range widths {
				frames = append(frames, browsertest.Frame{File: file, Width: w, Height: 900})
				these = append(these, look{p, w, dark})
			}
		}
		results, requests := b.Measure(t, frames, dark, script)
		if len(requests) > 0 {
			t.Errorf("the pages sent requests: %q", requests)
		}
		for i, l := range these {
			l := l
			out := results[i]
			t.Run(l.page.name+"/"+map[bool]string{false: "light", true: "dark"}[l.dark]+"/"+strconv.Itoa(l.width), func(t *testing.T) {
				checkSeen(t, l.page, l.width, l.dark, out)
			})
		}
		looks = append(looks, these...)
	}
	if len(looks) != 3*len(pages) {
		t.Errorf("%d looks, want %d", len(looks), 3*len(pages))
	}
}

// checkSeen checks what measureScript saw of page p in a window width
// pixels wide.
func checkSeen(t *testing.T, p pageCase, width int, dark bool, out string) {
	t.Helper()
	var s seen
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Error != "" {
		t.Fatalf("%s: %v %s", out, err, s.Error)
	}
	if s.Width != width || s.Dark != dark {
		t.Fatalf("measured a window %d wide, dark %v; want %d, %v", s.Width, s.Dark, width, dark)
	}
	if s.Scroll > s.Width {
		t.Errorf("the page is %d pixels wide in a window of %d: it scrolls sideways", s.Scroll, s.Width)
	}
	v := s.Verdict
	if v.Text != p.verdict || !strings.Contains(v.Tone, p.tone) {
		t.Errorf("verdict %q in %q, want %q in %s", v.Text, v.Tone, p.verdict, p.tone)
	}
	if v.Top < 0 || v.Bottom > float64(s.Height) || v.Left < 0 || v.Right > float64(s.Width) {
		t.Errorf("the verdict is at %+v, not in the first screen (%d x %d)", v, s.Width, s.Height)
	}
	got := strings.Join(s.Notes, "\n")
	for _, want := range p.notes {
		if !strings.Contains(got, want) {
			t.Errorf("no note %q beside the verdict; the notes there:\n%s", want, got)
		}
	}
	if len(p.notes) > 0 && (!s.NotesInHeader || s.FirstNoteTop > float64(s.Height)) {
		t.Errorf("the notes are not in the verdict's box at the top (in it: %v, first at %.0f px)", s.NotesInHeader, s.FirstNoteTop)
	}
	if s.EmptyNotes > 0 {
		t.Errorf("%d empty note(s)", s.EmptyNotes)
	}
	if len(s.IDLines) != p.ids {
		t.Errorf("the id is shown %d times, want %d", len(s.IDLines), p.ids)
	}
	for i, n := range s.IDLines {
		if n.Lines != 1 && n.Width <= n.Room {
			t.Errorf("the id's place %d (in %s) is broken over %d lines, though it fits (%d of %d pixels)", i, n.Where, n.Lines, n.Width, n.Room)
		}
	}
	if d := darkColor(s.Background); d != dark {
		t.Errorf("background %s: dark %v, want %v", s.Background, d, dark)
	}
}

// darkColor says whether a CSS rgb() color is dark.
func darkColor(c string) bool {
	var r, g, b int
	if _, err := fmt.Sscanf(strings.TrimPrefix(c, "rgb"), "(%d, %d, %d)", &r, &g, &b); err != nil {
		return false
	}
	return r+g+b < 3*128
}
