package verify

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/layout/synth"
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
			"mismatch: tail audit: 1 block(s) hold non-zero bytes past the transferred range (request req-1 group 0 position 3, ...)"},
		{"tail clean", Result{Diff: diff(Verified, "a"), Audits: &Audits{Tail: &TailAudit{Checked: 4}}}, Verified, ""},
		{"stored differs", Result{Audits: &Audits{Stored: []*StoredRank{storedRank(match), storedRank(differs)}}}, Mismatch,
			"mismatch: stored checksums: some block differs from the checksum stored with it"},
		{"stored match", Result{Audits: &Audits{Stored: []*StoredRank{storedRank(match, notStored)}}}, Verified, ""},
		{"nothing stored", Result{Audits: &Audits{Stored: []*StoredRank{storedRank(notStored)}}}, Unverified,
			"unverified: stored checksums: no request lists stored_checksums for a full block"},
		{"unverified load, nothing stored", Result{Diff: diff(Unverified, "a"), Audits: &Audits{Stored: []*StoredRank{}}}, Unverified,
			"unverified: request a"},
		{"mismatch and finding", Result{Diff: diff(Mismatch, "a"), Audits: &Audits{Tail: finding}}, Mismatch,
			"mismatch: request a; tail audit: 1 block(s) hold non-zero bytes past the transferred range (request req-1 group 0 position 3, ...)"},
	} {
		if v := c.res.Verdict(); v != c.verdict {
			t.Errorf("%s: verdict %s, want %s", c.name, v, c.verdict)
		}
		if s := c.res.Summary(); s != c.summary {
			t.Errorf("%s: summary %q, want %q", c.name, s, c.summary)
		}
	}
}

// TestOpenInput: an input names a side one way; payload bytes are read
// as what a producer sent, whatever their form.
func TestOpenInput(t *testing.T) {
	for _, in := range []Input{{}, {Payload: []byte("x"), Arg: "y"}, {Arg: "y", Paths: []string{"z"}}} {
		if _, err := Open(in); err == nil {
			t.Errorf("Open(%+v): no error", in)
		}
	}
	for _, c := range []struct {
		payload string
		bare    bool
		ids     []string
		reason  string
	}{
		{`{"kv_checksums": null}`, true, nil, ReasonNoChecksums},
		{`{"do_remote_prefill": true}`, true, nil, ReasonNoChecksums},
		{`{"kv_checksums": 7}`, true, nil, ReasonInvalidChecksums},
		{`{"req-1": "AAAA", "req-0": "AAAA"}`, false, []string{"req-0", "req-1"}, ""},
	} {
		s, err := Open(Input{Payload: []byte(c.payload)})
		if err != nil {
			t.Fatalf("%s: %v", c.payload, err)
		}
		if !s.payload || (s.bare != nil) != c.bare {
			t.Errorf("%s: payload %v, bare %v", c.payload, s.payload, s.bare != nil)
		}
		var ids []string
		for _, r := range s.byID {
			ids = append(ids, r.ID)
		}
		if strings.Join(ids, ",") != strings.Join(c.ids, ",") {
			t.Errorf("%s: ids %v, want %v", c.payload, ids, c.ids)
		}
		if c.reason != "" && (s.bare == nil || !strings.Contains(strings.Join(s.bare.Unverified, " "), c.reason)) {
			t.Errorf("%s: bare request %+v, want reason %q", c.payload, s.bare, c.reason)
		}
	}
	// As an argument: kv_transfer_params JSON, base64 text of a payload
	// and text that cannot be a file name (too long, a NUL byte) are
	// payloads; a name meant as a path is a missing path, anything else
	// neither a path nor payload text.
	long := `{"remote_block_ids": [` + strings.Repeat("1234, ", 60) + `5], "kv_checksums": null}`
	for arg, want := range map[string]string{
		`{"kv_checksums": null}`: "payload", "kgGTKAGRlQDPeKyizW3ZIl4A": "payload", long: "payload",
		strings.Repeat("A", 300): "payload", "kgGT\x00KAGRlQ": "payload",
		"kOVidmVyaWZpZWQ=": "neither", "nope": "neither", "producerdumps": "neither",
		filepath.Join(t.TempDir(), "missing"): "missing", "missing.safetensors": "missing",
	} {
		s, err := Open(Input{Arg: arg})
		var nf *layout.NotFoundError
		var np *NotPayloadError
		switch {
		case want == "payload" && (err != nil || !s.payload):
			t.Errorf("Open(Arg %q): %v, want a payload side", arg, err)
		case want == "missing" && (!errors.As(err, &nf) || nf.Path != arg || !errors.Is(err, fs.ErrNotExist)):
			t.Errorf("Open(Arg %q): %v, want a *layout.NotFoundError", arg, err)
		case want == "neither" && (!errors.As(err, &np) || np.Arg != arg):
			t.Errorf("Open(Arg %q): %v, want a *NotPayloadError", arg, err)
		}
	}
	if len(long) <= 255 {
		t.Fatalf("the long kv_transfer_params is %d bytes, want more than a file name may have", len(long))
	}
	if _, err := Open(Input{Payload: []byte(`{"format": "kvaudit-diff/1"}`)}); err == nil || !strings.Contains(err.Error(), "kvaudit-diff/1 output") {
		t.Errorf("a kvaudit report as a payload: %v", err)
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
	side := Input{Paths: paths}
	if _, err := Compare(ctx, side, Input{Payload: []byte("AAAAAAAA")}, CompareOptions{}); err == nil || !strings.Contains(err.Error(), "consumer must be dumps or records") {
		t.Errorf("payload as consumer: %v", err)
	}
	var bare *BarePayloadError
	if _, err := Compare(ctx, Input{Payload: []byte("AAAAAAAA")}, side, CompareOptions{}); !errors.As(err, &bare) || bare.Requests != 2 {
		t.Errorf("bare payload, 2 requests: %v", err)
	}
	cRes, err := Checksum(ctx, Input{Paths: paths}, ChecksumOptions{Partial: true})
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
	if _, err := Compare(ctx, side, Input{Paths: []string{recFile}}, CompareOptions{AuditTail: true}); !errors.Is(err, ErrAuditRecords) {
		t.Errorf("tail audit of records: %v", err)
	}
	if _, err := CheckStored(ctx, Input{Paths: []string{recFile}}, StoredOptions{}); !errors.Is(err, ErrStoredRecords) {
		t.Errorf("stored check of records: %v", err)
	}
	// Records and dumps of the same side verify against each other.
	res, err := Compare(ctx, side, Input{Paths: []string{recFile}}, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict() != Verified || len(res.Diff.Requests) != len(c.Requests) {
		t.Errorf("dumps vs their records: %s, %d requests, want verified, %d", res.Verdict(), len(res.Diff.Requests), len(c.Requests))
	}
	// The same through kv_transfer_params for one named request.
	p, err := NewPayload(c, c.Requests[1], wire.FormNested)
	if err != nil {
		t.Fatal(err)
	}
	text, err := wire.EncodePayloadBase64(p)
	if err != nil {
		t.Fatal(err)
	}
	params, _ := json.Marshal(map[string]string{"kv_checksums": text})
	res, err = Compare(ctx, Input{Payload: params}, side, CompareOptions{Requests: []string{c.Requests[1].ID}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict() != Verified || len(res.Diff.Requests) != 1 || res.Diff.Requests[0].ID != c.Requests[1].ID {
		t.Errorf("payload of %s: %s %+v", c.Requests[1].ID, res.Verdict(), res.Diff.Requests)
	}
	// Another request's payload mismatches.
	res, err = Compare(ctx, Input{Payload: params}, side, CompareOptions{Requests: []string{c.Requests[0].ID}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict() != Mismatch {
		t.Errorf("payload of %s against %s: %s, want mismatch", c.Requests[1].ID, c.Requests[0].ID, res.Verdict())
	}
}

func mustOpen(t *testing.T, paths []string) *Source {
	t.Helper()
	s, err := Open(Input{Paths: paths})
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
