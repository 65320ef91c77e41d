package report

import (
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// This file draws a table's grid: one small renderer for the aligned,
// styled and markdown tables. The layout (table.go) has already chosen the
// columns, their widths and every cell's lines; what is left is borders
// and padding, so no table library measures, wraps or trims the cells a
// second time. (tablewriter drew the aligned and markdown tables, with six
// options to turn its own wrapping, trimming and capitals off, and
// lipgloss/table the styled one, with its own resizing: two renderers
// that could disagree on a width.)

// box is the characters of a grid's borders: the top, the header's
// separator and the bottom line (left, crossing, right), the horizontal
// and the vertical line. A part left empty is not drawn.
type box struct {
	top, sep, bottom [3]string
	h, v             string
	// sepCell, when set, draws each cell of the header's separator
	// (markdown's ":---").
	sepCell func(width int) string
}

var (
	squareBox   = box{top: [3]string{"┌", "┬", "┐"}, sep: [3]string{"├", "┼", "┤"}, bottom: [3]string{"└", "┴", "┘"}, h: "─", v: "│"}
	roundBox    = box{top: [3]string{"╭", "┬", "╮"}, sep: [3]string{"├", "┼", "┤"}, bottom: [3]string{"╰", "┴", "╯"}, h: "─", v: "│"}
	markdownBox = box{sep: [3]string{"|", "|", "|"}, v: "|", sepCell: func(w int) string { return ":" + strings.Repeat("-", w+1) }}
)

// grid is a table ready to draw: a header (nil: none) and rows of cells,
// each cell's lines already fitted to its column.
type grid struct {
	box    box
	header []string
	rows   [][]string
	// paint styles a cell's line (row -1: the header); line styles the
	// borders. Either may be nil (plain text).
	paint func(row, col int, s string) string
	line  func(s string) string
}

// draw writes the grid: each column as wide as its widest line, a space
// either side of every cell.
func (g grid) draw(b *strings.Builder) {
	n := len(g.header)
	for _, r := range g.rows {
		n = max(n, len(r))
	}
	if n == 0 {
		return
	}
	widths := make([]int, n)
	measure := func(cells []string) {
		for i, c := range cells {
			for l := range strings.SplitSeq(c, "\n") {
				widths[i] = max(widths[i], ansi.StringWidth(l))
			}
		}
	}
	measure(g.header)
	for _, r := range g.rows {
		measure(r)
	}
	border := func(s string) string {
		if g.line == nil || s == "" {
			return s
		}
		return g.line(s)
	}
	rule := func(ends [3]string, cell func(int) string) {
		if ends[0] == "" {
			return
		}
		var l strings.Builder
		l.WriteString(ends[0])
		for i, w := range widths {
			if i > 0 {
				l.WriteString(ends[1])
			}
			l.WriteString(cell(w))
		}
		l.WriteString(ends[2])
		b.WriteString(border(l.String()) + "\n")
	}
	hline := func(w int) string { return strings.Repeat(g.box.h, w+2) }
	row := func(k int, cells []string) {
		lines := make([][]string, n)
		height := 1
		for i := range n {
			if i < len(cells) {
				lines[i] = strings.Split(cells[i], "\n")
			}
			height = max(height, len(lines[i]))
		}
		v := border(g.box.v)
		for y := range height {
			b.WriteString(v)
			for i, w := range widths {
				if i > 0 {
					b.WriteString(v)
				}
				s := ""
				if y < len(lines[i]) {
					s = lines[i][y]
				}
				pad := strings.Repeat(" ", w-ansi.StringWidth(s))
				if g.paint != nil && s != "" {
					s = g.paint(k, i, s)
				}
				b.WriteString(" " + s + pad + " ")
			}
			b.WriteString(v + "\n")
		}
	}
	rule(g.box.top, hline)
	if g.header != nil {
		row(-1, g.header)
		sep := hline
		if g.box.sepCell != nil {
			sep = g.box.sepCell
		}
		rule(g.box.sep, sep)
	}
	for k, r := range g.rows {
		row(k, r)
	}
	rule(g.box.bottom, hline)
}
