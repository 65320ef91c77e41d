package report

import (
	"pgregory.net/rapid"

	"bytes"
	"strings"
	"testing"
)

// TestLayoutLeavesOutEmptyColumnsFirst: a table on a terminal leaves out
// a column whose every cell is empty, whatever the width, and says so;
// then, when still too wide, the columns its Drop list names.
func TestLayoutLeavesOutEmptyColumnsFirst(t *testing.T) {
	tb := &Table{
		Header: []string{"request", "kind", "verdict", "reason", "positions"},
		Drop:   []string{"kind", "positions"},
	}
	for range 3 {
		tb.Add(C("a-rather-long-request-id-000"), C("full_attention"), C("verified"), C(""), C("0-3"))
	}
	for _, width := range []int{70, 200} {
		var b bytes.Buffer
		if err := tb.Render(&b, FormatTable, Style{Aligned: true, Width: width}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		fits(t, b.Bytes(), width)
		if !strings.Contains(out, "empty, not shown: reason\n") || strings.Contains(out, "left out") || strings.Contains(out, "reason │") ||
			!strings.Contains(out, "full_attention") || !strings.Contains(out, "positions") {
			t.Errorf("width %d: the empty reason is not the only column left out:\n%s", width, out)
		}
	}
	// too narrow for kind too: kind goes next, as Drop says
	var b bytes.Buffer
	if err := tb.Render(&b, FormatTable, Style{Aligned: true, Width: 50}); err != nil {
		t.Fatal(err)
	}
	fits(t, b.Bytes(), 50)
	if out := b.String(); !strings.Contains(out, "left out to fit 50 columns: kind (-o json") || !strings.Contains(out, "positions") {
		t.Errorf("at 50 columns:\n%s", out)
	}
	// without a width (no terminal), nothing is left out
	b.Reset()
	if err := tb.Render(&b, FormatTable, Style{Aligned: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "not shown") || !strings.Contains(b.String(), "reason") {
		t.Errorf("without a width:\n%s", b.String())
	}
}

// TestLayoutKeepsWordsWhole: however narrow the terminal, a checksum is
// never split over lines, nor is a word of a Whole column (a request id
// wraps only after its hyphens); other words break.
func TestLayoutKeepsWordsWhole(t *testing.T) {
	tb := &Table{
		Header: []string{"request", "check 0", "check 1", "note"},
		Whole:  []string{"request"},
	}
	tb.Add(C("chatcmpl-9f2b6c1e4d8a4f3b9c7e2a1d5b6f8e0c-0"), C("0xbcc6295bacdf458f"), C("0x5dd337444c6578f5"), C("averyveryverylongwordthatmaybreak"))
	for _, width := range []int{40, 60, 80} {
		var b bytes.Buffer
		if err := tb.Render(&b, FormatTable, Style{Aligned: true, Width: width}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, whole := range []string{"0xbcc6295bacdf458f", "0x5dd337444c6578f5", "│ chatcmpl-", "│ 9f2b6c1e4d8a4f3b9c7e2a1d5b6f8e0c-0 │"} {
			if !strings.Contains(out, whole) {
				t.Errorf("width %d: %q is broken:\n%s", width, whole, out)
			}
		}
		if strings.Contains(out, "averyveryverylongwordthatmaybreak") {
			t.Errorf("width %d: the note's long word does not break:\n%s", width, out)
		}
	}
}

// TestTableWithoutHeader: a table of name and value rows (no header) shows
// its rows on a terminal, styled or not, and in markdown.
func TestTableWithoutHeader(t *testing.T) {
	tb := &Table{Title: "t"}
	tb.Add(C("fault"), C("flipped 1 bit(s) of the cell of request req-0"))
	tb.Add(C("detector"), C("checksum"))
	for _, f := range []struct {
		f     Format
		style Style
	}{{FormatTable, Style{Aligned: true, Width: 40}}, {FormatTable, Style{Color: true, Width: 200}}, {FormatMarkdown, Style{}}} {
		var b bytes.Buffer
		if err := tb.Render(&b, f.f, f.style); err != nil {
			t.Fatal(err)
		}
		out := string(sgr.ReplaceAll(b.Bytes(), nil))
		for _, want := range []string{"fault", "flipped 1 bit(s)", "detector", "checksum"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s %+v: lacks %q:\n%s", f.f, f.style, want, out)
			}
		}
	}
}

// TestWrapCellFits: a wrapped cell's every line fits its width, where
// ansi.Wrap alone leaves a breakpoint one cell past it (the comma after
// "(position 0)" at 94 cells), and the words are all there, in order.
func TestWrapCellFits(t *testing.T) {
	texts := []string{
		"transfer 1 read producer block 4 (rank pp 0 tp 0), which holds request req-1's KV (position 0), not request req-0's",
		"a,b,c,d,e,f;g;h;i.j.k/l/m/n,o,p",
		"request chatcmpl-9f2b6c1e4d8a4f3b9c7e2a1d5b6f8e0c-0: group 0 position 3, layer 2",
	}
	for _, text := range texts {
		for width := 4; width <= len(text)+1; width++ {
			out := wrapCell(text, width)
			for _, l := range strings.Split(out, "\n") {
				if w := len([]rune(l)); w > width {
					t.Fatalf("width %d: the line %q is %d cells:\n%s", width, l, w, out)
				}
			}
			if got := strings.Join(strings.Fields(strings.ReplaceAll(out, "\n", "")), ""); got != strings.Join(strings.Fields(text), "") {
				t.Fatalf("width %d: %q lost or reordered characters: %q", width, text, out)
			}
		}
	}
}

// TestProseBelow: a table too wide for its sentences numbers them, writes
// each once below the grid (however many rows and tables of one output
// cite it), leaves short cells in place, and keeps the sentences in the
// grid when the table fits unwrapped.
func TestProseBelow(t *testing.T) {
	long := "transfer 1 read producer block 4 (rank pp 0 tp 0), which holds request req-1's KV (position 0), not request req-0's"
	mk := func(title string) *Table {
		tb := &Table{Title: title, Header: []string{"descriptor", "layer", "what"}, Prose: []string{"what"}}
		tb.Add(C("0"), C("0"), C("%s", long))
		tb.Add(C("3"), C("1"), C("%s", long))
		tb.Add(C("6"), C("1"), C("zeroed"))
		return tb
	}
	var b bytes.Buffer
	if err := renderTables(&b, []*Table{mk("causes"), mk("findings")}, FormatTable, Style{Aligned: true, Width: 80}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	fits(t, b.Bytes(), 80)
	if n := strings.Count(out, "which holds"); n != 1 {
		t.Errorf("the sentence is written %d times, want once:\n%s", n, out)
	}
	if strings.Count(out, "│ [1]    │") != 4 || !strings.Contains(out, "[1] transfer 1 read") || !strings.Contains(out, "│ zeroed │") {
		t.Errorf("rows do not cite [1], or the short cell moved:\n%s", out)
	}
	// wide enough for the sentence unwrapped, but it repeats: below
	b.Reset()
	if err := mk("t").Render(&b, FormatTable, Style{Aligned: true, Width: 200}); err != nil {
		t.Fatal(err)
	}
	if strings.Count(b.String(), "which holds") != 1 {
		t.Errorf("at 200 columns:\n%s", b.String())
	}
	// wide enough, said once: it stays in the grid
	once := mk("t")
	once.Rows = once.Rows[:1]
	b.Reset()
	if err := once.Render(&b, FormatTable, Style{Aligned: true, Width: 200}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "[1]") || !strings.Contains(b.String(), "│ "+long+" │") {
		t.Errorf("at 200 columns, one row:\n%s", b.String())
	}
	// a pipe gets the sentences in their column
	b.Reset()
	if err := mk("t").Render(&b, FormatTable, Style{}); err != nil {
		t.Fatal(err)
	}
	if strings.Count(b.String(), "which holds") != 2 {
		t.Errorf("piped:\n%s", b.String())
	}
}

// TestWrapCellWordsWhole: a cell wraps at spaces; a word that fits the
// column is never broken after a hyphen ("--request", "req-0",
// "block-size" stay whole), and only a word wider than the column is
// broken, after its hyphens and breakpoints first.
func TestWrapCellWordsWhole(t *testing.T) {
	for _, c := range []struct {
		in    string
		width int
		want  string
	}{
		{"pass --request req-0 to name it", 10, "pass\n--request\nreq-0 to\nname it"},
		{"the block-size is TP-independent", 15, "the block-size\nis\nTP-independent"},
		// over-long: its first piece fills the line, after a hyphen
		{"1 (model.layers.1.self_attn.attn)", 10, "1 (model.\nlayers.1.\nself_attn.\nattn)"},
		{"request chatcmpl-9f2b6c1e4d8a-0", 16, "request\nchatcmpl-\n9f2b6c1e4d8a-0"},
	} {
		if got := wrapCell(c.in, c.width); got != c.want {
			t.Errorf("wrapCell(%q, %d) = %q, want %q", c.in, c.width, got, c.want)
		}
	}
	t.Run("property", rapid.MakeCheck(func(t *rapid.T) {
		width := rapid.IntRange(4, 30).Draw(t, "width")
		words := rapid.SliceOfN(rapid.StringMatching(`[a-z][a-z.,-]{0,15}`), 1, 12).Draw(t, "words")
		in := strings.Join(words, " ")
		out := wrapCell(in, width)
		for _, l := range strings.Split(out, "\n") {
			if len(l) > width {
				t.Fatalf("line %q over %d:\n%s", l, width, out)
			}
		}
		tokens := strings.Fields(strings.ReplaceAll(out, "\n", " "))
		for _, w := range words {
			if len(tokens) == 0 {
				t.Fatalf("word %q missing from %q", w, out)
			}
			if len(w) <= width {
				if tokens[0] != w {
					t.Fatalf("word %q (fits %d) shows as %q:\n%s", w, width, tokens[0], out)
				}
				tokens = tokens[1:]
				continue
			}
			var got string
			for len(got) < len(w) && len(tokens) > 0 {
				got += tokens[0]
				tokens = tokens[1:]
			}
			if got != w {
				t.Fatalf("over-long word %q comes back as %q:\n%s", w, got, out)
			}
		}
		if len(tokens) > 0 {
			t.Fatalf("extra %q in:\n%s", tokens, out)
		}
	}))
}
