package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// everyElementTimed checks that every testsuites, testsuite and testcase
// element has a time attribute with three decimals.
func everyElementTimed(t *testing.T, doc string) {
	t.Helper()
	elems := regexp.MustCompile(`<(testsuites|testsuite|testcase)\b[^>]*>`).FindAllString(doc, -1)
	if len(elems) < 3 {
		t.Fatalf("only %d elements:\n%s", len(elems), doc)
	}
	for _, e := range elems {
		if !regexp.MustCompile(` time="\d+\.\d{3}"`).MatchString(e) {
			t.Errorf("no time attribute: %s", e)
		}
	}
}

func auditDiff() *verify.DiffResult {
	g := func(id int, kind string) *verify.GroupVerdict {
		return &verify.GroupVerdict{ID: id, Kind: kind, Verdict: verify.Verified, Positions: []int{}, Checks: []int{}}
	}
	return &verify.DiffResult{Verdict: verify.Verified, Requests: []*verify.RequestVerdict{
		{ID: "req-0", ProducerID: "req-0", Verdict: verify.Verified, Groups: []*verify.GroupVerdict{g(0, layout.KindFullAttention), g(1, layout.KindMamba)}},
		{ID: "req-1", ProducerID: "req-1", Verdict: verify.Verified, Groups: []*verify.GroupVerdict{g(0, layout.KindFullAttention)}},
	}}
}

type parsedCase struct {
	Name    string    `xml:"name,attr"`
	Failure *struct{} `xml:"failure"`
	Skipped *struct{} `xml:"skipped"`
	Error   *struct{} `xml:"error"`
}

func suiteCases(t *testing.T, doc []byte, suite string) []parsedCase {
	t.Helper()
	var d struct {
		Suites []struct {
			Name  string       `xml:"name,attr"`
			Cases []parsedCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	for _, s := range d.Suites {
		if s.Name == suite {
			return s.Cases
		}
	}
	t.Fatalf("no suite %q:\n%s", suite, doc)
	return nil
}

// TestDiffJUnitTimes: the report's time is the comparison's; every suite
// and case carries a time attribute.
func TestDiffJUnitTimes(t *testing.T) {
	var b bytes.Buffer
	if err := RenderDiff(&b, auditDiff(), FormatJUnit, DiffOptions{Elapsed: 1500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	everyElementTimed(t, b.String())
	if !strings.Contains(b.String(), `<testsuites name="kvaudit diff" tests="5" failures="0" errors="0" skipped="0" time="1.500">`) {
		t.Errorf("root element:\n%s", b.String())
	}
}

// TestTailAuditJUnitStable: the tail-audit suite has one case per request
// and group of the comparison, whatever it finds; a group with two
// findings is one failure listing both; state groups are skipped; a
// finding outside the comparison gets a case of its own.
func TestTailAuditJUnitStable(t *testing.T) {
	render := func(a *verify.Audits) []byte {
		var b bytes.Buffer
		if err := RenderDiffAudits(&b, auditDiff(), a, FormatJUnit, DiffOptions{}); err != nil {
			t.Fatal(err)
		}
		everyElementTimed(t, b.String())
		return b.Bytes()
	}
	finding := func(req string, pos int) verify.TailFinding {
		return verify.TailFinding{Request: req, Group: 0, Position: pos, Block: 7 + pos, Layer: "model.layers.0.self_attn.attn", FirstToken: 48, LastToken: 63, Bytes: 5, File: "c/rank-0-0.safetensors", Offset: 100}
	}
	names := func(cs []parsedCase) []string {
		var n []string
		for _, c := range cs {
			n = append(n, c.Name)
		}
		return n
	}
	want := []string{"request req-0 group 0", "request req-0 group 1", "request req-1 group 0"}

	clean := render(&verify.Audits{Tail: &verify.TailAudit{Checked: 6}})
	cs := suiteCases(t, clean, "tail audit")
	if !slices.Equal(names(cs), want) || cs[0].Failure != nil || cs[2].Failure != nil || cs[1].Skipped == nil {
		t.Errorf("clean: cases %q\n%s", names(cs), clean)
	}

	dirty := render(&verify.Audits{Tail: &verify.TailAudit{Checked: 6, Findings: []verify.TailFinding{finding("req-0", 3), finding("req-0", 4), finding("req-1", 3)}}})
	cs = suiteCases(t, dirty, "tail audit")
	if !slices.Equal(names(cs), want) || cs[0].Failure == nil || cs[1].Failure != nil || cs[2].Failure == nil {
		t.Errorf("with findings: cases %q\n%s", names(cs), dirty)
	}
	if !strings.Contains(string(dirty), "2 region(s) hold non-zero bytes") || !strings.Contains(string(dirty), "position 3 block 10") || !strings.Contains(string(dirty), "position 4 block 11") {
		t.Errorf("req-0 group 0's failure does not list both findings:\n%s", dirty)
	}

	other := render(&verify.Audits{Tail: &verify.TailAudit{Findings: []verify.TailFinding{finding("req-9", 1)}}})
	cs = suiteCases(t, other, "tail audit")
	if got := names(cs); !slices.Equal(got, append(slices.Clone(want), "request req-9 group 0")) || cs[3].Failure == nil {
		t.Errorf("a finding outside the comparison: cases %q", got)
	}
}

// TestStoredJUnitStable: the stored-checksum suite too has one case per
// request and group; an audit with nothing to compare adds an unverified
// case.
func TestStoredJUnitStable(t *testing.T) {
	rank := func(stored uint64, has bool) []*verify.StoredRank {
		return []*verify.StoredRank{{Path: "r", Skipped: map[int]string{}, Blocks: []verify.StoredBlock{
			{Request: "req-1", Group: 0, Position: 0, Block: 3, Hash: "aa", Value: 1, Stored: stored, HasStored: has},
		}}}
	}
	for _, c := range []struct {
		name           string
		ranks          []*verify.StoredRank
		failed, errors int
		cases          int
	}{
		{"match", rank(1, true), 0, 0, 3},
		{"differs", rank(2, true), 1, 0, 3},
		{"nothing stored", rank(0, false), 0, 1, 4},
	} {
		var b bytes.Buffer
		if err := RenderDiffAudits(&b, auditDiff(), &verify.Audits{Stored: c.ranks}, FormatJUnit, DiffOptions{}); err != nil {
			t.Fatal(err)
		}
		cs := suiteCases(t, b.Bytes(), "stored checksums")
		failed, errs := 0, 0
		for _, x := range cs {
			if x.Failure != nil {
				failed++
				if x.Name != "request req-1 group 0" {
					t.Errorf("%s: failure on %q", c.name, x.Name)
				}
			}
			if x.Error != nil {
				errs++
			}
		}
		if len(cs) != c.cases || failed != c.failed || errs != c.errors {
			t.Errorf("%s: %d cases, %d failed, %d errors; want %d, %d, %d\n%s", c.name, len(cs), failed, errs, c.cases, c.failed, c.errors, b.String())
		}
	}
}

// TestCampaignJUnitTime: the campaign's elapsed time is the report's.
func TestCampaignJUnitTime(t *testing.T) {
	var b bytes.Buffer
	r := &inject.CampaignResult{Elapsed: 2250 * time.Millisecond, Pass: true,
		Kinds: []inject.KindResult{{Kind: "bit-flip", Detector: "checksum", Trials: 2, Detected: 2, Localised: 2}},
		Pairs: []inject.PairResult{{Name: "tiny", Verified: true}}}
	if err := WriteCampaignJUnit(&b, r); err != nil {
		t.Fatal(err)
	}
	everyElementTimed(t, b.String())
	if !regexp.MustCompile(`<testsuites name="kvaudit campaign"[^>]* time="2.250">`).MatchString(b.String()) {
		t.Errorf("root element:\n%s", b.String())
	}
}

// TestWriteFile: a report lands whole or not at all; a failed write keeps
// the earlier report and leaves no temporary file.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "kvaudit-junit.xml")
	if err := WriteFile(p, func(w io.Writer) error { _, err := io.WriteString(w, "first\n"); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFile(p, func(w io.Writer) error {
		io.WriteString(w, "half of a sec")
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), p) {
		t.Errorf("error %v: want it to wrap the write's and name %s", err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != "first\n" {
		t.Errorf("after a failed write the report holds %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left: %v", entries)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v", st.Mode(), err)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x.xml"), func(io.Writer) error { return nil }); err == nil {
		t.Error("a report in a missing directory was written")
	}
}
