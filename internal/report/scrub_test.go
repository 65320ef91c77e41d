package report

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/scrub"
)

// scrubResult scrubs a small lmcache-fs store with one verified file, one
// flipped and one without a trailer.
func scrubResult(t *testing.T) *scrub.Result {
	t.Helper()
	dir := t.TempDir()
	blocks := []scrub.Block{
		{Model: "org/<m>", TP: 1, Hash: []byte{1}, Data: []byte("aaaaaaaa")},
		{Model: "org/<m>", TP: 1, Hash: []byte{2}, Data: []byte("bbbbbbbb")},
		{Model: "org/<m>", TP: 1, Hash: []byte{3}, Data: []byte("cccccccc")},
	}
	files, _, err := scrub.WriteStore(dir, scrub.LMCacheFS, blocks)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(files[1])
	b[0] ^= 1
	os.WriteFile(files[1], b, 0o644)
	os.WriteFile(files[2], blocks[2].Data, 0o644) // no trailer
	res, err := scrub.Scrub(context.Background(), []string{dir}, scrub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestScrubJSONJUnitHTML(t *testing.T) {
	res := scrubResult(t)
	var js bytes.Buffer
	if err := RenderScrub(&js, res, FormatJSON, Style{}, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(js.String(), "{\n  \"format\": \"kvaudit-scrub/1\",\n  \"verdict\": \"mismatch\"") {
		t.Errorf("json starts %.80q", js.String())
	}
	var doc struct {
		Verified, Mismatch, Unverified int
		Entries                        []scrub.Entry
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || doc.Verified != 1 || doc.Mismatch != 1 || doc.Unverified != 1 || len(doc.Entries) != 3 {
		t.Errorf("json counts %+v (%v)", doc, err)
	}

	var ju bytes.Buffer
	if err := RenderScrub(&ju, res, FormatJUnit, Style{}, time.Second); err != nil {
		t.Fatal(err)
	}
	var suites junitSuites
	if err := xml.Unmarshal(ju.Bytes(), &suites); err != nil {
		t.Fatal(err)
	}
	if suites.Tests != 3 || suites.Failures != 1 || suites.Skipped != 1 || len(suites.Suites) != 1 {
		t.Errorf("junit: %d tests, %d failures, %d skipped, %d suites", suites.Tests, suites.Failures, suites.Skipped, len(suites.Suites))
	}
	for _, c := range suites.Suites[0].Cases {
		if c.Failure != nil && (c.Failure.Type != scrub.ProblemChecksum || !strings.Contains(c.Failure.Text, "expected")) {
			t.Errorf("failure %+v", c.Failure)
		}
	}

	var tb bytes.Buffer
	if err := RenderScrub(&tb, res, FormatTable, Style{}, 0); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(tb.String(), "\t0\t16\tmismatch\tchecksum\t") + strings.Count(tb.String(), "\t0\t8\tunverified\tno-checksum\t"); got != 2 {
		t.Errorf("the table lists %d entries not verified, want 2:\n%s", got, tb.String())
	}

	var h bytes.Buffer
	if err := RenderScrubHTML(&h, res, HTMLInfo{Command: "kvaudit scrub <x>", Exit: 1}); err != nil {
		t.Fatal(err)
	}
	page := h.String()
	if n := strings.Count(page, `<div class="cell `); n != 3 {
		t.Errorf("%d cells in the map, want 3", n)
	}
	for _, c := range []string{`class="cell good"`, `class="cell bad"`, `class="cell warn"`} {
		if !strings.Contains(page, c) {
			t.Errorf("no %s", c)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "org/<m>") || strings.Contains(page, "scrub <x>") {
		t.Error("the page has a script or an unescaped name")
	}
	if !strings.Contains(page, filepath.Base(res.Dirs[0].Path)) {
		t.Error("the page does not name the directory")
	}
}
