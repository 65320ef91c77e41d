package report

import (
	"io"

	"github.com/kvaudit/kvaudit/transfer"
)

// transferBadge is a transfer audit's verdict drawn as a badge: clean
// good, violated bad, unresolved a warning.
func transferBadge(verdict string) badge {
	switch verdict {
	case transfer.Clean:
		return badge{verdict, "✓", "good"}
	case transfer.Violated:
		return badge{verdict, "✗", "bad"}
	case transfer.Unresolved:
		return badge{verdict, "?", "warn"}
	}
	return badge{verdict, "–", "dim"}
}

// RenderTransfersHTML writes a transfer audit (kvaudit transfers --html)
// as one self-contained HTML page, the page RenderDiffHTML writes: the
// verdict as the exit code reports it, the inputs (the two sides and the
// logs as given in info, and the log files read), and the tables every
// other format draws (the requests, then the findings). Like it, it reads
// and fetches nothing and its size is bounded.
func RenderTransfersHTML(w io.Writer, res *transfer.Result, info HTMLInfo) error {
	p := &htmlPage{Title: "kvaudit transfers: " + res.Verdict, Verdict: transferBadge(res.Verdict)}
	if res.Verdict != transfer.Clean {
		p.Summary = clipTo(res.Summary(), htmlMaxNote)
	}
	lead := transfersNotes(res)
	info.fill(p, lead)
	logs := inputRow{Side: "logs", Given: clip(info.Logs), Form: "kvaudit-nixl-log/1"}
	for _, l := range res.Logs {
		if len(logs.Files) == htmlMaxFiles {
			logs.FilesLeft++
			continue
		}
		logs.Files = append(logs.Files, clip(l.File))
	}
	p.Inputs = []inputRow{
		{Side: "producer", Given: clip(info.Producer), Form: "dumps"},
		{Side: "consumer", Given: clip(info.Consumer), Form: "dumps"},
		logs,
	}
	for _, t := range transfersTables(res, true) {
		p.Tables = append(p.Tables, newHTMLTable(t, lead))
	}
	return htmlTemplate().Execute(w, p)
}
