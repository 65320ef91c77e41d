package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/inject"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// This file renders the results of package inject (campaigns: kvaudit
// campaign) and of package verify's audits, which kvaudit diff and kvaudit
// checksum run beside the checksum comparison (the tail audit, stored
// checksums). The audits' verdicts are verify's; this file only lays them
// out.

// CampaignFormat is the format tag of `kvaudit campaign -o json`.
const CampaignFormat = "kvaudit-campaign/1"

// CampaignJSON is the stable schema of `kvaudit campaign -o json`.
type CampaignJSON struct {
	Format string `json:"format"`
	// Pass is false when a detectable fault was missed or mislocalised,
	// or a control was flagged (the command then exits 1).
	Pass bool `json:"pass"`
	// Seed reproduces the campaign (--seed takes it as written).
	Seed           layout.Hex64       `json:"seed"`
	TrialsPerKind  int                `json:"trials_per_kind"`
	ElapsedSeconds float64            `json:"elapsed_seconds"`
	Kinds          []CampaignKindJSON `json:"kinds"`
	// Controls are the clean pairs: compared and audited untouched.
	Controls []CampaignControlJSON `json:"controls"`
	// Stopped says why no trial ran (a pair that does not verify
	// untouched); absent when the trials ran.
	Stopped string `json:"stopped,omitempty"`
}

// CampaignKindJSON is one fault kind's row.
type CampaignKindJSON struct {
	Kind     string `json:"kind"`
	Detector string `json:"detector"`
	// Control kinds (past-num-tokens) must never be flagged.
	Control        bool `json:"control"`
	Trials         int  `json:"trials"`
	NotApplicable  int  `json:"not_applicable"`
	Detected       int  `json:"detected"`
	Localised      int  `json:"localised"`
	Missed         int  `json:"missed"`
	FalsePositives int  `json:"false_positives"`
	Failed         bool `json:"failed"`
	// Pairs counts the trials run on each pair.
	Pairs map[string]int `json:"pairs"`
	// Example is the block map of the first trial's faulted group.
	Example  string                `json:"example"`
	Failures []CampaignFailureJSON `json:"failures"`
}

// CampaignFailureJSON is a trial that went otherwise than its fault.json
// says.
type CampaignFailureJSON struct {
	Trial    int          `json:"trial"`
	Pair     string       `json:"pair"`
	Seed     layout.Hex64 `json:"seed"`
	Fault    string       `json:"fault"`
	Problems []string     `json:"problems"`
}

// CampaignControlJSON is one pair's clean control.
type CampaignControlJSON struct {
	Pair     string   `json:"pair"`
	Verified bool     `json:"verified"`
	Problems []string `json:"problems"`
	Notes    []string `json:"notes"`
}

// NewCampaignJSON converts a campaign's result to the JSON schema.
func NewCampaignJSON(r *inject.CampaignResult) *CampaignJSON {
	out := &CampaignJSON{Format: CampaignFormat, Pass: r.Pass, Seed: layout.Hex64(r.Seed), TrialsPerKind: r.Trials,
		ElapsedSeconds: r.Elapsed.Seconds(), Kinds: []CampaignKindJSON{}, Controls: []CampaignControlJSON{}, Stopped: r.Stopped}
	for _, k := range r.Kinds {
		kj := CampaignKindJSON{Kind: string(k.Kind), Detector: k.Detector, Control: k.Control, Trials: k.Trials,
			NotApplicable: k.NotApplicable, Detected: k.Detected, Localised: k.Localised, Missed: k.Missed,
			FalsePositives: k.FalsePositives, Failed: k.Failed(), Pairs: k.Pairs, Example: k.Example,
			Failures: []CampaignFailureJSON{}}
		if kj.Pairs == nil {
			kj.Pairs = map[string]int{}
		}
		for _, f := range k.Failures {
			kj.Failures = append(kj.Failures, CampaignFailureJSON{Trial: f.Trial, Pair: f.Pair, Seed: layout.Hex64(f.Seed),
				Fault: f.Fault, Problems: append([]string{}, f.Problems...)})
		}
		out.Kinds = append(out.Kinds, kj)
	}
	for _, p := range r.Pairs {
		out.Controls = append(out.Controls, CampaignControlJSON{Pair: p.Name, Verified: p.Verified,
			Problems: append([]string{}, p.Problems...), Notes: append([]string{}, p.Notes...)})
	}
	return out
}

// CampaignTables lays out a campaign: one row per kind (trials, detected,
// localised exactly, missed, false positives, the pairs it ran on, the
// block map of an example) and a row of clean controls; then the failing
// trials, if any.
func CampaignTables(r *inject.CampaignResult) []*Table {
	if r.Stopped != "" {
		t := &Table{Title: "kvaudit campaign: not run", Header: []string{"pair", "problem untouched"}}
		for _, p := range r.Pairs {
			for _, x := range p.Problems {
				t.Add(C("%s", p.Name), Cell{Text: x, Tone: Bad})
			}
		}
		t.Notes = append(t.Notes, r.Stopped+"; no fault was injected")
		return []*Table{t}
	}
	verdict := "pass"
	if !r.Pass {
		verdict = "FAIL"
	}
	t := &Table{
		Title:  fmt.Sprintf("kvaudit campaign: %s (%d trials per kind, seed %d)", verdict, r.Trials, r.Seed),
		Header: []string{"kind", "detector", "trials", "detected", "localised exactly", "missed", "false positives", "pairs", "example"},
		Drop:   []string{"pairs", "example", "detector", "detected"},
	}
	dash := Cell{Text: "-", Tone: Dim}
	count := func(n int, bad bool) Cell {
		if bad && n > 0 {
			return Cell{Text: fmt.Sprint(n), Tone: Bad}
		}
		return C("%d", n)
	}
	allPairs := len(r.Pairs)
	total := 0
	for _, k := range r.Kinds {
		total += k.Trials
		kind := Cell{Text: string(k.Kind), Tone: Good}
		if k.Failed() {
			kind.Tone = Bad
		}
		trials := C("%d", k.Trials)
		if k.NotApplicable > 0 {
			trials.Text += fmt.Sprintf(" (+%d n/a)", k.NotApplicable)
		}
		pairs := C("%d/%d", len(k.Pairs), allPairs)
		if k.Control {
			t.Add(kind, C("%s (control)", k.Detector), trials, dash, dash, dash, count(k.FalsePositives, true), pairs, C("%s", k.Example))
			continue
		}
		loc := C("%d", k.Localised)
		if k.Localised < k.Trials {
			loc.Tone = Bad
		}
		t.Add(kind, C("%s", k.Detector), trials, count(k.Detected, false), loc, count(k.Missed, true),
			count(k.FalsePositives, true), pairs, C("%s", k.Example))
	}
	flagged := 0
	for _, p := range r.Pairs {
		if !p.Verified {
			flagged++
		}
	}
	clean := Cell{Text: "clean", Tone: Good}
	if flagged > 0 {
		clean.Tone = Bad
	}
	t.Add(clean, C("none (control)"), C("%d", len(r.Pairs)), dash, dash, dash, count(flagged, true), C("%d/%d", len(r.Pairs), allPairs), C(""))
	t.Notes = append(t.Notes,
		fmt.Sprintf("%d trials and %d clean pairs in %.1fs", total, len(r.Pairs), r.Elapsed.Seconds()),
		"detected: the kind's detector reported it; localised exactly: every judged detector reported exactly what fault.json expects (group, consumer positions, replica checks, drill-down layer/head/hint, audit findings)",
		"controls (clean pairs, past-num-tokens) must never be flagged; stale-tail is judged by the tail audit alone, with every checksum verified",
		"example: the first trial's faulted group, one cell per consumer block position: . verified, X mismatch, - not compared, _ not loaded")
	for _, p := range r.Pairs {
		for _, n := range p.Notes {
			t.Notes = append(t.Notes, fmt.Sprintf("pair %s: %s", p.Name, n))
		}
	}
	tables := []*Table{t}
	f := &Table{Title: "failing trials", Header: []string{"kind", "trial", "pair", "trial seed", "fault", "problem"}}
	f.Notes = append(f.Notes, fmt.Sprintf("a trial depends only on the campaign's seed, its kind and its number: kvaudit campaign --fault KIND --seed %d --trials N (N past the trial's number) runs it again", r.Seed))
	for _, k := range r.Kinds {
		for _, x := range k.Failures {
			problem := "missed: nothing reported it"
			if len(x.Problems) > 0 {
				problem = strings.Join(x.Problems, "; ")
			}
			f.Add(C("%s", k.Kind), C("%d", x.Trial), C("%s", x.Pair), C("%d", x.Seed), C("%s", x.Fault), Cell{Text: problem, Tone: Bad})
		}
	}
	for _, p := range r.Pairs {
		for _, x := range p.Problems {
			f.Add(C("clean"), C("-"), C("%s", p.Name), C("-"), C("no fault"), Cell{Text: x, Tone: Bad})
		}
	}
	if len(f.Rows) > 0 {
		tables = append(tables, f)
	}
	return tables
}

// RenderCampaign writes a campaign's result as a table (styled when
// style.Color), markdown, JSON (kvaudit-campaign/1) or JUnit XML.
func RenderCampaign(w io.Writer, r *inject.CampaignResult, f Format, style Style) error {
	switch f {
	case FormatJSON:
		return WriteJSON(w, NewCampaignJSON(r))
	case FormatJUnit:
		return WriteCampaignJUnit(w, r)
	}
	return renderTables(w, CampaignTables(r), f, style)
}

func renderTables(w io.Writer, tables []*Table, f Format, style Style) error {
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

// WriteCampaignJUnit writes a campaign as JUnit XML: a test suite "fault
// kinds" with one test case per kind (a <failure> when a detectable fault
// was missed or mislocalised or a control kind was flagged, its text the
// failing trials; <skipped> when no pair could take the kind), and a test
// suite "clean controls" with one test case per pair (a <failure> when
// the untouched pair does not verify). A CI fails exactly when kvaudit
// campaign exits 1.
func WriteCampaignJUnit(w io.Writer, r *inject.CampaignResult) error {
	out := junitSuites{Name: "kvaudit campaign", junitCounts: junitCounts{Time: seconds(r.Elapsed)}}
	kinds := junitSuite{Name: "fault kinds"}
	if r.Stopped != "" {
		kinds.Cases = append(kinds.Cases, junitCase{Name: "fault kinds", Classname: "kvaudit.campaign", Skipped: &junitOutcome{Message: "not run: " + r.Stopped}})
	}
	for _, k := range r.Kinds {
		c := junitCase{Name: string(k.Kind), Classname: "kvaudit.campaign." + k.Detector}
		switch {
		case k.Trials == 0:
			c.Skipped = &junitOutcome{Message: fmt.Sprintf("no pair takes %s (%d trials not applicable)", k.Kind, k.NotApplicable)}
		case k.Failed():
			var text strings.Builder
			for _, x := range k.Failures {
				fmt.Fprintf(&text, "trial %d, pair %s, seed %d: %s\n", x.Trial, x.Pair, x.Seed, x.Fault)
				problems := x.Problems
				if len(problems) == 0 {
					problems = []string{"missed: nothing reported it"}
				}
				for _, p := range problems {
					fmt.Fprintf(&text, "  %s\n", p)
				}
			}
			msg := fmt.Sprintf("%d of %d trials: %d missed, %d not localised exactly, %d false positives",
				k.Trials-k.Localised, k.Trials, k.Missed, k.Detected-k.Localised, k.FalsePositives)
			if k.Control {
				msg = fmt.Sprintf("%d of %d trials of a control flagged", k.FalsePositives, k.Trials)
			}
			c.Failure = &junitOutcome{Message: msg, Type: "campaign", Text: text.String()}
		}
		kinds.Cases = append(kinds.Cases, c)
	}
	controls := junitSuite{Name: "clean controls"}
	for _, p := range r.Pairs {
		c := junitCase{Name: "clean " + p.Name, Classname: "kvaudit.campaign.control"}
		if !p.Verified {
			c.Failure = &junitOutcome{Message: "an untouched pair was flagged", Type: "control", Text: strings.Join(p.Problems, "\n")}
		}
		controls.Cases = append(controls.Cases, c)
	}
	out.add(kinds)
	out.add(controls)
	return writeJUnit(w, out)
}

// TailAuditFormat and StoredFormat are the format tags of the audits'
// JSON.
const (
	TailAuditFormat = "kvaudit-tail-audit/1"
	StoredFormat    = "kvaudit-stored/1"
)

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

// StoredJSON is the JSON of stored checksums: each rank's values (what an
// offload tier stores beside each full block, to paste into a manifest's
// stored_checksums) and, where the manifest lists stored checksums, the
// comparison.
type StoredJSON struct {
	Format string `json:"format"`
	// Verdict is verified (every stored checksum matches), mismatch, or
	// unverified (the manifests list none to compare).
	Verdict string           `json:"verdict"`
	Ranks   []StoredRankJSON `json:"ranks"`
}

// StoredRankJSON is one rank's stored checksums.
type StoredRankJSON struct {
	Source string `json:"source"`
	TPRank int    `json:"tp_rank"`
	PPRank int    `json:"pp_rank"`
	// SkippedGroups: group id -> why its blocks are not checked.
	SkippedGroups map[string]string   `json:"skipped_groups"`
	Requests      []StoredRequestJSON `json:"requests"`
	Blocks        []StoredBlockJSON   `json:"blocks"`
}

// StoredRequestJSON holds a request's stored checksums by group id, one per
// position from 0 (the manifest's stored_checksums); a position without a
// block holds 0x0000000000000000.
type StoredRequestJSON struct {
	ID              string                    `json:"id"`
	StoredChecksums map[string][]layout.Hex64 `json:"stored_checksums"`
}

// StoredBlockJSON is one full block: its recomputed stored checksum and
// the manifest's, if any.
type StoredBlockJSON struct {
	Request   string        `json:"request"`
	Group     int           `json:"group"`
	Position  int           `json:"position"`
	Block     int           `json:"block"`
	BlockHash string        `json:"block_hash"`
	Stored    layout.Hex64  `json:"stored_checksum"`
	Manifest  *layout.Hex64 `json:"manifest"`
	// Verdict is match, mismatch or "not stored".
	Verdict string `json:"verdict"`
}

func storedVerdict(b *verify.StoredBlock) string {
	switch {
	case !b.HasStored:
		return "not stored"
	case b.Match():
		return "match"
	}
	return "mismatch"
}

// NewStoredJSON converts stored checksums to their JSON.
func NewStoredJSON(ranks []*verify.StoredRank) *StoredJSON {
	out := &StoredJSON{Format: StoredFormat, Verdict: string(verify.StoredVerdict(ranks)), Ranks: []StoredRankJSON{}}
	for _, r := range ranks {
		rj := StoredRankJSON{Source: r.Path, TPRank: r.TPRank, PPRank: r.PPRank, SkippedGroups: map[string]string{},
			Requests: []StoredRequestJSON{}, Blocks: []StoredBlockJSON{}}
		for id, reason := range r.Skipped {
			rj.SkippedGroups[fmt.Sprint(id)] = reason
		}
		for i := range r.Blocks {
			b := &r.Blocks[i]
			bj := StoredBlockJSON{Request: b.Request, Group: b.Group, Position: b.Position, Block: b.Block,
				BlockHash: b.Hash, Stored: layout.Hex64(b.Value), Verdict: storedVerdict(b)}
			if b.HasStored {
				v := layout.Hex64(b.Stored)
				bj.Manifest = &v
			}
			rj.Blocks = append(rj.Blocks, bj)
			n := len(rj.Requests)
			if n == 0 || rj.Requests[n-1].ID != b.Request {
				rj.Requests = append(rj.Requests, StoredRequestJSON{ID: b.Request, StoredChecksums: map[string][]layout.Hex64{}})
				n++
			}
			key := fmt.Sprint(b.Group)
			vals := rj.Requests[n-1].StoredChecksums[key]
			for len(vals) < b.Position {
				vals = append(vals, 0)
			}
			rj.Requests[n-1].StoredChecksums[key] = append(vals, layout.Hex64(b.Value))
		}
		out.Ranks = append(out.Ranks, rj)
	}
	return out
}

// TailAuditTable lays out the tail audit's findings.
func TailAuditTable(a *verify.TailAudit) *Table {
	verdict := "clean"
	if len(a.Findings) > 0 {
		verdict = fmt.Sprintf("%d block(s) not zeroed", len(a.Findings))
	}
	t := &Table{
		Title:  "transferred-or-zeroed audit: " + verdict,
		Header: []string{"request", "group", "position", "block", "rank", "layer", "where", "tokens", "non-zero bytes", "first at"},
		Drop:   []string{"first at", "block", "rank", "where", "group"},
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

// StoredTable lays out stored checksums: one row per full block with a
// block hash, the stored checksum computed from the block and the one the
// manifest lists (stored_checksums), and whether they match.
func StoredTable(ranks []*verify.StoredRank) *Table {
	t := &Table{
		Title:  "stored checksums: " + string(verify.StoredVerdict(ranks)),
		Header: []string{"rank", "request", "group", "position", "block", "block hash", "computed", "in manifest", "verdict"},
		Drop:   []string{"block hash", "block", "rank", "group"},
	}
	for _, r := range ranks {
		for i := range r.Blocks {
			b := &r.Blocks[i]
			manifest := Cell{Text: "-", Tone: Dim}
			mark := Cell{Text: "not stored", Tone: Dim}
			if b.HasStored {
				manifest = C("%s", layout.Hex64(b.Stored))
				mark = Cell{Text: "match", Tone: Good}
				if !b.Match() {
					mark = Cell{Text: "DIFFERS", Tone: Bad}
				}
			}
			t.Add(C("%d:%d", r.PPRank, r.TPRank), C("%s", b.Request), C("%d", b.Group), C("%d", b.Position), C("%d", b.Block),
				C("%s", b.Hash), C("%s", layout.Hex64(b.Value)), manifest, mark)
		}
		for _, id := range slices.Sorted(mapKeys(r.Skipped)) {
			t.Notes = append(t.Notes, fmt.Sprintf("rank %d:%d group %d: %s", r.PPRank, r.TPRank, id, r.Skipped[id]))
		}
	}
	if len(t.Rows) == 0 {
		t.Notes = append(t.Notes, "no full block lists a block hash (block_hashes in the manifest): nothing to emit or check")
	}
	t.Notes = append(t.Notes, "computed: the stored checksum computed from the block, the rank's part of the block checksum XOR le64(first 8 bytes of the block hash) XOR the rank's nested fingerprint of the group (only full blocks); in manifest: the stored_checksums the manifest lists")
	return t
}

func mapKeys[V any](m map[int]V) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// AuditTables lays out the audits that ran.
func AuditTables(a *verify.Audits) []*Table {
	var out []*Table
	if a.Tail != nil {
		out = append(out, TailAuditTable(a.Tail))
	}
	if a.Stored != nil {
		out = append(out, StoredTable(a.Stored))
	}
	return out
}

// diffWithAuditsJSON is kvaudit-diff/1 with the audits' fields added.
type diffWithAuditsJSON struct {
	*DiffJSON
	TailAudit *TailAuditJSON `json:"tail_audit,omitempty"`
	Stored    *StoredJSON    `json:"stored,omitempty"`
}

// RenderDiffAudits writes a comparison and the consumer audits beside it:
// in a table or markdown, the audits' tables after the comparison's; in
// JSON, kvaudit-diff/1 with "tail_audit" and "stored" fields added; in
// JUnit, a test suite per audit after the comparison's suites, each with
// one test case per request and group of the comparison (the same cases
// whatever the audit finds, so CI can follow a case from run to run), a
// <failure> listing that group's findings. With no audits (a nil a) it is
// RenderDiff.
func RenderDiffAudits(w io.Writer, res *verify.DiffResult, a *verify.Audits, f Format, opts DiffOptions) error {
	if a == nil {
		return RenderDiff(w, res, f, opts)
	}
	switch f {
	case FormatJSON:
		out := diffWithAuditsJSON{DiffJSON: NewDiffJSON(res)}
		if a.Tail != nil {
			out.TailAudit = NewTailAuditJSON(a.Tail)
		}
		if a.Stored != nil {
			out.Stored = NewStoredJSON(a.Stored)
		}
		return WriteJSON(w, out)
	case FormatJUnit:
		doc := diffJUnit(res, opts)
		if a.Tail != nil {
			doc.add(tailAuditSuite(res, a.Tail))
		}
		if a.Stored != nil {
			doc.add(storedSuite(res, a.Stored, opts.AllowUnverified))
		}
		return writeJUnit(w, doc)
	}
	return renderTables(w, append(DiffTables(res), AuditTables(a)...), f, opts.Style)
}

// auditKey is a (request, group) of an audit suite.
type auditKey struct {
	request string
	group   int
}

// auditCases returns one test case per request and group of the
// comparison, in its order, then one per (request, group) that only a
// finding names (a request the comparison does not hold), sorted; skip
// says why a group is not audited ("" when it is).
func auditCases(res *verify.DiffResult, found []auditKey, skip func(g *verify.GroupVerdict) string) ([]auditKey, map[auditKey]*junitCase) {
	var keys []auditKey
	cases := map[auditKey]*junitCase{}
	for _, rv := range res.Requests {
		for _, g := range rv.Groups {
			k := auditKey{rv.ID, g.ID}
			if cases[k] != nil {
				continue
			}
			c := &junitCase{Name: fmt.Sprintf("request %s group %d", rv.ID, g.ID), Classname: rv.ID}
			if why := skip(g); why != "" {
				c.Skipped = &junitOutcome{Message: why}
			}
			keys, cases[k] = append(keys, k), c
		}
	}
	var extra []auditKey
	for _, k := range found {
		if cases[k] == nil {
			cases[k] = &junitCase{Name: fmt.Sprintf("request %s group %d", k.request, k.group), Classname: k.request}
			extra = append(extra, k)
		}
	}
	slices.SortFunc(extra, func(a, b auditKey) int {
		if c := strings.Compare(a.request, b.request); c != 0 {
			return c
		}
		return a.group - b.group
	})
	return append(keys, extra...), cases
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

// storedSuite is the stored-checksum audit in JUnit: a case per request
// and group, failing with every block whose stored checksum differs; when
// no block has a stored checksum to compare, one more case says so (an
// error, or skipped with --allow-unverified).
func storedSuite(res *verify.DiffResult, ranks []*verify.StoredRank, allowUnverified bool) junitSuite {
	type bad struct {
		rank *verify.StoredRank
		b    verify.StoredBlock
	}
	var found []auditKey
	byKey := map[auditKey][]bad{}
	for _, r := range ranks {
		for _, b := range r.Mismatches() {
			k := auditKey{b.Request, b.Group}
			found = append(found, k)
			byKey[k] = append(byKey[k], bad{r, b})
		}
	}
	keys, cases := auditCases(res, found, func(*verify.GroupVerdict) string { return "" })
	s := junitSuite{Name: "stored checksums"}
	for _, k := range keys {
		c := cases[k]
		if bs := byKey[k]; len(bs) > 0 {
			var text strings.Builder
			for _, x := range bs {
				fmt.Fprintf(&text, "position %d block %d rank %d:%d: stored checksum %s, the block gives %s\n",
					x.b.Position, x.b.Block, x.rank.PPRank, x.rank.TPRank, layout.Hex64(x.b.Stored), layout.Hex64(x.b.Value))
			}
			c.Failure = &junitOutcome{Message: fmt.Sprintf("%d block(s) differ from the checksum stored with them", len(bs)), Type: "mismatch", Text: text.String()}
		}
		s.Cases = append(s.Cases, *c)
	}
	if verify.StoredVerdict(ranks) == verify.Unverified || len(s.Cases) == 0 {
		c := junitCase{Name: "stored checksums", Classname: "kvaudit.audit"}
		if verify.StoredVerdict(ranks) == verify.Unverified {
			o := &junitOutcome{Message: "no stored checksum to compare", Type: "unverified"}
			if allowUnverified {
				c.Skipped = o
			} else {
				c.Error = o
			}
		}
		s.Cases = append(s.Cases, c)
	}
	return s
}
