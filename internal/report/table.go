package report

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/kvaudit/kvaudit/verify"
)

// Format is an output format.
type Format string

// Output formats.
const (
	FormatTable    Format = "table"
	FormatJSON     Format = "json"
	FormatMarkdown Format = "markdown"
	FormatJUnit    Format = "junit"
)

// Style says how a table (FormatTable) is drawn: styled with borders and
// colors (Color), aligned in bordered columns without color (Aligned), or
// else as tab-separated text, one row per line, for a pipe.
type Style struct {
	// Color draws a styled table (rounded borders, colors).
	Color bool
	// ForceColor writes the color codes even when the writer is not a
	// terminal (--color always).
	ForceColor bool
	// Aligned, without Color, draws the table in aligned columns with
	// borders and no color (a terminal with NO_COLOR or --color never).
	Aligned bool
	// Width is the terminal's width that a styled or aligned table fits
	// in: low-value columns are left out, then long cells wrap and block
	// maps are scaled down (0: no limit).
	Width int
	// book numbers the sentences that tables of one output move below
	// their grids (Table.Prose), so that a sentence cited by two tables
	// is written once.
	book *sentenceBook
}

// Tone colors a cell on a terminal.
type Tone int

// Tones.
const (
	Plain Tone = iota
	Good
	Bad
	Warn
	Dim
)

// Cell is one table cell: text, or a block map (Map not nil), which is
// written in full in tab-separated text and markdown and scaled down to
// the room left in a styled or aligned table.
type Cell struct {
	Text string
	Tone Tone
	Map  []verify.PositionState
	// Styled says Text holds the report's own terminal styling: it is not
	// escaped. Every other text is (see Escape); a block map (Map) is
	// drawn by the report itself.
	Styled bool
}

// C makes a plain cell.
func C(format string, args ...any) Cell { return Cell{Text: fmt.Sprintf(format, args...)} }

// mapCell makes a block map cell.
func mapCell(m []verify.PositionState) Cell { return Cell{Map: m, Text: mapChars(m)} }

// Table is a titled grid with notes under it.
type Table struct {
	Title  string
	Header []string
	Rows   [][]Cell
	Notes  []string
	// Drop ranks the columns (by header) that a styled or aligned table
	// may leave out when it is wider than Style.Width, least telling
	// first: it leaves them out in this order until the table fits. A
	// column not named (the verdicts, block maps, what tells one row from
	// another) is never left out. Columns whose every cell is empty are
	// left out first, whatever the width.
	Drop []string
	// Prose names the columns (by header) of sentences: findings, causes,
	// problems. A styled or aligned table that would not fit Style.Width
	// unwrapped, or whose sentences repeat, does not squeeze them into a
	// column (nor repeat them): each cell holds the
	// number of its sentence ("[1]") and the sentences are written below
	// the grid, numbered, each once, however many rows or tables of the
	// output cite it.
	Prose []string
	// below are the numbered sentences to write under the grid.
	below []string
	// Whole names the columns (by header) whose words a narrow table never
	// breaks: identifiers such as request ids, which wrap only after their
	// hyphens and other breakpoints. Checksums (0x and 16 hex digits) are
	// never broken in any column.
	Whole []string
	// Stream, when set, gives the rows that follow Rows, one at a time
	// (to add): a plain render writes each as it comes and holds none (a
	// table of millions of checksums costs no more than a row), the
	// other renders collect them first.
	Stream func(add func(cells ...Cell))
}

// Add appends a row.
func (t *Table) Add(cells ...Cell) { t.Rows = append(t.Rows, cells) }

// Render writes the table as a styled grid (style.Color), an aligned grid
// without color (style.Aligned), plain tab-separated text, or markdown
// (f == FormatMarkdown).
//
// Every title, header, cell and note is escaped (Escape) first: the
// strings come from dumps, records and payloads, which are untrusted.
func (t *Table) Render(w io.Writer, f Format, style Style) error {
	if f != FormatMarkdown && !style.Color && !style.Aligned {
		return t.plain(w)
	}
	if t.Stream != nil {
		c := *t
		c.Rows, c.Stream = slices.Clone(t.Rows), nil
		t.Stream(c.Add)
		t = &c
	}
	t = t.escaped()
	if f != FormatMarkdown && style.Width > 0 && len(t.Prose) > 0 {
		t = t.proseBelow(style)
	}
	var b strings.Builder
	switch {
	case f == FormatMarkdown:
		t.markdown(&b)
	case style.Color:
		t.styled(&b, w, style)
	default:
		t.aligned(&b, style)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// plain writes the table as tab-separated text, escaping each string as
// it writes it and each row of Stream as it comes.
func (t *Table) plain(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if t.Title != "" {
		fmt.Fprintf(bw, "# %s\n", escapeText(t.Title))
	}
	if len(t.Header) > 0 {
		for i, h := range t.Header {
			if i > 0 {
				bw.WriteByte('\t')
			}
			bw.WriteString(escapeText(h))
		}
		bw.WriteByte('\n')
	}
	row := func(cells ...Cell) {
		for i, c := range cells {
			if i > 0 {
				bw.WriteByte('\t')
			}
			if c.Styled {
				bw.WriteString(c.Text)
			} else {
				bw.WriteString(escapeText(c.Text))
			}
		}
		bw.WriteByte('\n')
	}
	for _, r := range t.Rows {
		row(r...)
	}
	if t.Stream != nil {
		t.Stream(row)
	}
	for _, n := range t.Notes {
		bw.WriteString(escapeText(n) + "\n")
	}
	return bw.Flush()
}

// markdown writes a GitHub table (grid with the markdown box), each note
// a paragraph of its own.
func (t *Table) markdown(b *strings.Builder) {
	if t.Title != "" {
		fmt.Fprintf(b, "### %s\n\n", t.Title)
	}
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	if header := t.header(); len(header) > 0 {
		// A table without a header (name and value rows) gets an empty
		// one: a markdown table needs a header row.
		hdr := make([]string, len(header))
		for i, h := range header {
			hdr[i] = esc(h)
		}
		rows := make([][]string, len(t.Rows))
		for k, r := range t.Rows {
			rows[k] = make([]string, len(header))
			for i, c := range r[:min(len(r), len(header))] {
				rows[k][i] = esc(c.Text)
			}
		}
		grid{box: markdownBox, header: hdr, rows: rows}.draw(b)
	}
	for _, n := range t.Notes {
		fmt.Fprintf(b, "\n%s\n", n)
	}
	b.WriteString("\n")
}

// header is the table's header, one name per column: Header, padded with
// empty names to the widest row (a table of name and value rows has no
// Header at all).
func (t *Table) header() []string {
	n := len(t.Header)
	for _, r := range t.Rows {
		n = max(n, len(r))
	}
	h := make([]string, n)
	copy(h, t.Header)
	return h
}

// laidOut is a table fitted to a width: the columns kept, each cell's
// lines, and the notes to add (columns left out, maps scaled).
type laidOut struct {
	header []string
	cols   []int // indexes into the table's columns
	widths []int
	notes  []string
}

// cellWidth is the widest a cell wants to be; a map's at most mapWidth.
func cellWidth(c Cell) int {
	if c.Map != nil {
		return min(len(c.Map), mapWidth)
	}
	w := 0
	for l := range strings.SplitSeq(c.Text, "\n") {
		w = max(w, ansi.StringWidth(l))
	}
	return w
}

// breakpoints are where a long cell wraps, besides spaces and after
// hyphens (ansi.Wrap's).
const breakpoints = " ,;./"

// isChecksum says whether a word is a checksum as kvaudit prints them.
func isChecksum(w string) bool {
	if len(w) != 18 || !strings.HasPrefix(w, "0x") {
		return false
	}
	return strings.Trim(w[2:], "0123456789abcdef") == ""
}

// pieces splits text where it may wrap: at spaces and after a hyphen or
// a breakpoint, as ansi.Wrap wraps it, but not before the last 3
// characters of a word (the "-0" of "chatcmpl-...-0" stays with the
// piece before it).
func pieces(text string) []string {
	var out []string
	for f := range strings.FieldsSeq(text) {
		start := 0
		for i, r := range f {
			if (r == '-' || strings.ContainsRune(breakpoints, r)) && len(f)-i-1 > 3 {
				out = append(out, f[start:i+1])
				start = i + 1
			}
		}
		if start < len(f) {
			out = append(out, f[start:])
		}
	}
	return out
}

// minWidth is the narrowest a column may wrap to, and whether its words
// must stay whole even then: its header's longest word (a header wraps
// at its spaces), its cells' longest
// piece (pieces) up to 20 cells, a map of 16 cells. A checksum, and any
// piece of a whole column (Table.Whole), is never broken: it counts in
// full.
func minWidth(header string, cells []Cell, whole bool) (w int, unbreakable bool) {
	for f := range strings.FieldsSeq(header) {
		w = max(w, ansi.StringWidth(f))
	}
	unbreakable = whole
	for _, c := range cells {
		if c.Map != nil {
			w = max(w, min(len(c.Map), 16))
			continue
		}
		if cw := ansi.StringWidth(c.Text); cw <= 10 {
			w = max(w, cw) // a short cell ("184.0 KiB") stays on one line
			continue
		}
		for _, f := range pieces(c.Text) {
			pw := ansi.StringWidth(f)
			switch {
			case isChecksum(strings.TrimRight(f, breakpoints)):
				w, unbreakable = max(w, pw), true
			case whole:
				w = max(w, pw)
			default:
				w = max(w, min(pw, 20))
			}
		}
	}
	return w, unbreakable
}

// layout fits the table in width cells, 3 per column for the padding and
// border and 1 for the last border: it leaves out its empty columns, then
// the Drop columns in order, while the table would have to wrap more than
// an eighth of the width, then narrows the widest columns one cell at a
// time, block maps first; words break last, and never a checksum or a
// word of a Whole column.
func (t *Table) layout(width int) *laidOut {
	header := t.header()
	n := len(header)
	column := func(i int) []Cell {
		var cs []Cell
		for _, r := range t.Rows {
			if i < len(r) {
				cs = append(cs, r[i])
			}
		}
		return cs
	}
	// body is a column's width with its header wrapped at spaces: a
	// wrapped header costs a line, not a line per row
	natural, body, least := make([]int, n), make([]int, n), make([]int, n)
	unbreakable, empty := make([]bool, n), make([]bool, n)
	for i, h := range header {
		for f := range strings.FieldsSeq(h) {
			body[i] = max(body[i], ansi.StringWidth(f))
		}
		empty[i] = len(t.Rows) > 0
		for _, c := range column(i) {
			body[i] = max(body[i], cellWidth(c))
			if c.Text != "" || c.Map != nil {
				empty[i] = false
			}
		}
		natural[i] = max(body[i], ansi.StringWidth(h))
		var w int
		w, unbreakable[i] = minWidth(h, column(i), slices.Contains(t.Whole, h))
		least[i] = min(natural[i], w)
	}
	// a block map is scaled to 32 cells before anything is left out
	isMap := make([]bool, n)
	for _, r := range t.Rows {
		for i, c := range r {
			if i < n && c.Map != nil {
				isMap[i] = true
			}
		}
	}
	for i := range body {
		if isMap[i] {
			body[i] = max(least[i], min(body[i], 32))
		}
	}
	keep := make([]bool, n)
	for i := range keep {
		keep[i] = true
	}
	sum := func(ws []int) int {
		s := 1
		for i, w := range ws {
			if keep[i] {
				s += w + 3
			}
		}
		return s
	}
	var dropped, emptied []string
	// wrap when that takes at most an eighth of the width
	fits := func() bool { return sum(least) <= width && sum(body) <= width+width/8 }
	if width > 0 {
		for i, h := range header {
			if empty[i] {
				keep[i] = false
				emptied = append(emptied, h)
			}
		}
		for _, name := range t.Drop {
			if fits() {
				break
			}
			for i, h := range header {
				if h == name && keep[i] {
					keep[i] = false
					dropped = append(dropped, name)
				}
			}
		}
	}
	widths := append([]int{}, natural...)
	narrow := func(least []int) {
		for width > 0 && sum(widths) > width {
			widest := -1
			for i := range widths {
				if keep[i] && widths[i] > least[i] && (widest < 0 || widths[i] > widths[widest]) {
					widest = i
				}
			}
			if widest < 0 {
				return
			}
			widths[widest]--
		}
	}
	// Block maps shrink first, to 32 cells; then text wraps; then maps
	// shrink to their least; then words break too, down to 4 cells a
	// column or the header's width.
	step := make([]int, n)
	for i := range step {
		step[i] = natural[i]
		if isMap[i] {
			step[i] = max(least[i], min(natural[i], 32))
		}
	}
	narrow(body) // headers wrap first
	narrow(step)
	for i := range step {
		if !isMap[i] {
			step[i] = least[i]
		}
	}
	narrow(step)
	narrow(least)
	for i, h := range header {
		if !unbreakable[i] {
			hw := 0
			for f := range strings.FieldsSeq(h) {
				hw = max(hw, ansi.StringWidth(f))
			}
			least[i] = min(least[i], max(4, hw))
		}
	}
	narrow(least)
	out := &laidOut{}
	for i := range n {
		if keep[i] {
			out.cols = append(out.cols, i)
			out.header = append(out.header, termtext.Wrap(header[i], widths[i]))
			out.widths = append(out.widths, widths[i])
		}
	}
	if len(emptied) > 0 {
		out.notes = append(out.notes, "empty, not shown: "+strings.Join(emptied, ", "))
	}
	if len(dropped) > 0 {
		out.notes = append(out.notes, fmt.Sprintf("left out to fit %d columns: %s (-o json has every field)", width, strings.Join(dropped, ", ")))
	}
	return out
}

// cells renders the kept cells of a row: text wrapped to the column's
// width, a map scaled to it (colored by r when not nil). per is the most
// positions a map cell stands for.
func (l *laidOut) cells(row []Cell, r *lipgloss.Renderer) (out []string, per int) {
	per = 1
	for k, i := range l.cols {
		if i >= len(row) {
			out = append(out, "")
			continue
		}
		c := row[i]
		if c.Map != nil {
			m, p := blockMap(c.Map, l.widths[k], r)
			per = max(per, p)
			out = append(out, m)
			continue
		}
		out = append(out, wrapCell(c.Text, l.widths[k]))
	}
	return out, per
}

// wrapCell wraps a cell's text to width cells at spaces
// (termtext.WrapWords): a word that fits a line is never broken. A word
// wider than the column (an identifier, a path) breaks after its
// hyphens and breakpoints (ansi.Wrap), its first piece in the rest of
// the line when one fits there, and a piece still too wide (or one
// ansi.Wrap left ending in a breakpoint one cell past the width) is cut
// at the width.
func wrapCell(text string, width int) string {
	return termtext.WrapWords(text, width, breakWord)
}

// breakWord breaks a word wider than width for wrapCell, its first piece
// at most room cells ("": the word starts on the next line).
func breakWord(w string, room, width int) []string {
	if room >= width {
		return cutWord(w, width)
	}
	if room > 0 {
		first, _, _ := strings.Cut(ansi.Wrap(w, room, breakpoints), "\n")
		if first != "" && len(first) < len(w) && ansi.StringWidth(first) <= room &&
			strings.ContainsRune("-"+breakpoints, rune(first[len(first)-1])) {
			return append([]string{first}, cutWord(w[len(first):], width)...)
		}
	}
	return append([]string{""}, cutWord(w, width)...)
}

// cutWord breaks w into pieces of at most width cells, after its hyphens
// and breakpoints where it can.
func cutWord(w string, width int) []string {
	var out []string
	for l := range strings.SplitSeq(ansi.Wrap(w, width, breakpoints), "\n") {
		if ansi.StringWidth(l) > width {
			out = append(out, strings.Split(ansi.Hardwrap(l, width, false), "\n")...)
		} else if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// scaledNote says how many positions a map cell stands for.
func scaledNote(per int) string {
	return fmt.Sprintf("blocks scaled to fit: one cell per %d positions, showing the worst", per)
}

// fit lays the table out in width cells for the aligned and styled grids:
// the layout, each row's kept cells (maps colored by r when not nil) and
// the notes to write under the grid (the table's, then the layout's).
func (t *Table) fit(width int, r *lipgloss.Renderer) (l *laidOut, rows [][]string, notes []string) {
	l = t.layout(width)
	scaled := 1
	rows = make([][]string, len(t.Rows))
	for i, row := range t.Rows {
		cells, per := l.cells(row, r)
		scaled = max(scaled, per)
		rows[i] = cells
	}
	notes = append(append(append([]string{}, t.below...), t.Notes...), l.notes...)
	if scaled > 1 {
		notes = append(notes, scaledNote(scaled))
	}
	return l, rows, notes
}

// aligned writes the table in aligned columns with square borders and no
// color.
func (t *Table) aligned(b *strings.Builder, style Style) {
	if t.Title != "" {
		b.WriteString(termtext.Wrap(t.Title, style.Width) + "\n")
	}
	l, rows, notes := t.fit(style.Width, nil)
	g := grid{box: squareBox, rows: rows}
	if len(t.Header) > 0 {
		g.header = l.header
	}
	g.draw(b)
	for _, n := range notes {
		b.WriteString(termtext.Wrap(n, style.Width) + "\n")
	}
}

func (t *Table) styled(b *strings.Builder, w io.Writer, style Style) {
	r := lipgloss.NewRenderer(w)
	if style.ForceColor {
		r.SetColorProfile(termenv.ANSI256)
	}
	title := r.NewStyle().Bold(true)
	header := r.NewStyle().Bold(true)
	cell := r.NewStyle()
	tones := map[Tone]lipgloss.Style{
		Plain: cell,
		Good:  cell.Foreground(lipgloss.Color("2")),
		Bad:   cell.Foreground(lipgloss.Color("1")).Bold(true),
		Warn:  cell.Foreground(lipgloss.Color("3")),
		Dim:   cell.Foreground(lipgloss.Color("8")),
	}
	if t.Title != "" {
		b.WriteString(title.Render(termtext.Wrap(t.Title, style.Width)) + "\n")
	}
	l, rows, notes := t.fit(style.Width, r)
	tone := make([][]Tone, len(t.Rows))
	for i, row := range t.Rows {
		for _, c := range l.cols {
			tn := Plain
			if c < len(row) {
				tn = row[c].Tone
			}
			tone[i] = append(tone[i], tn)
		}
	}
	border := r.NewStyle().Foreground(lipgloss.Color("8"))
	g := grid{box: roundBox, rows: rows,
		line: func(s string) string { return border.Render(s) },
		paint: func(row, col int, s string) string {
			if row < 0 {
				return header.Render(s)
			}
			if row >= len(tone) || col >= len(tone[row]) {
				return s
			}
			return tones[tone[row][col]].Render(s)
		}}
	if len(t.Header) > 0 {
		g.header = l.header
	}
	g.draw(b)
	faint := r.NewStyle().Faint(true)
	for _, n := range notes {
		for l := range strings.SplitSeq(termtext.Wrap(n, style.Width), "\n") {
			b.WriteString(faint.Render(l) + "\n")
		}
	}
}

// escaped returns a copy of the table with every text escaped.
func (t *Table) escaped() *Table {
	e := &Table{Title: escapeText(t.Title), Header: make([]string, len(t.Header)), Rows: make([][]Cell, len(t.Rows)), Notes: make([]string, len(t.Notes)), Drop: t.Drop, Whole: t.Whole, Prose: t.Prose}
	for i, h := range t.Header {
		e.Header[i] = escapeText(h)
	}
	for i, r := range t.Rows {
		e.Rows[i] = make([]Cell, len(r))
		for j, c := range r {
			if !c.Styled {
				c.Text = escapeText(c.Text)
			}
			e.Rows[i][j] = c
		}
	}
	for i, n := range t.Notes {
		e.Notes[i] = escapeText(n)
	}
	return e
}

// escapeText makes an untrusted string safe to print (termtext.Escape).
func escapeText(s string) string { return termtext.Escape(s) }

func renderTables(w io.Writer, tables []*Table, f Format, style Style) error {
	if style.book == nil {
		style.book = &sentenceBook{}
	}
	for i, t := range tables {
		if i > 0 && f != FormatMarkdown {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if err := t.Render(w, f, style); err != nil {
			return err
		}
	}
	return nil
}
