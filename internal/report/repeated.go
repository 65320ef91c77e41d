package report

// This file renders the repeated blocks verify finds in a side's block
// tables (a block given at two positions of one request): its verdict is
// verify's, this only lays it out.

import (
	"fmt"
	"strings"

	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// RepeatedBlockJSON is a block given at several positions of one request:
// the "repeated_blocks" of kvaudit-diff/1 and kvaudit-checksums/1, present
// only when there is one (docs/spec.md §9, §12).
type RepeatedBlockJSON struct {
	// Side is "producer" or "consumer" in kvaudit diff, absent in
	// kvaudit checksum.
	Side      string      `json:"side,omitempty"`
	Request   string      `json:"request"`
	Group     int         `json:"group"`
	Block     int         `json:"block"`
	Positions []int       `json:"positions"`
	Rank      layout.Rank `json:"rank"`
}

// NewRepeatedBlocksJSON converts repeated blocks to their JSON (nil for
// none, which the schemas leave out).
func NewRepeatedBlocksJSON(rep []side.RepeatedBlock) []RepeatedBlockJSON {
	var out []RepeatedBlockJSON
	for _, b := range rep {
		out = append(out, RepeatedBlockJSON{Side: b.Side, Request: b.Request, Group: b.Group, Block: b.Block, Positions: b.Positions, Rank: b.Rank})
	}
	return out
}

// RepeatedTable lays out repeated blocks, one row each.
func RepeatedTable(rep []side.RepeatedBlock) *Table {
	t := &Table{
		Title:  fmt.Sprintf("repeated blocks: %d block(s) given at several positions of one request", len(rep)),
		Header: []string{"side", "request", "group", "block", "positions", "rank"},
		Drop:   []string{"rank"},
	}
	if len(rep) > 0 && rep[0].Side == "" {
		t.Header = t.Header[1:]
	}
	for _, b := range rep {
		row := []Cell{C("%s", b.Request), C("%d", b.Group), {Text: fmt.Sprint(b.Block), Tone: Bad}, C("%s", ranges.Format(b.Positions)), C("%d:%d", b.Rank.PP, b.Rank.TP)}
		if b.Side != "" {
			row = append([]Cell{C("%s", b.Side)}, row...)
		}
		t.Add(row...)
	}
	t.Notes = append(t.Notes, "a block holds one position of a request: all but one of these positions hold the wrong KV, whatever the checksums compared (a local prefix hit is not compared)")
	return t
}

// repeatedSuite is the repeated blocks in JUnit: a case per request and
// group of the comparison, failing with the group's repeated blocks.
func repeatedSuite(res *verify.DiffResult, rep []side.RepeatedBlock) junitSuite {
	var found []auditKey
	for _, b := range rep {
		found = append(found, auditKey{b.Request, b.Group})
	}
	keys, cases := auditCases(res, found, func(*verify.GroupVerdict) string { return "" })
	texts := map[auditKey]*strings.Builder{}
	for _, b := range rep {
		k := auditKey{b.Request, b.Group}
		if texts[k] == nil {
			texts[k] = &strings.Builder{}
		}
		fmt.Fprintln(texts[k], b.String())
	}
	s := junitSuite{Name: "repeated blocks"}
	for _, k := range keys {
		c := cases[k]
		if texts[k] != nil {
			c.Failure = &junitOutcome{Message: "a block is given at several positions of the request", Type: "repeated block", Text: texts[k].String()}
		}
		s.Cases = append(s.Cases, *c)
	}
	return s
}
