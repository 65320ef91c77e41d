package verify

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/kvaudit/kvaudit/side"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

func storedRank(blocks ...StoredBlock) *StoredRank {
	return &StoredRank{Path: "r", Blocks: blocks}
}

// TestVerdictAndSummary: the combined verdict of a comparison and its
// audits, written out case by case.
func TestVerdictAndSummary(t *testing.T) {
	diff := func(v Verdict, ids ...string) *DiffResult {
		d := &DiffResult{Verdict: v}
		for _, id := range ids {
			d.Requests = append(d.Requests, &RequestVerdict{ID: id, Verdict: v})
		}
		return d
	}
	match := StoredBlock{Request: "r", Value: 1, Stored: 1, HasStored: true}
	differs := StoredBlock{Request: "r", Value: 1, Stored: 2, HasStored: true}
	notStored := StoredBlock{Request: "r", Value: 1}
	finding := &TailAudit{Findings: []TailFinding{{Request: "req-1", Group: 0, Position: 3}}}
	for _, c := range []struct {
		name    string
		res     Result
		verdict Verdict
		summary string
	}{
		{"verified", Result{Diff: diff(Verified, "a")}, Verified, ""},
		{"mismatch", Result{Diff: diff(Mismatch, "a", "b")}, Mismatch, "mismatch: request a, b"},
		{"unverified", Result{Diff: diff(Unverified, "a")}, Unverified, "unverified: request a"},
		{"no request", Result{Diff: diff(Unverified)}, Unverified, "unverified: the consumer holds no request"},
		{"tail finding", Result{Diff: diff(Verified, "a"), Audits: &Audits{Tail: finding}}, Mismatch,
			"mismatch: tail audit: non-zero bytes past the transferred range in 1 block over 1 layer (request req-1 group 0 position 3, ...)"},
		{"tail clean", Result{Diff: diff(Verified, "a"), Audits: &Audits{Tail: &TailAudit{Checked: 4}}}, Verified, ""},
		{"stored differs", Result{Audits: &Audits{Stored: []*StoredRank{storedRank(match), storedRank(differs)}}}, Mismatch,
			"mismatch: stored checksums: some block differs from the checksum stored with it"},
		{"stored match", Result{Audits: &Audits{Stored: []*StoredRank{storedRank(match, notStored)}}}, Verified, ""},
		{"nothing stored", Result{Audits: &Audits{Stored: []*StoredRank{storedRank(notStored)}}}, Unverified,
			"unverified: stored checksums: no request lists stored_checksums for a full block"},
		{"unverified load, nothing stored", Result{Diff: diff(Unverified, "a"), Audits: &Audits{Stored: []*StoredRank{}}}, Unverified,
			"unverified: request a"},
		{"mismatch and finding", Result{Diff: diff(Mismatch, "a"), Audits: &Audits{Tail: finding}}, Mismatch,
			"mismatch: request a; tail audit: non-zero bytes past the transferred range in 1 block over 1 layer (request req-1 group 0 position 3, ...)"},
	} {
		if v := c.res.Verdict(); v != c.verdict {
			t.Errorf("%s: verdict %s, want %s", c.name, v, c.verdict)
		}
		if s := c.res.Summary(); s != c.summary {
			t.Errorf("%s: summary %q, want %q", c.name, s, c.summary)
		}
	}
}

// TestRepeatedVerdict: repeated blocks found beside a verified
// comparison make it a mismatch, and the summary names the first.
func TestRepeatedVerdict(t *testing.T) {
	want := []side.RepeatedBlock{
		{Side: "consumer", Request: "a", Group: 0, Block: 5, Positions: []int{0, 1}, Rank: layout.Rank{TP: 1}},
		{Side: "consumer", Request: "c", Group: 0, Block: 11, Positions: []int{0, 2, 4}, Rank: layout.Rank{TP: 1}},
		{Side: "consumer", Request: "c", Group: 1, Block: 14, Positions: []int{0, 1}, Rank: layout.Rank{TP: 1}},
	}
	res := &Result{Diff: &DiffResult{Verdict: Verified}, Audits: &Audits{Repeated: want}}
	if res.Verdict() != Mismatch || res.Summary() != "mismatch: repeated blocks: "+want[0].String()+" (and 2 more)" {
		t.Errorf("verdict %s, summary %q", res.Verdict(), res.Summary())
	}
}

// TestCompareErrors: a payload as the consumer, a bare payload for one of
// several requests, audits of records.
func TestCompareErrors(t *testing.T) {
	dir := t.TempDir()
	paths, err := synth.Write(dir, synth.Config{Preset: "llama", Requests: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sp := side.Input{Paths: paths}
	if _, err := Compare(ctx, sp, side.Input{Payload: []byte("AAAAAAAA")}, CompareOptions{}); err == nil || !strings.Contains(err.Error(), "consumer must be dumps or records") {
		t.Errorf("payload as consumer: %v", err)
	}
	var bare *BarePayloadError
	if _, err := Compare(ctx, side.Input{Payload: []byte("AAAAAAAA")}, sp, CompareOptions{}); !errors.As(err, &bare) || bare.Requests != 2 {
		t.Errorf("bare payload, 2 requests: %v", err)
	}
	cRes, err := side.Checksum(ctx, side.Input{Paths: paths}, side.ChecksumOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	c := cRes.Checks
	recs, err := checksum.Records(ctx, mustOpen(t, paths).Dumps, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recFile := filepath.Join(dir, "rank.record.json")
	b, err := wire.MarshalRecord(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, recFile, b)
	if _, err := Compare(ctx, sp, side.Input{Paths: []string{recFile}}, CompareOptions{AuditTail: true}); !errors.Is(err, ErrAuditRecords) {
		t.Errorf("tail audit of records: %v", err)
	}
	if _, err := CheckStored(ctx, side.Input{Paths: []string{recFile}}, StoredOptions{}); !errors.Is(err, ErrStoredRecords) {
		t.Errorf("stored check of records: %v", err)
	}
	// Records and dumps of the same side verify against each other.
	res, err := Compare(ctx, sp, side.Input{Paths: []string{recFile}}, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict() != Verified || len(res.Diff.Requests) != len(c.Requests) {
		t.Errorf("dumps vs their records: %s, %d requests, want verified, %d", res.Verdict(), len(res.Diff.Requests), len(c.Requests))
	}
	// The same through kv_transfer_params for one named request.
	p, err := side.NewPayload(c, c.Requests[1], wire.FormNested)
	if err != nil {
		t.Fatal(err)
	}
	text, err := wire.EncodePayloadBase64(p)
	if err != nil {
		t.Fatal(err)
	}
	params, _ := json.Marshal(map[string]string{"kv_checksums": text})
	res, err = Compare(ctx, side.Input{Payload: params}, sp, CompareOptions{Requests: []string{c.Requests[1].ID}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict() != Verified || len(res.Diff.Requests) != 1 || res.Diff.Requests[0].ID != c.Requests[1].ID {
		t.Errorf("payload of %s: %s %+v", c.Requests[1].ID, res.Verdict(), res.Diff.Requests)
	}
	// Another request's payload mismatches.
	res, err = Compare(ctx, side.Input{Payload: params}, sp, CompareOptions{Requests: []string{c.Requests[0].ID}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict() != Mismatch {
		t.Errorf("payload of %s against %s: %s, want mismatch", c.Requests[1].ID, c.Requests[0].ID, res.Verdict())
	}
}

func mustOpen(t *testing.T, paths []string) *side.Source {
	t.Helper()
	s, err := side.Open(side.Input{Paths: paths})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
