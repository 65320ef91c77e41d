package transfer_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/transfer"
)

// TestCleanPullSaysNothing: the correct pull of every geometry, planned
// either way, leaves no note and no pairing note: nothing was left out,
// nothing read back, no log stranded.
func TestCleanPullSaysNothing(t *testing.T) {
	for _, g := range append(geometries(), vllmGeometries()...) {
		prod, cons, logs := pull(t, t.TempDir(), g)
		res := audit(t, logs, prod, cons)
		if res.Verdict != transfer.Clean || len(res.Notes) > 0 || len(res.Pairing) > 0 || len(res.Unresolved) > 0 {
			t.Fatalf("%s: verdict %s, notes %q, pairing %q, unresolved %q", g.name, res.Verdict, res.Notes, res.Pairing, res.Unresolved)
		}
	}
}

// TestRequestNamedByProducerID: a transfer naming the consumer's request
// by the producer's id of it (the manifest's producer_id) is audited as
// that request's, as one naming it by its own id is.
func TestRequestNamedByProducerID(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	for i := range cons[0].Manifest.Requests {
		r := &cons[0].Manifest.Requests[i]
		r.ProducerID = "prefill-" + r.ID
		prod[0].Manifest.Request(r.ID).ID = r.ProducerID
	}
	if res := audit(t, logs, prod, cons); res.Verdict != transfer.Clean || len(res.Requests) != 2 {
		t.Fatalf("by the consumer's id: verdict %s, %d requests %v", res.Verdict, len(res.Requests), invariants(res))
	}
	n := 0
	for i := range recs {
		if recs[i].Op == nixl.OpXfer {
			recs[i].Request = "prefill-" + recs[i].Request
			n++
		}
	}
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if res.Verdict != transfer.Clean || len(res.Requests) != 2 || len(res.Notes) > 0 {
		t.Fatalf("by the producer's id: verdict %s, requests %+v, notes %q", res.Verdict, res.Requests, res.Notes)
	}
	got := 0
	for _, r := range res.Requests {
		if !strings.HasPrefix(r.ID, "req-") {
			t.Fatalf("request %q: want the consumer's id", r.ID)
		}
		got += len(r.Transfers)
	}
	if got != n {
		t.Fatalf("%d transfers audited, the log has %d", got, n)
	}
	// A producer id no consumer request pairs with is not dumped.
	recs[firstXfer(recs)].Request = "prefill-req-9"
	rewrite(t, logs[0], h, recs)
	res = audit(t, logs, prod, cons)
	if !slices.ContainsFunc(res.Notes, func(n string) bool {
		return strings.Contains(n, "1 transfer(s) of requests the consumer's dumps do not hold")
	}) {
		t.Fatalf("unknown producer id: notes %q", res.Notes)
	}
}
