package report

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvaudit/kvaudit/scrub"
)

// ScrubFormat is the format name of `kvaudit scrub -o json`.
const ScrubFormat = "kvaudit-scrub/1"

// scrubDoc is `kvaudit scrub -o json` (docs/schemas/kvaudit-scrub.schema.json).
type scrubDoc struct {
	Format     string       `json:"format"`
	Verdict    scrub.Status `json:"verdict"`
	Verified   int          `json:"verified"`
	Mismatch   int          `json:"mismatch"`
	Unverified int          `json:"unverified"`
	*scrub.Result
}

// scrubDocument is the JSON document of a scrub.
func scrubDocument(res *scrub.Result) any {
	v, m, u := res.Counts()
	return scrubDoc{Format: ScrubFormat, Verdict: res.Verdict(), Verified: v, Mismatch: m, Unverified: u, Result: res}
}

// RenderScrub writes a scrub as tables (a table of the directories and the
// format each was read as, then every entry that is not verified, in
// full), JSON (kvaudit-scrub/1) or JUnit (a suite per directory, a test
// case per file or record: a mismatch fails, an unverified entry is
// skipped).
func RenderScrub(w io.Writer, res *scrub.Result, f Format, style Style, elapsed time.Duration) error {
	switch f {
	case FormatJSON:
		return WriteJSON(w, scrubDocument(res))
	case FormatJUnit:
		return writeJUnit(w, scrubJUnit(res, elapsed))
	}
	return renderTables(w, scrubTables(res), f, style)
}

// entryName says what an entry's name says it holds, in one cell.
func entryName(n scrub.Name) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+" "+v)
		}
	}
	add("model", n.Model)
	if n.Rank != nil {
		add("rank", fmt.Sprint(*n.Rank))
	}
	if n.WorldSize != nil {
		add("world", fmt.Sprint(*n.WorldSize))
	}
	if n.Group != nil {
		add("group", fmt.Sprint(*n.Group))
	}
	add("block", n.BlockHash)
	add("chunk", n.ChunkHash)
	add("salt", n.Salt)
	add("key", n.Key)
	if n.Seq != nil {
		add("seq", fmt.Sprint(*n.Seq))
	}
	return strings.Join(parts, ", ")
}

func statusTone(s scrub.Status) Tone {
	switch s {
	case scrub.Verified:
		return Good
	case scrub.Mismatch:
		return Bad
	}
	return Warn
}

// scrubTables lays out a scrub: the directories, then the entries that
// are not verified (every one, never cut), then a verdict line as the
// last table's note.
func scrubTables(res *scrub.Result) []*Table {
	dirs := &Table{
		Title:  "store directories",
		Header: []string{"directory", "format", "files", "verified", "mismatch", "unverified", "recognised by"},
		Drop:   []string{"recognised by"},
	}
	for _, d := range res.Dirs {
		dirs.Add(C("%s", d.Path), C("%s", d.Format), C("%d", d.Files), Cell{Text: fmt.Sprint(d.Verified), Tone: Good},
			Cell{Text: fmt.Sprint(d.Mismatch), Tone: toneIf(d.Mismatch > 0, Bad)}, Cell{Text: fmt.Sprint(d.Unverified), Tone: toneIf(d.Unverified > 0, Warn)}, C("%s", d.How))
	}
	dirs.Notes = append(dirs.Notes, noteTexts(scrubNotes(res))...)
	out := []*Table{dirs}
	bad := &Table{
		Title:  "files and records not verified",
		Header: []string{"path", "offset", "length", "status", "problem", "algorithm", "expected", "actual", "name", "reason"},
		Drop:   []string{"name", "algorithm", "length", "offset", "problem"},
		// a store's file names run to a hundred characters: they may
		// break anywhere; a checksum may not
		Whole: []string{"expected", "actual", "status", "problem"},
		Prose: []string{"reason"},
	}
	for _, e := range res.Entries {
		if e.Status == scrub.Verified {
			continue
		}
		reason := e.Reason
		if e.Note != "" {
			reason += "; " + e.Note
		}
		bad.Add(C("%s", e.Path), C("%d", e.Offset), C("%d", e.Length), Cell{Text: string(e.Status), Tone: statusTone(e.Status)},
			C("%s", e.Problem), C("%s", e.Algorithm), C("%s", e.Expected), C("%s", e.Actual), C("%s", entryName(e.Name)), C("%s", reason))
	}
	v, m, u := res.Counts()
	note := fmt.Sprintf("verdict: %s (%d verified, %d mismatch, %d unverified; %d bytes read)", res.Verdict(), v, m, u, res.Bytes)
	if len(bad.Rows) > 0 {
		bad.Notes = append(bad.Notes, note)
		out = append(out, bad)
	} else {
		dirs.Notes = append(dirs.Notes, note)
	}
	return out
}

func toneIf(b bool, t Tone) Tone {
	if b {
		return t
	}
	return Plain
}

// scrubJUnit is a suite per directory and a case per file or record.
func scrubJUnit(res *scrub.Result, elapsed time.Duration) junitSuites {
	out := junitSuites{Name: "kvaudit scrub", junitCounts: junitCounts{Time: seconds(elapsed)}}
	byDir := map[string][]scrub.Entry{}
	for _, e := range res.Entries {
		byDir[e.Dir] = append(byDir[e.Dir], e)
	}
	for _, d := range res.Dirs {
		s := junitSuite{Name: fmt.Sprintf("%s (%s)", d.Path, d.Format)}
		for _, e := range byDir[d.Path] {
			name := e.Path
			if e.Format == scrub.MooncakeSSD {
				name = fmt.Sprintf("%s@%d", e.Path, e.Offset)
			}
			c := junitCase{Name: name, Classname: "scrub." + string(e.Format)}
			detail := fmt.Sprintf("%s at offset %d, %d bytes: %s expected %s, actual %s; %s", e.Path, e.Offset, e.Length, e.Algorithm, e.Expected, e.Actual, entryName(e.Name))
			switch e.Status {
			case scrub.Mismatch:
				c.Failure = &junitOutcome{Message: e.Reason, Type: e.Problem, Text: detail}
			case scrub.Unverified:
				c.Skipped = &junitOutcome{Message: e.Reason, Type: e.Problem, Text: detail}
			}
			s.Cases = append(s.Cases, c)
		}
		out.add(s)
	}
	return out
}
