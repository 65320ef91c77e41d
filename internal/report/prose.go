package report

import (
	"fmt"
	"slices"

	"github.com/charmbracelet/x/ansi"
)

// sentenceBook numbers the sentences of one output's tables (Table.Prose).
type sentenceBook struct{ numbers map[string]int }

// number is a sentence's number, from 1, and whether it is new.
func (b *sentenceBook) number(s string) (int, bool) {
	if n, ok := b.numbers[s]; ok {
		return n, false
	}
	if b.numbers == nil {
		b.numbers = map[string]int{}
	}
	b.numbers[s] = len(b.numbers) + 1
	return len(b.numbers), true
}

// has says whether the book numbered s.
func (b *sentenceBook) has(s string) bool {
	_, ok := b.numbers[s]
	return ok
}

// proseCols are the indexes of the table's Prose columns.
func (t *Table) proseCols() []int {
	var cols []int
	for i, h := range t.header() {
		if slices.Contains(t.Prose, h) {
			cols = append(cols, i)
		}
	}
	return cols
}

// naturalWidth is how wide the table is unwrapped, its empty columns left
// out (they always are, on a terminal).
func (t *Table) naturalWidth() int {
	header := t.header()
	w := 1
	for i, h := range header {
		cw, empty := ansi.StringWidth(h), len(t.Rows) > 0
		for _, r := range t.Rows {
			if i < len(r) {
				cw = max(cw, cellWidth(r[i]))
				if r[i].Text != "" || r[i].Map != nil {
					empty = false
				}
			}
		}
		if !empty {
			w += cw + 3
		}
	}
	return w
}

// shortCell is the widest cell of a Prose column that stays in the grid
// ("-", "no fault", "zeroed"): a number would be no shorter to read.
const shortCell = 10

// proseBelow returns a copy of the table whose Prose columns hold the
// numbers of their sentences, the sentences new to style's book written
// below the grid, when the table would not fit style.Width unwrapped;
// or when one of its sentences repeats (in two rows, or already below an
// earlier table of the output); else the table itself. A short cell
// (shortCell) stays.
func (t *Table) proseBelow(style Style) *Table {
	if t.naturalWidth() <= style.Width && !t.repeats(style.book) {
		return t
	}
	book := style.book
	if book == nil {
		book = &sentenceBook{}
	}
	c := *t
	c.Rows = make([][]Cell, len(t.Rows))
	c.below = slices.Clone(t.below)
	cols := t.proseCols()
	for k, r := range t.Rows {
		c.Rows[k] = slices.Clone(r)
		for _, i := range cols {
			if i >= len(r) || ansi.StringWidth(r[i].Text) <= shortCell || r[i].Map != nil {
				continue
			}
			n, isNew := book.number(r[i].Text)
			if isNew {
				c.below = append(c.below, fmt.Sprintf("[%d] %s", n, r[i].Text))
			}
			c.Rows[k][i] = Cell{Text: fmt.Sprintf("[%d]", n), Tone: r[i].Tone, Styled: r[i].Styled}
		}
	}
	return &c
}

// repeats says whether a sentence of the table's Prose columns is in two
// of its rows, or in book already.
func (t *Table) repeats(book *sentenceBook) bool {
	seen := map[string]bool{}
	cols := t.proseCols()
	for _, r := range t.Rows {
		for _, i := range cols {
			if i >= len(r) || ansi.StringWidth(r[i].Text) <= shortCell {
				continue
			}
			if seen[r[i].Text] || book != nil && book.has(r[i].Text) {
				return true
			}
			seen[r[i].Text] = true
		}
	}
	return false
}
