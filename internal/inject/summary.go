package inject

import (
	"fmt"
	"strings"

	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/verify"
)

// SummaryLine is one line of a fault's summary: what it tells, and the
// text.
type SummaryLine struct {
	Name, Text string
}

// Summary returns what `kvaudit inject` shows of a fault, as data for a
// renderer: the description, the rank, file and tensor of the first
// change (where there is one), how many bytes changed, the places
// affected, the detector and what each detector must report. fault.json
// holds the byte ranges and the full expectations.
func (f *Fault) Summary() []SummaryLine {
	var out []SummaryLine
	add := func(name, format string, args ...any) {
		out = append(out, SummaryLine{Name: name, Text: fmt.Sprintf(format, args...)})
	}
	add("fault", "%s", f.Description)
	if f.Rank != nil {
		add("rank", "%d:%d", f.Rank.PP, f.Rank.TP)
	}
	if f.File != "" {
		add("file", "%s", f.File)
	}
	if f.Tensor != "" {
		add("tensor", "%s", f.Tensor)
	}
	var bytes int64
	for _, c := range f.Changes {
		bytes += c.Length
	}
	add("changed", "%d byte(s) in %d range(s)", bytes, len(f.Changes))
	var places []string
	for _, p := range f.Affected {
		places = append(places, fmt.Sprintf("%s g%d p%d", p.Request, p.Group, p.Position))
	}
	add("affected", "%s", strings.Join(places, ", "))
	add("detector", "%s", f.Detector)
	add("expect", "%s", f.expectSummary())
	return out
}

// expectSummary says in a line what the detectors must report.
func (f *Fault) expectSummary() string {
	var parts []string
	for _, r := range f.Expect.Requests {
		if r.Verdict == string(verify.Unverified) {
			parts = append(parts, fmt.Sprintf("%s unverified (%s)", r.ID, r.Reason))
			continue
		}
		for _, g := range r.Groups {
			s := fmt.Sprintf("%s mismatch in group %d at position(s) %s", r.ID, g.ID, ranges.Format(g.Positions))
			if g.Checks != nil {
				s += " in check(s) " + ranges.Format(g.Checks)
			}
			parts = append(parts, s)
		}
	}
	if len(f.Expect.Tail) > 0 {
		a := &verify.TailAudit{}
		for _, t := range f.Expect.Tail {
			a.Findings = append(a.Findings, verify.TailFinding{Request: t.Request, Group: t.Group, Position: t.Position, Rank: t.Rank, Layer: t.Layer})
		}
		parts = append(parts, fmt.Sprintf("the tail audit finds %s not zeroed", a.Extent()))
	}
	if len(f.Expect.Stored) > 0 {
		parts = append(parts, fmt.Sprintf("%d stored checksum(s) fail", len(f.Expect.Stored)))
	}
	if len(f.Expect.Store) > 0 {
		s := f.Expect.Store[0]
		at := ""
		if s.Offset != 0 {
			at = fmt.Sprintf(" at offset %d", s.Offset)
		}
		return fmt.Sprintf("kvaudit scrub finds %s%s %s (%s), every other file and record verified", s.File, at, s.Status, s.Problem)
	}
	if len(parts) == 0 {
		return "every load verifies: nothing may report it"
	}
	if len(f.Expect.Requests) == 0 {
		parts = append(parts, "every load verifies")
	}
	return strings.Join(parts, "; ")
}
