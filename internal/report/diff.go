package report

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"

	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
)

// DiffFormat is the format tag of `kvaudit diff -o json`.
const DiffFormat = "kvaudit-diff/1"

// DiffJSON is the stable schema of `kvaudit diff -o json` (docs/spec.md §12). Fields are added, never renamed or removed.
type DiffJSON struct {
	Format string `json:"format"`
	// Verdict is verified, mismatch or unverified: the whole run's, the
	// one the exit code reports (the comparison's combined with the
	// audits', verify.Result.Verdict).
	Verdict string `json:"verdict"`
	// ComparisonVerdict is the checksum comparison's own verdict, without
	// the audits (verify.DiffResult.Verdict).
	ComparisonVerdict string            `json:"comparison_verdict"`
	Requests          []DiffRequestJSON `json:"requests"`
	// Notes say what about the whole comparison looks like a mistake
	// rather than a transfer fault (one side given twice, the sides
	// swapped, every compared block differing).
	Notes []string `json:"notes"`
	// Strength is the weakest of the groups' strengths ("vllm" when any
	// compared group had vLLM's checksum alone, else "vllm+mix"); absent
	// when nothing was compared (verify.DiffResult.Strength).
	Strength string `json:"strength,omitempty"`
	// MixKey is the key the mix checks were computed under (docs/spec.md
	// §14), 0x and 16 hex digits, and MixKeySource where it came from:
	// "run" (drawn at random for this run: --mix-key with it reproduces
	// the run), "given" (--mix-key) or "published" (a side of records or
	// a payload, which carry the published key's). Absent when no mix
	// check was computed.
	MixKey       string `json:"mix_key,omitempty"`
	MixKeySource string `json:"mix_key_source,omitempty"`
	// RunnerCheck is, with --engine cuda, what the cpu engine recomputed
	// of the runner's results and what that can catch.
	RunnerCheck *RunnerCheckJSON `json:"runner_check,omitempty"`
}

// DiffRequestJSON is the verdict of one load (a consumer request).
type DiffRequestJSON struct {
	ID string `json:"id"`
	// ProducerID is the producer request compared with.
	ProducerID string `json:"producer_id"`
	Verdict    string `json:"verdict"`
	// Reasons are load-level unverified reasons.
	Reasons []string        `json:"reasons"`
	Groups  []DiffGroupJSON `json:"groups"`
	// Details localise mismatches (filled when both sides are dumps).
	Details []DiffDetailJSON `json:"details"`
	// Notes say what the drill-down left out, and what decoding the
	// producer's payload let pass as vLLM's consumer does.
	Notes []string `json:"notes"`
	// Numbering is the piece numbering of the compared values: "block"
	// against a flat payload (vLLM's published form), else "request".
	Numbering string `json:"numbering"`
	// Hints name the likely cause of the load's unverified reasons.
	Hints []string `json:"hints"`
	// Causes are, with --transfers, the transfer audit's findings at the
	// mismatching positions.
	Causes []verify.Cause `json:"causes,omitempty"`
}

// DiffGroupJSON is the verdict of one group of a load.
type DiffGroupJSON struct {
	ID int `json:"id"`
	// Verdict is verified, mismatch, unverified or "left out".
	Verdict string `json:"verdict"`
	// Positions are the consumer block positions that differ.
	Positions []int `json:"positions"`
	// Reason is the fixed unverified or left-out reason, or "".
	Reason string `json:"reason"`
	Kind   string `json:"kind"`
	// Checks are the consumer checks (replica copies) that differ.
	Checks            []int `json:"checks"`
	BlockSize         int   `json:"block_size"`
	ProducerBlockSize int   `json:"producer_block_size"`
	// Map has one character per consumer block position from 0: "."
	// verified, "X" mismatch, "-" not compared, "_" not loaded (local
	// prefix hit, out of the window).
	Map string `json:"map"`
	// Hint names the likely cause of Reason, "" when none.
	Hint string `json:"hint,omitempty"`
	// Strength is what the compared positions were judged by: "vllm+mix"
	// (vLLM's checksum and kvaudit's mix check, docs/spec.md §14) or
	// "vllm" (vLLM's checksum alone: a side without the mix check, e.g. a
	// flat payload); absent when nothing was compared.
	Strength string `json:"strength,omitempty"`
	// MixOnly are the positions that differ in the mix check only: vLLM's
	// checksum alone would have verified them. Absent when none.
	MixOnly []int `json:"mix_only,omitempty"`
}

// DiffDetailJSON is one differing (group, position, layer, head, replica).
type DiffDetailJSON struct {
	Group      int    `json:"group"`
	Position   int    `json:"position"`
	Layer      int    `json:"layer"`
	Head       int    `json:"head"`
	Replica    int    `json:"replica"`
	FirstToken int    `json:"first_token"`
	LastToken  int    `json:"last_token"`
	Bytes      int    `json:"bytes"`
	Hint       string `json:"hint"`
	LayerName  string `json:"layer_name"`
	Bits       int    `json:"bits"`
	// LastHead is the last differing head (or state row); State is the
	// index of the state, in the layer's states, of a state group's rows
	// (absent for attention, whose details have tokens instead).
	LastHead int  `json:"last_head"`
	State    *int `json:"state,omitempty"`
	// LastLayer, Layers and Heads say which (layer, head) slices the
	// detail folds: every one of Layers x Heads (Heads is absent for a
	// state group, whose rows are head to last_head); Slices counts
	// them.
	LastLayer int   `json:"last_layer"`
	Layers    []int `json:"layers"`
	Heads     []int `json:"heads,omitempty"`
	Slices    int   `json:"slices"`
	// TPRank and PPRank are the consumer rank, File the file holding its
	// cells, Block the consumer block id at Position, Offset the byte
	// offset in File of the first differing byte.
	TPRank int    `json:"tp_rank"`
	PPRank int    `json:"pp_rank"`
	File   string `json:"file"`
	Block  int    `json:"block"`
	Offset int64  `json:"offset"`
}

// NewDiffJSON converts a comparison to the JSON schema (without audits:
// its verdict is the comparison's; RenderDiffAudits adds the audits').
func NewDiffJSON(res *verify.DiffResult) *DiffJSON {
	out := &DiffJSON{Format: DiffFormat, Verdict: string(res.Verdict), ComparisonVerdict: string(res.Verdict), Requests: []DiffRequestJSON{},
		Notes: append([]string{}, res.Notes...), Strength: string(res.Strength()), MixKeySource: res.MixKeySource}
	if res.MixKeySource != "" {
		out.MixKey = hexKey(res.MixKey)
	}
	out.RunnerCheck = newRunnerCheckJSON(res.EngineCheck)
	for _, r := range res.Requests {
		rj := DiffRequestJSON{
			ID: r.ID, ProducerID: r.ProducerID, Verdict: string(r.Verdict),
			Reasons: append([]string{}, r.Reasons...), Groups: []DiffGroupJSON{},
			Details: []DiffDetailJSON{}, Notes: append([]string{}, r.Notes...),
			Numbering: r.Numbering, Hints: append([]string{}, r.Hints...), Causes: r.Causes,
		}
		for _, g := range r.Groups {
			rj.Groups = append(rj.Groups, DiffGroupJSON{
				ID: g.ID, Verdict: string(g.Verdict), Positions: append([]int{}, g.Positions...),
				Reason: g.Reason, Kind: g.Kind, Checks: append([]int{}, g.Checks...),
				BlockSize: g.BlockSize, ProducerBlockSize: g.ProducerBlockSize, Map: mapChars(g.Map),
				Hint: g.Hint, Strength: string(g.Strength), MixOnly: g.MixOnly,
			})
		}
		for _, d := range r.Details {
			dj := DiffDetailJSON{
				Group: d.Group, Position: d.Position, Layer: d.Layer, Head: d.Head, Replica: d.Replica,
				FirstToken: d.FirstToken, LastToken: d.LastToken, Bytes: d.Bytes, Hint: d.Hint,
				LayerName: d.LayerName, Bits: d.Bits, LastHead: d.LastHead,
				LastLayer: d.LastLayer, Layers: append([]int{}, d.Layers...), Heads: d.Heads, Slices: d.Slices,
				TPRank: d.TPRank, PPRank: d.PPRank, File: d.File, Block: d.Block, Offset: d.Offset,
			}
			if d.State {
				dj.State = &d.StateIndex
			}
			rj.Details = append(rj.Details, dj)
		}
		out.Requests = append(out.Requests, rj)
	}
	return out
}

// mapSymbols are the block map's characters by verify.PositionState.
const mapSymbols = "_-.X"

func mapChars(m []verify.PositionState) string {
	b := make([]byte, len(m))
	for i, s := range m {
		b[i] = mapSymbols[s]
	}
	return string(b)
}

// mapWidth is the most cells a block map has in a styled or aligned
// table; longer maps are scaled down (and further to fit the terminal).
const mapWidth = 96

// blockMap draws a group's block map in at most width cells (all when
// width <= 0): one cell per block position from 0, "." verified, "X"
// mismatch, "-" not compared, "_" not loaded. When there are more
// positions than cells, each cell stands for per consecutive positions
// and shows the worst of them (X, then -, then ., then _). r, when not
// nil, colors the cells.
func blockMap(m []verify.PositionState, width int, r *lipgloss.Renderer) (text string, per int) {
	per = 1
	if width > 0 && len(m) > width {
		per = (len(m) + width - 1) / width
	}
	var cells []verify.PositionState
	for i := 0; i < len(m); i += per {
		worst := m[i]
		for _, s := range m[i:min(i+per, len(m))] {
			worst = max(worst, s)
		}
		cells = append(cells, worst)
	}
	if r == nil {
		return mapChars(cells), per
	}
	styles := map[verify.PositionState]lipgloss.Style{
		verify.PosNotLoaded:   r.NewStyle().Foreground(lipgloss.Color("8")),
		verify.PosNotCompared: r.NewStyle().Foreground(lipgloss.Color("3")),
		verify.PosVerified:    r.NewStyle().Foreground(lipgloss.Color("2")),
		verify.PosMismatch:    r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
	}
	var b strings.Builder
	for i := 0; i < len(cells); {
		j := i
		for j < len(cells) && cells[j] == cells[i] {
			j++
		}
		b.WriteString(styles[cells[i]].Render(strings.Repeat(mapSymbols[cells[i]:cells[i]+1], j-i)))
		i = j
	}
	return b.String(), per
}

func verdictTone(v verify.Verdict) Tone {
	switch v {
	case verify.Verified:
		return Good
	case verify.Mismatch:
		return Bad
	case verify.Unverified:
		return Warn
	}
	return Dim
}

// diffLegend explains the block map's characters.
const diffLegend = "blocks from position 0: . verified, X mismatch, - not compared, _ not loaded"

// drillTitle is the drill-down table's title.
const drillTitle = "drill-down: what differs"

// diffTables lays out a comparison: the verdict per request and group
// (positions, differing checks, reason, block map) and, when there are
// any, the drill-down's details (with none, the requests' notes go under
// the verdicts). A styled or aligned table that does not fit the terminal
// leaves out kind, checks and positions (the map shows the positions),
// then the drill-down's name, file, offset, bytes, block, replica and
// group, and last (long request ids on 80 columns) its rank and tokens.
//
// verdict is the run's (the comparison's combined with the audits'): the
// title says it, and the comparison's own when it differs.
func diffTables(res *verify.DiffResult, verdict verify.Verdict) []*Table {
	title := "kvaudit diff: " + string(verdict)
	switch {
	case verdict == res.Verdict:
	case verdict == verify.Mismatch:
		title += fmt.Sprintf(" (the comparison: %s; an audit below found a fault)", res.Verdict)
	case res.Verdict == verify.Verified && res.DeviceUnchecked():
		title += " (the comparison: verified; the runner check: rows only the runner read, unchecked)"
	default:
		title += fmt.Sprintf(" (the comparison: %s; the audits below: %s)", res.Verdict, verdict)
	}
	t := &Table{
		Title:  title,
		Header: []string{"request", "group", "kind", "verdict", "positions", "checks", "reason", "blocks"},
		Drop:   []string{"kind", "checks", "positions"},
		Whole:  []string{"request"},
		Prose:  []string{"reason"},
	}
	counts := map[verify.Verdict]int{}
	for _, rv := range res.Requests {
		counts[rv.Verdict]++
		id := rv.ID
		if rv.ProducerID != rv.ID {
			id += " <- " + rv.ProducerID
		}
		if len(rv.Reasons) > 0 || len(rv.Groups) == 0 {
			t.Add(C("%s", id), C("-"), C(""), Cell{Text: string(rv.Verdict), Tone: verdictTone(rv.Verdict)},
				C(""), C(""), C("%s", strings.Join(rv.Reasons, "; ")), C(""))
		}
		for _, g := range rv.Groups {
			checks := ""
			if len(g.Checks) > 0 {
				checks = ranges.Format(g.Checks)
			}
			t.Add(C("%s", id), C("%d", g.ID), C("%s", g.Kind), Cell{Text: string(g.Verdict), Tone: verdictTone(g.Verdict)},
				C("%s", ranges.Format(g.Positions)), C("%s", checks), C("%s", g.Reason), mapCell(g.Map))
		}
	}
	numberings := map[string]bool{}
	for _, rv := range res.Requests {
		if rv.Numbering != "" {
			numberings[rv.Numbering] = true
		}
	}
	t.Notes = append(t.Notes, hintNotes(res)...)
	t.Notes = append(t.Notes, noteTexts(pairingNotes(res))...)
	t.Notes = append(t.Notes, fmt.Sprintf("%d request(s): %d verified, %d mismatch, %d unverified",
		len(res.Requests), counts[verify.Verified], counts[verify.Mismatch], counts[verify.Unverified]))
	t.Notes = append(t.Notes, noteTexts(judgedNotes(res))...)
	switch {
	case numberings["block"] && numberings["request"]:
		t.Notes = append(t.Notes, "numbering: block against flat payloads (vLLM's published form), request otherwise")
	case numberings["block"]:
		t.Notes = append(t.Notes, "numbering: block (a flat payload, as vLLM's published code sends)")
	}
	t.Notes = append(t.Notes, diffLegend)
	tables := []*Table{t}

	d := &Table{
		Title:  drillTitle,
		Header: []string{"request", "group", "position", "layer", "name", "head", "replica", "rank", "tokens", "bytes", "block", "file", "offset", "hint"},
		Drop:   []string{"name", "file", "offset", "bytes", "block", "replica", "group", "rank", "tokens"},
		Whole:  []string{"request"},
	}
	for _, rv := range res.Requests {
		for _, x := range rv.Details {
			tokens := strconv.Itoa(x.FirstToken)
			if x.LastToken != x.FirstToken {
				tokens += "-" + strconv.Itoa(x.LastToken)
			}
			layer := strconv.Itoa(x.Layer)
			if len(x.Layers) > 1 {
				layer = ranges.Format(x.Layers)
			}
			head := strconv.Itoa(x.Head)
			if len(x.Heads) > 0 {
				head = ranges.Format(x.Heads)
			}
			if x.State {
				// state rows: no tokens; the head column holds the rows
				tokens = fmt.Sprintf("state %d", x.StateIndex)
				head = "rows " + strconv.Itoa(x.Head)
				if x.LastHead != x.Head {
					head += "-" + strconv.Itoa(x.LastHead)
				}
			}
			d.Add(C("%s", rv.ID), C("%d", x.Group), C("%d", x.Position), C("%s", layer), C("%s", layerRangeName(x.LayerName, x.Layer, x.Layers)),
				C("%s", head), C("%d", x.Replica), C("%d:%d", x.PPRank, x.TPRank), C("%s", tokens), C("%d", x.Bytes),
				C("%d", x.Block), C("%s", x.File), C("%d", x.Offset), Cell{Text: x.Hint, Tone: Bad})
		}
	}
	notes := requestNotes(res)
	if len(d.Rows) > 0 {
		d.Notes = append(d.Notes, "rank is pp:tp of the consumer; offset is the first differing byte in file")
		d.Notes = append(d.Notes, notes...)
		tables = append(tables, d)
	} else {
		// Nothing differs: the requests' notes go under the verdicts, with
		// no drill-down table.
		t.Notes = append(t.Notes, notes...)
	}
	if c := causesTable(res); c != nil {
		tables = append(tables, c)
	}
	return tables
}

// requestNotes are the requests' notes, each naming its request, but
// those that strengthNotes says once for all (docs/spec.md §14). They go
// under the drill-down's details, or under the verdicts when there are
// none.
func requestNotes(res *verify.DiffResult) []string {
	var notes []string
	for _, rv := range res.Requests {
		summarised := verify.VLLMOnlyNotes(rv.Groups) // in the first table, once
		for _, n := range rv.Notes {
			if !slices.Contains(summarised, n) {
				notes = append(notes, fmt.Sprintf("request %s: %s", rv.ID, n))
			}
		}
	}
	return notes
}

// strengthNotes say, once per cause, which requests were compared by
// vLLM's checksum alone and what that misses (docs/spec.md §14).
func strengthNotes(res *verify.DiffResult) []string {
	var whys []string
	reqs := map[string][]string{}
	for _, rv := range res.Requests {
		for _, g := range rv.Groups {
			if g.Strength != verify.StrengthVLLM {
				continue
			}
			if reqs[g.VLLMOnly] == nil {
				whys = append(whys, g.VLLMOnly)
			}
			if !slices.Contains(reqs[g.VLLMOnly], rv.ID) {
				reqs[g.VLLMOnly] = append(reqs[g.VLLMOnly], rv.ID)
			}
		}
	}
	var notes []string
	for _, why := range whys {
		notes = append(notes, fmt.Sprintf("compared by vLLM's checksum only (%s) for %s: %s; kvaudit's nested payload, records and dumps add its mix check",
			why, strings.Join(reqs[why], ", "), verify.MissedByVLLM))
	}
	return notes
}

// DiffOptions control RenderDiff.
type DiffOptions struct {
	Style Style
	// AllowUnverified makes unverified groups and loads skipped test cases
	// in JUnit, instead of errors.
	AllowUnverified bool
	// Elapsed is how long the comparison took: JUnit's time of the whole
	// report (0 when not measured).
	Elapsed time.Duration
}

// RenderDiff writes a comparison as a table (styled when opts.Style.Color,
// else plain tab-separated text), markdown, JSON or JUnit XML.
func RenderDiff(w io.Writer, res *verify.DiffResult, f Format, opts DiffOptions) error {
	switch f {
	case FormatJSON:
		return WriteJSON(w, NewDiffJSON(res))
	case FormatJUnit:
		return writeJUnit(w, diffJUnit(res, opts))
	}
	return renderTables(w, diffTables(res, res.Verdict), f, opts.Style)
}

// diffJUnit is a comparison as JUnit XML (RenderDiff's, and
// RenderDiffAudits' before the audits' suites): one test suite per load
// (consumer request), holding a test case "load" for the load-level
// reasons and one test case "group N" per group. A mismatch is a
// <failure> (its text lists the drill-down's details of the group); an
// unverified group or load is an <error> (the check could not be run), or
// <skipped> with opts.AllowUnverified; a group left out is <skipped>; a
// verified group passes. So a CI fails exactly when `kvaudit diff` exits
// non-zero.
func diffJUnit(res *verify.DiffResult, opts DiffOptions) junitSuites {
	allowUnverified := opts.AllowUnverified
	out := junitSuites{Name: "kvaudit diff", junitCounts: junitCounts{Time: seconds(opts.Elapsed)}}
	unverified := func(msg, text string) (*junitOutcome, *junitOutcome) {
		o := &junitOutcome{Message: msg, Type: "unverified", Text: text}
		if allowUnverified {
			return nil, o
		}
		return o, nil
	}
	for _, rv := range res.Requests {
		s := junitSuite{Name: "request " + rv.ID, SystemOut: requestStrength(res, rv)}
		if ps := groupStrengths(rv); len(ps) > 0 {
			s.Properties = &junitProperties{Property: ps}
		}
		load := junitCase{Name: "load", Classname: rv.ID}
		if len(rv.Reasons) > 0 {
			load.Error, load.Skipped = unverified(strings.Join(rv.Reasons, "; "), "")
		}
		s.Cases = append(s.Cases, load)
		for _, g := range rv.Groups {
			c := junitCase{Name: fmt.Sprintf("group %d", g.ID), Classname: rv.ID}
			switch g.Verdict {
			case verify.Mismatch:
				var text strings.Builder
				for _, d := range rv.Details {
					switch {
					case d.Group != g.ID:
					case d.State:
						fmt.Fprintf(&text, "layers %s (%s) state %d rows %d-%d replica %d, %d differing bytes, rank pp %d tp %d block %d, %s at %d: %s\n",
							ranges.Format(d.Layers), layerRangeName(d.LayerName, d.Layer, d.Layers), d.StateIndex, d.Head, d.LastHead, d.Replica, d.Bytes, d.PPRank, d.TPRank, d.Block, d.File, d.Offset, d.Hint)
					default:
						fmt.Fprintf(&text, "position %d layers %s (%s) heads %s replica %d tokens %d-%d, %d differing bytes, rank pp %d tp %d block %d, %s at %d: %s\n",
							d.Position, ranges.Format(d.Layers), layerRangeName(d.LayerName, d.Layer, d.Layers), ranges.Format(d.Heads), d.Replica, d.FirstToken, d.LastToken, d.Bytes, d.PPRank, d.TPRank, d.Block, d.File, d.Offset, d.Hint)
					}
				}
				msg := fmt.Sprintf("mismatch at consumer block positions %s (checks %s)", ranges.Format(g.Positions), ranges.Format(g.Checks))
				if len(g.MixOnly) > 0 {
					msg += fmt.Sprintf("; positions %s by kvaudit's mix check only (vLLM's checksum agrees)", ranges.Format(g.MixOnly))
				}
				c.Failure = &junitOutcome{Message: msg, Type: "mismatch", Text: text.String()}
			case verify.Unverified:
				c.Error, c.Skipped = unverified(g.Reason, "")
			case verify.LeftOut:
				c.Skipped = &junitOutcome{Message: "left out: " + g.Reason}
			}
			s.Cases = append(s.Cases, c)
		}
		out.add(s)
	}
	if len(res.Requests) == 0 {
		out.add(junitSuite{Name: "requests", Cases: []junitCase{{
			Name: "requests", Classname: "kvaudit diff",
			Error: &junitOutcome{Message: "the consumer holds no request to compare", Type: "unverified"},
		}}})
	}
	return out
}

// diffWithAuditsJSON is kvaudit-diff/1 with the audits' fields added.
type diffWithAuditsJSON struct {
	*DiffJSON
	TailAudit *TailAuditJSON `json:"tail_audit,omitempty"`
	Stored    *StoredJSON    `json:"stored,omitempty"`
	// Repeated are the blocks given at several positions of one request
	// (either side), when there are some.
	Repeated []RepeatedBlockJSON `json:"repeated_blocks,omitempty"`
	// Transfers is, with --transfers, the transfer audit (kvaudit-transfers/1's
	// document as it is).
	Transfers *transfer.Result `json:"transfers,omitempty"`
	// SGLang is SGLang's own check of SGLang dumps (docs/sglang.md).
	SGLang *SGLangAuditJSON `json:"sglang,omitempty"`
}

// RenderDiffAudits writes a comparison and the consumer audits beside it,
// under the run's verdict (verify.Result.Verdict: an audit finding is a
// mismatch): in a table or markdown, titled with it, the audits' tables
// after the comparison's; in JSON, kvaudit-diff/1 with that "verdict",
// the comparison's own as "comparison_verdict", and "tail_audit",
// "stored", "repeated_blocks" and "transfers" fields added; in
// JUnit, a test suite per audit after the comparison's suites, each with
// one test case per request and group of the comparison (the same cases
// whatever the audit finds, so CI can follow a case from run to run), a
// <failure> listing that group's findings. With no audits (a nil a) it is
// RenderDiff.
func RenderDiffAudits(w io.Writer, res *verify.DiffResult, a *verify.Audits, f Format, opts DiffOptions) error {
	if a == nil && res.EngineCheck == nil {
		return RenderDiff(w, res, f, opts)
	}
	if a == nil {
		a = &verify.Audits{} // the runner check's verdict, and no audit
	}
	verdict := (&verify.Result{Diff: res, Audits: a}).Verdict()
	switch f {
	case FormatJSON:
		out := diffWithAuditsJSON{DiffJSON: NewDiffJSON(res)}
		out.Verdict = string(verdict)
		if a.Tail != nil {
			out.TailAudit = NewTailAuditJSON(a.Tail)
		}
		if a.Stored != nil {
			out.Stored = NewStoredJSON(a.Stored)
		}
		out.Repeated = NewRepeatedBlocksJSON(a.Repeated)
		out.Transfers = a.Transfers
		if a.SGLang != nil {
			out.SGLang = NewSGLangAuditJSON(a.SGLang)
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
		if len(a.Repeated) > 0 {
			doc.add(repeatedSuite(res, a.Repeated))
		}
		if a.Transfers != nil {
			doc.add(transfersSuite(a.Transfers, opts.AllowUnverified))
		}
		if a.SGLang != nil {
			doc.add(sglangSuite(a.SGLang))
		}
		if res.EngineCheck != nil {
			doc.add(runnerSuite(res.EngineCheck, opts.AllowUnverified))
		}
		return writeJUnit(w, doc)
	}
	return renderTables(w, append(diffTables(res, verdict), auditTables(a)...), f, opts.Style)
}

// layerRangeName names the layers of a drill-down row that covers
// several: the first layer's name with its number made the range
// ("model.layers.0-3.self_attn.attn"), or, when the name holds no such
// number, the first name and how many more ("cache_a (+3 layers)").
func layerRangeName(first string, layer int, layers []int) string {
	if len(layers) <= 1 {
		return first
	}
	parts := strings.Split(first, ".")
	for i, p := range parts {
		if p == strconv.Itoa(layer) {
			parts[i] = ranges.Format(layers)
			return strings.Join(parts, ".")
		}
	}
	return fmt.Sprintf("%s (+%d layers)", first, len(layers)-1)
}
