package report

// This file renders the transfer audit of package transfer (kvaudit
// transfers, and kvaudit diff --transfers beside the comparison): its
// verdict is the audit's, this only lays it out. Its JSON is the audit's
// Result as it is (kvaudit-transfers/1).

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
)

// RenderTransfers writes a transfer audit as tables (the requests, then
// the findings), markdown, JSON (kvaudit-transfers/1) or JUnit XML.
func RenderTransfers(w io.Writer, res *transfer.Result, f Format, style Style, elapsed time.Duration) error {
	switch f {
	case FormatJSON:
		return WriteJSON(w, res)
	case FormatJUnit:
		out := junitSuites{Name: "kvaudit transfers", junitCounts: junitCounts{Time: seconds(elapsed)}}
		out.add(transfersSuite(res, false))
		return writeJUnit(w, out)
	}
	return renderTables(w, transfersTables(res, true), f, style)
}

// findingCounts writes a request's findings by invariant ("-": none).
func findingCounts(m map[string]int) string {
	var parts []string
	for _, inv := range transfer.Invariants {
		if n := m[inv]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", inv, n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// span writes a first-last range ("-" when unknown).
func span(r [2]int) string {
	switch {
	case r[0] < 0:
		return "-"
	case r[0] == r[1]:
		return fmt.Sprint(r[0])
	}
	return fmt.Sprintf("%d-%d", r[0], r[1])
}

// transfersTables lays out an audit: with requests, a table of the
// requests the logs serve; the findings, every one in full.
func transfersTables(res *transfer.Result, requests bool) []*Table {
	var out []*Table
	if requests {
		t := &Table{
			Title:  "kvaudit transfers: " + res.Verdict,
			Header: []string{"request", "producer request", "rank", "transfers", "descriptors", "bytes", "findings"},
			Drop:   []string{"bytes", "producer request", "descriptors"},
		}
		for _, r := range res.Requests {
			ids := make([]string, len(r.Transfers))
			for i, id := range r.Transfers {
				ids[i] = fmt.Sprint(id)
			}
			tone := Good
			if len(r.Findings) > 0 {
				tone = Bad
			}
			t.Add(C("%s", r.ID), C("%s", r.ProducerID), C("%d:%d", r.Rank.PP, r.Rank.TP), C("%s", strings.Join(ids, ",")),
				C("%d", r.Pairs), C("%d", r.Bytes), Cell{Text: findingCounts(r.Findings), Tone: tone})
		}
		var logs []string
		for _, l := range res.Logs {
			logs = append(logs, fmt.Sprintf("%s (agent %s, %s, %d transfer(s), %d descriptor pair(s), %d done, %d failed)", l.File, l.Agent, orNone(l.Side), l.Xfers, l.Pairs, l.Done, l.Failed))
		}
		t.Notes = append(t.Notes, fmt.Sprintf("%d log(s): %s", len(res.Logs), strings.Join(logs, "; ")))
		t.Notes = append(t.Notes, noteTexts(transfersNotes(res))...)
		out = append(out, t)
	}
	if len(res.Findings) > 0 || !requests {
		ft := &Table{
			Title:  fmt.Sprintf("transfer findings: %d", len(res.Findings)),
			Header: []string{"invariant", "request", "transfer", "descriptor", "rank", "position", "layer", "part", "heads", "tokens", "bytes", "what"},
			// what tells one finding from another (descriptor, layer,
			// part, heads) stays; the sentence goes below the grid
			Drop:  []string{"bytes", "tokens", "rank", "position", "transfer"},
			Prose: []string{"what"},
		}
		if !requests {
			xfers := 0
			for _, l := range res.Logs {
				xfers += l.Xfers
			}
			ft.Title = fmt.Sprintf("transfer audit: %s (%d log(s), %d transfer(s), %d finding(s))", res.Verdict, len(res.Logs), xfers, len(res.Findings))
			if len(res.Findings) == 0 {
				ft.Header = nil
			}
		}
		for _, f := range res.Findings {
			desc, xfer := "-", "-"
			if f.Descriptor >= 0 {
				desc = fmt.Sprint(f.Descriptor)
			}
			if f.Transfer >= 0 {
				xfer = fmt.Sprint(f.Transfer)
			}
			pos := "-"
			if f.Position >= 0 {
				pos = fmt.Sprint(f.Position)
			}
			ft.Add(Cell{Text: f.Invariant, Tone: Bad}, C("%s", f.Request), C("%s", xfer), C("%s", desc), C("%d:%d", f.Rank.PP, f.Rank.TP),
				C("%s", pos), C("%d (%s)", f.Layer, f.LayerName), C("%s", orNone(f.Part)), C("%s", span(f.Heads)), C("%s", span(f.Tokens)),
				C("%d", f.Bytes), C("%s", f.Message))
		}
		if !requests {
			ft.Notes = append(ft.Notes, noteTexts(transfersNotes(res))...)
		}
		out = append(out, ft)
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// transfersSuite is the audit in JUnit: a test case per invariant, failing
// with its findings (an error case when some of the logs could not be
// resolved, skipped instead where unverified loads are allowed, as the
// stored checksums' case is), so that a CI follows each invariant from run
// to run.
func transfersSuite(res *transfer.Result, allowUnverified bool) junitSuite {
	s := junitSuite{Name: "transfer audit"}
	for _, inv := range transfer.Invariants {
		c := junitCase{Name: inv, Classname: "kvaudit.transfers"}
		var text strings.Builder
		n := 0
		for _, f := range res.Findings {
			if f.Invariant == inv {
				n++
				fmt.Fprintf(&text, "request %s rank %d:%d: %s\n", f.Request, f.Rank.PP, f.Rank.TP, f.Message)
			}
		}
		if n > 0 {
			c.Failure = &junitOutcome{Message: fmt.Sprintf("%d finding(s)", n), Type: inv, Text: text.String()}
		}
		s.Cases = append(s.Cases, c)
	}
	if len(res.Unresolved) > 0 {
		c := junitCase{Name: "resolved", Classname: "kvaudit.transfers"}
		o := &junitOutcome{Message: "some of the logs could not be resolved to the dumps", Type: "unresolved", Text: strings.Join(res.Unresolved, "\n")}
		if allowUnverified {
			c.Skipped = o
		} else {
			c.Error = o
		}
		s.Cases = append(s.Cases, c)
	}
	return s
}

// causesTable lays out, with --transfers, what explains each mismatch:
// the transfer audit's findings at its position (nil when none does).
func causesTable(res *verify.DiffResult) *Table {
	t := &Table{
		Title:  "causes: the transfer audit's findings at the mismatches",
		Header: []string{"request", "group", "position", "transfer", "descriptor", "invariant", "cause"},
		Drop:   []string{"group"},
		Prose:  []string{"cause"},
	}
	for _, rv := range res.Requests {
		for _, c := range rv.Causes {
			desc := "-"
			if c.Descriptor >= 0 {
				desc = fmt.Sprint(c.Descriptor)
			}
			t.Add(C("%s", rv.ID), C("%d", c.Group), C("%d", c.Position), C("%d", c.Transfer), C("%s", desc),
				Cell{Text: c.Invariant, Tone: Bad}, C("%s", c.Message))
		}
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}
