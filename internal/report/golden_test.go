package report

// Golden files: every renderer's whole output for fixed inputs, under
// testdata/golden/<case>.<format>. A change to what a renderer writes
// shows up as a diff of these files in review.
//
// After an intended change of the output, regenerate them all with one
// command and review the diff before committing:
//
//	go test ./report -run TestGolden -update

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the renderers' output")

const goldenDir = "testdata/golden"

// golden compares out with testdata/golden/name, or writes it there with
// -update.
func golden(t *testing.T, name string, out []byte) {
	t.Helper()
	path := filepath.Join(goldenDir, name)
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -run TestGolden -update to create it)", err)
	}
	if bytes.Equal(out, want) {
		return
	}
	got, exp := strings.Split(string(out), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(got), len(exp)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(exp) {
			w = exp[i]
		}
		if g != w || i >= len(got) || i >= len(exp) {
			t.Errorf("%s differs from the output at line %d:\n got: %q\nwant: %q\n(if the change is intended: go test ./report -run TestGolden -update)", path, i+1, g, w)
			return
		}
	}
}

// render runs a renderer into a buffer.
func render(t *testing.T, f func(b *bytes.Buffer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// ansi matches terminal escape sequences (SGR).
var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// styled renders a styled table without its color codes: a buffer is not
// a terminal, so there are none, unless the environment forces them
// (CLICOLOR_FORCE); the golden files hold the layout either way.
func styled(t *testing.T, f func(b *bytes.Buffer) error) []byte {
	t.Helper()
	return sgr.ReplaceAll(render(t, f), nil)
}

// goldenFormat is a format of the golden files and its extension.
type goldenFormat struct {
	ext   string
	f     Format
	style Style
}

// render renders in the format, without color codes for a styled table.
func (g goldenFormat) render(t *testing.T, f func(b *bytes.Buffer) error) []byte {
	t.Helper()
	out := render(t, f)
	if g.style.Color {
		out = styled(t, f)
	}
	if g.style.Width > 0 {
		fits(t, out, g.style.Width)
	}
	return out
}

// fits checks that no line of out is wider than width cells.
func fits(t *testing.T, out []byte, width int) {
	t.Helper()
	for i, l := range strings.Split(string(sgr.ReplaceAll(out, nil)), "\n") {
		if w := ansi.StringWidth(l); w > width {
			t.Errorf("line %d is %d cells wide, more than %d: %q", i+1, w, width, l)
		}
	}
}

// goldenFormats are the formats of the golden files.
var goldenFormats = []goldenFormat{
	{"txt", FormatTable, Style{}},
	{"styled.txt", FormatTable, Style{Color: true}},
	{"aligned.txt", FormatTable, Style{Aligned: true}},
	{"styled80.txt", FormatTable, Style{Color: true, Width: 80}},
	{"aligned80.txt", FormatTable, Style{Aligned: true, Width: 80}},
	{"md", FormatMarkdown, Style{}},
	{"json", FormatJSON, Style{}},
	{"xml", FormatJUnit, Style{}},
}

// auditsFixture is a tail audit with one finding and stored checksums with
// one match and one mismatch.
func auditsFixture() *verify.Audits {
	return &verify.Audits{
		Tail: &verify.TailAudit{Checked: 3, Findings: []verify.TailFinding{{Request: "req-0", Group: 0, Position: 2, Block: 5, Layer: "model.layers.1.self_attn.attn", FirstToken: 37, LastToken: 40, Bytes: 9, File: "x.safetensors", Offset: 123}}},
		Stored: []*verify.StoredRank{{Path: "r", Blocks: []verify.StoredBlock{
			{Request: "req-0", Group: 0, Position: 0, Block: 3, Hash: "aa", Value: 1, Stored: 1, HasStored: true},
			{Request: "req-0", Group: 0, Position: 1, Block: 4, Hash: "bb", Value: 2, Stored: 3, HasStored: true},
			{Request: "req-0", Group: 0, Position: 2, Block: 6, Hash: "cc", Value: 7},
		}, Skipped: map[int]string{1: verify.StoredSkipState}}},
	}
}

// TestGoldenDiff: kvaudit diff's output in every format, with and without
// --allow-unverified (JUnit) and with the consumer audits beside it.
func TestGoldenDiff(t *testing.T) {
	res := diffFixture()
	for _, g := range goldenFormats {
		golden(t, "diff."+g.ext, g.render(t, func(b *bytes.Buffer) error {
			return RenderDiff(b, res, g.f, DiffOptions{Style: g.style})
		}))
		golden(t, "diff-audits."+g.ext, g.render(t, func(b *bytes.Buffer) error {
			return RenderDiffAudits(b, res, auditsFixture(), g.f, DiffOptions{Style: g.style})
		}))
	}
	golden(t, "diff-allow-unverified.xml", render(t, func(b *bytes.Buffer) error {
		return RenderDiff(b, res, FormatJUnit, DiffOptions{AllowUnverified: true})
	}))
}

// TestGoldenCampaign: kvaudit campaign's output in every format, for a
// passing and a failing campaign.
func TestGoldenCampaign(t *testing.T) {
	for name, r := range map[string]*inject.CampaignResult{"campaign-pass": campaignResult(true), "campaign-fail": campaignResult(false)} {
		for _, g := range goldenFormats {
			golden(t, name+"."+g.ext, g.render(t, func(b *bytes.Buffer) error {
				return RenderCampaign(b, r, g.f, g.style)
			}))
		}
	}
}

// goldenSide synthesizes a side of a preset into dir and returns its rank
// paths.
func goldenSide(t *testing.T, dir string, cfg synth.Config) []string {
	t.Helper()
	paths, err := synth.Write(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// goldenTables checks tables in the formats tables have, and their
// JSON.
func goldenTables(t *testing.T, name string, tables []*Table, json any) {
	t.Helper()
	for _, g := range goldenFormats {
		switch g.f {
		case FormatJUnit:
			continue
		case FormatJSON:
			golden(t, name+".json", render(t, func(b *bytes.Buffer) error { return WriteJSON(b, json) }))
		default:
			golden(t, name+"."+g.ext, g.render(t, func(b *bytes.Buffer) error { return renderTables(b, tables, g.f, g.style) }))
		}
	}
}

// TestGoldenChecksums: kvaudit checksum's output (table, markdown, JSON)
// for a whole synthesized side (TP 2, a sliding-window group beside a full
// one) and for one rank of it alone (every request unverified), and the
// stored checksums of --stored.
func TestGoldenChecksums(t *testing.T) {
	ctx := context.Background()
	paths := goldenSide(t, t.TempDir(), synth.Config{Preset: "swa", TP: 2, Layers: 2, Requests: 2, Tokens: 40})
	cRes, err := side.Checksum(ctx, side.Input{Paths: paths}, side.ChecksumOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	c := cRes.Checks
	goldenTables(t, "checksums", []*Table{ChecksumsTableNumbered(c, checksum.NumberRequest)}, NewChecksumsJSONNumbered(c, checksum.NumberRequest))

	partRes, err := side.Checksum(ctx, side.Input{Paths: paths[:1]}, side.ChecksumOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	part := partRes.Checks
	goldenTables(t, "checksums-partial", []*Table{ChecksumsTableNumbered(part, checksum.NumberRequest)}, NewChecksumsJSONNumbered(part, checksum.NumberRequest))

	stored := auditsFixture().Stored
	goldenTables(t, "stored", []*Table{StoredTable(stored)}, NewStoredJSON(stored))
}

// TestGoldenInspect: kvaudit inspect's output (table, markdown, JSON) for
// an attention side at TP 2 and a hybrid model with state layers. Paths
// are written relative to the temporary directory.
func TestGoldenInspect(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	paths = append(paths, goldenSide(t, filepath.Join(dir, "swa"), synth.Config{Preset: "swa", TP: 2, Layers: 2})...)
	paths = append(paths, goldenSide(t, filepath.Join(dir, "hybrid"), synth.Config{Preset: "mamba2-hybrid", Layers: 2})...)
	var dumps []*layout.Dump
	defer func() { layout.CloseAll(dumps) }()
	for _, p := range paths {
		d, err := layout.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		dumps = append(dumps, d)
	}
	in := NewInspectJSON(dumps)
	rel := func(p string) string {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		return filepath.ToSlash(r)
	}
	for i := range in.Dumps {
		d := &in.Dumps[i]
		d.Path = rel(d.Path)
		for j := range d.Groups {
			for k := range d.Groups[j].Caches {
				if f := &d.Groups[j].Caches[k].File; *f != "" {
					*f = rel(*f)
				}
			}
		}
	}
	goldenTables(t, "inspect", InspectTables(in), in)
}
