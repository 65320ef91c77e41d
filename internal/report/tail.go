package report

// This file renders the tail audit of package verify, which kvaudit diff
// --audit-tail runs beside the comparison: its verdict is verify's, this
// only lays it out.

import (
	"fmt"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// TailAuditFormat is the format tag of the tail audit's JSON.
const TailAuditFormat = "kvaudit-tail-audit/1"

// TailAuditJSON is the tail audit's JSON.
type TailAuditJSON struct {
	Format string `json:"format"`
	// Verdict is "clean" or "not zeroed".
	Verdict  string            `json:"verdict"`
	Checked  int               `json:"checked"`
	Findings []TailFindingJSON `json:"findings"`
	Notes    []string          `json:"notes"`
}

// TailFindingJSON is a block holding non-zero bytes past the transfer.
type TailFindingJSON struct {
	Request    string      `json:"request"`
	Group      int         `json:"group"`
	Position   int         `json:"position"`
	Block      int         `json:"block"`
	Rank       layout.Rank `json:"rank"`
	Layer      string      `json:"layer"`
	Whole      bool        `json:"whole_block"`
	FirstToken int         `json:"first_token"`
	LastToken  int         `json:"last_token"`
	Bytes      int         `json:"bytes"`
	File       string      `json:"file"`
	Offset     int64       `json:"offset"`
}

// NewTailAuditJSON converts a tail audit to its JSON.
func NewTailAuditJSON(a *verify.TailAudit) *TailAuditJSON {
	out := &TailAuditJSON{Format: TailAuditFormat, Verdict: "clean", Checked: a.Checked, Findings: []TailFindingJSON{}, Notes: append([]string{}, a.Notes...)}
	for _, f := range a.Findings {
		out.Verdict = "not zeroed"
		out.Findings = append(out.Findings, TailFindingJSON{Request: f.Request, Group: f.Group, Position: f.Position, Block: f.Block,
			Rank: f.Rank, Layer: f.Layer, Whole: f.Whole, FirstToken: f.FirstToken, LastToken: f.LastToken, Bytes: f.Bytes, File: f.File, Offset: f.Offset})
	}
	return out
}

// tailAuditTable lays out the tail audit's findings.
func tailAuditTable(a *verify.TailAudit) *Table {
	verdict := "clean"
	if len(a.Findings) > 0 {
		verdict = a.Extent() + " not zeroed"
	}
	t := &Table{
		Title:  "transferred-or-zeroed audit: " + verdict,
		Header: []string{"request", "group", "position", "block", "rank", "layer", "where", "tokens", "non-zero bytes", "first at"},
		Drop:   []string{"first at", "block", "rank", "where", "group"},
		Whole:  []string{"request"},
	}
	for _, f := range a.Findings {
		where := "tail of the last block"
		if f.Whole {
			where = "block past the last token"
		}
		tokens := fmt.Sprint(f.FirstToken)
		if f.LastToken != f.FirstToken {
			tokens += fmt.Sprintf("-%d", f.LastToken)
		}
		t.Add(C("%s", f.Request), C("%d", f.Group), C("%d", f.Position), C("%d", f.Block), C("%d:%d", f.Rank.PP, f.Rank.TP),
			C("%s", f.Layer), C("%s", where), C("%s", tokens), Cell{Text: fmt.Sprint(f.Bytes), Tone: Bad}, C("%s:%d", f.File, f.Offset))
	}
	t.Notes = append(t.Notes, fmt.Sprintf("%d (request, group, position, rank, layer) region(s) past the transferred range read; every byte must be zero (a load-time check: decoding writes past num_tokens)", a.Checked))
	t.Notes = append(t.Notes, a.Notes...)
	return t
}

// tailAuditSuite is the transferred-or-zeroed audit in JUnit: a case per
// request and group (state groups, which have no token blocks, skipped),
// failing with every finding of the group.
func tailAuditSuite(res *verify.DiffResult, t *verify.TailAudit) junitSuite {
	var found []auditKey
	for _, x := range t.Findings {
		found = append(found, auditKey{x.Request, x.Group})
	}
	keys, cases := auditCases(res, found, func(g *verify.GroupVerdict) string {
		if g.Kind == layout.KindMamba {
			return "a state group has no token blocks to audit"
		}
		return ""
	})
	texts := map[auditKey]*strings.Builder{}
	counts := map[auditKey]int{}
	for _, x := range t.Findings {
		k := auditKey{x.Request, x.Group}
		if texts[k] == nil {
			texts[k] = &strings.Builder{}
		}
		counts[k]++
		fmt.Fprintf(texts[k], "position %d block %d rank %d:%d %s: %d non-zero byte(s) past the transferred range, tokens %d-%d, first at %s:%d\n",
			x.Position, x.Block, x.Rank.PP, x.Rank.TP, x.Layer, x.Bytes, x.FirstToken, x.LastToken, x.File, x.Offset)
	}
	s := junitSuite{Name: "tail audit"}
	for _, k := range keys {
		c := cases[k]
		if n := counts[k]; n > 0 {
			c.Skipped = nil
			c.Failure = &junitOutcome{Message: fmt.Sprintf("%d region(s) hold non-zero bytes past the transferred range", n), Type: "not zeroed", Text: texts[k].String()}
		}
		s.Cases = append(s.Cases, *c)
	}
	if len(s.Cases) == 0 {
		s.Cases = append(s.Cases, junitCase{Name: "transferred or zeroed", Classname: "kvaudit.audit"})
	}
	return s
}
