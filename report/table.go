package report

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
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

// Style says how a table is drawn.
type Style struct {
	// Color draws a styled table (borders, colors); otherwise the table is
	// plain tab-separated text, one row per line.
	Color bool
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

// Cell is one table cell.
type Cell struct {
	Text string
	Tone Tone
	// Styled says Text holds the report's own terminal styling (the block
	// map): it is not escaped. Every other text is (see Escape).
	Styled bool
}

// C makes a plain cell.
func C(format string, args ...any) Cell { return Cell{Text: fmt.Sprintf(format, args...)} }

// Table is a titled grid with notes under it.
type Table struct {
	Title  string
	Header []string
	Rows   [][]Cell
	Notes  []string
}

// Add appends a row.
func (t *Table) Add(cells ...Cell) { t.Rows = append(t.Rows, cells) }

// Render writes the table as a styled grid (style.Color), plain
// tab-separated text, or markdown (f == FormatMarkdown).
//
// Every title, header, cell and note is escaped (Escape) first: the
// strings come from dumps, records and payloads, which are untrusted.
func (t *Table) Render(w io.Writer, f Format, style Style) error {
	t = t.escaped()
	var b strings.Builder
	switch {
	case f == FormatMarkdown:
		t.markdown(&b)
	case style.Color:
		t.styled(&b, w)
	default:
		t.plain(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (t *Table) plain(b *strings.Builder) {
	if t.Title != "" {
		fmt.Fprintf(b, "# %s\n", t.Title)
	}
	if len(t.Header) > 0 {
		b.WriteString(strings.Join(t.Header, "\t") + "\n")
	}
	for _, r := range t.Rows {
		texts := make([]string, len(r))
		for i, c := range r {
			texts[i] = c.Text
		}
		b.WriteString(strings.Join(texts, "\t") + "\n")
	}
	for _, n := range t.Notes {
		b.WriteString(n + "\n")
	}
}

func (t *Table) markdown(b *strings.Builder) {
	if t.Title != "" {
		fmt.Fprintf(b, "### %s\n\n", t.Title)
	}
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	if len(t.Header) > 0 {
		cols := make([]string, len(t.Header))
		seps := make([]string, len(t.Header))
		for i, h := range t.Header {
			cols[i], seps[i] = esc(h), "---"
		}
		fmt.Fprintf(b, "| %s |\n| %s |\n", strings.Join(cols, " | "), strings.Join(seps, " | "))
	}
	for _, r := range t.Rows {
		cols := make([]string, len(r))
		for i, c := range r {
			cols[i] = esc(c.Text)
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cols, " | "))
	}
	if len(t.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range t.Notes {
			fmt.Fprintf(b, "%s\n", n)
		}
	}
	b.WriteString("\n")
}

func (t *Table) styled(b *strings.Builder, w io.Writer) {
	r := lipgloss.NewRenderer(w)
	title := r.NewStyle().Bold(true)
	header := r.NewStyle().Bold(true).Padding(0, 1)
	cell := r.NewStyle().Padding(0, 1)
	tones := map[Tone]lipgloss.Style{
		Plain: cell,
		Good:  cell.Foreground(lipgloss.Color("2")),
		Bad:   cell.Foreground(lipgloss.Color("1")).Bold(true),
		Warn:  cell.Foreground(lipgloss.Color("3")),
		Dim:   cell.Foreground(lipgloss.Color("8")),
	}
	if t.Title != "" {
		b.WriteString(title.Render(t.Title) + "\n")
	}
	rows := make([][]string, len(t.Rows))
	for i, row := range t.Rows {
		rows[i] = make([]string, len(row))
		for j, c := range row {
			rows[i][j] = c.Text
		}
	}
	tb := table.New().
		Border(lipgloss.RoundedBorder()).
		BorderStyle(r.NewStyle().Foreground(lipgloss.Color("8"))).
		Headers(t.Header...).
		Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			if row == table.HeaderRow {
				return header
			}
			if row < 0 || row >= len(t.Rows) || col >= len(t.Rows[row]) {
				return cell
			}
			return tones[t.Rows[row][col].Tone]
		})
	b.WriteString(tb.Render() + "\n")
	for _, n := range t.Notes {
		b.WriteString(r.NewStyle().Faint(true).Render(n) + "\n")
	}
}

// escaped returns a copy of the table with every text escaped.
func (t *Table) escaped() *Table {
	e := &Table{Title: Escape(t.Title), Header: make([]string, len(t.Header)), Rows: make([][]Cell, len(t.Rows)), Notes: make([]string, len(t.Notes))}
	for i, h := range t.Header {
		e.Header[i] = Escape(h)
	}
	for i, r := range t.Rows {
		e.Rows[i] = make([]Cell, len(r))
		for j, c := range r {
			if !c.Styled {
				c.Text = Escape(c.Text)
			}
			e.Rows[i][j] = c
		}
	}
	for i, n := range t.Notes {
		e.Notes[i] = Escape(n)
	}
	return e
}

// Escape makes an untrusted string safe to print on a terminal or in
// markdown: control characters (C0 including tab, CR and LF, DEL, C1),
// bidirectional overrides and isolates, and invalid UTF-8 are written as
// Go escapes (\x1b, \r, \n, \u202e, ...), so a crafted request id or
// layer name can neither move the cursor, clear the screen, start a new
// line nor reorder what follows it. Other text is unchanged.
func Escape(s string) string {
	clean := true
	for i, r := range s {
		if needsEscape(r) || (r == utf8.RuneError && !validAt(s, i)) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && needsEscape(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func validAt(s string, i int) bool {
	_, n := utf8.DecodeRuneInString(s[i:])
	return n == 3 // a literal U+FFFD, not a bad byte
}

func needsEscape(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true // bidi marks, embeddings, overrides, isolates
	case r == 0x2028, r == 0x2029:
		return true // line and paragraph separators
	}
	return false
}
