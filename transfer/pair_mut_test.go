package transfer_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
)

// TestSkippedTransferLeavesNothing: a transfer the audit skips (of a
// request not among Options.Requests, or, its record naming no request,
// of no dumped request) leaves no finding, even where its lists have
// different lengths, and the transfer after it is audited as its own.
// A skip can only come at a transfer's first pair (pair resolves the
// request there), so no delivery or flag of a skipped transfer is left
// to point at the index the next transfer takes; the lists' finding,
// though, was added before the pairs, and was left (fixed).
func TestSkippedTransferLeavesNothing(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, orig := records(t, logs[0])
	x := firstXfer(orig)
	y := nextXfer(orig, x)
	if orig[x].Request != "req-0" || orig[y].Request != "req-1" {
		t.Fatalf("transfers of %q and %q, want req-0 and req-1", orig[x].Request, orig[y].Request)
	}
	var bytes uint64 // what req-1's transfer moves: its local descriptors' lengths
	for _, r := range orig {
		if r.Op == nixl.OpDList && r.Handle == orig[y].Local {
			for _, i := range orig[y].LocalIDs {
				bytes += r.Descs[i].Len
			}
		}
	}
	next := transfer.RequestSummary{ID: "req-1", ProducerID: "req-1", Rank: layout.Rank{}, Transfers: []int{orig[y].ID},
		Pairs: len(orig[y].LocalIDs), Bytes: bytes, Findings: map[string]int{}}
	m := cons[0].Manifest.Request("req-0")

	// Only req-1 asked for: req-0's transfer (one local descriptor fewer)
	// is not audited at all.
	recs := slices.Clone(orig)
	recs[x].LocalIDs = slices.Clone(recs[x].LocalIDs[:len(recs[x].LocalIDs)-1])
	rewrite(t, logs[0], h, recs)
	res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{Requests: []string{"req-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != transfer.Clean || len(res.Findings) != 0 || len(res.Requests) != 1 {
		t.Fatalf("only req-1: verdict %s, findings %+v, requests %+v", res.Verdict, res.Findings, res.Requests)
	}
	if !reflect.DeepEqual(res.Requests[0], next) {
		t.Fatalf("only req-1: request %+v, want %+v", res.Requests[0], next)
	}

	// The record names no request and its first local descriptor is in a
	// block no consumer request holds: a transfer of a request the dumps
	// do not hold. req-0 is then served by no transfer.
	free, id := freeBlockDesc(t, cons[0], recs, recs[x].Local)
	recs[x].Request, recs[x].HasRequest = "", false
	recs[x].LocalIDs[0] = id
	rewrite(t, logs[0], h, recs)
	res = audit(t, logs, prod, cons)
	want := transfer.Finding{Invariant: transfer.Covered, Request: "req-0", Transfer: transfer.NoTransfer, Descriptor: -1, Group: -1,
		Position: -1, Block: -1, Rank: layout.Rank{}, Heads: [2]int{-1, -1}, Tokens: [2]int{m.NumLocalComputedTokens, m.NumTokens - 1}}
	if len(res.Findings) != 1 {
		t.Fatalf("no request, block %d: findings %+v", free, res.Findings)
	}
	f := res.Findings[0]
	f.Message = ""
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("no request, block %d: finding %+v, want %+v", free, res.Findings[0], want)
	}
	note := "1 transfer(s) of requests the consumer's dumps do not hold"
	if !hasNote(res.Notes, note) || len(res.Requests) != 2 || res.Requests[1].ID != "req-0" || len(res.Requests[1].Transfers) != 0 {
		t.Fatalf("no request: notes %q (want %q), requests %+v", res.Notes, note, res.Requests)
	}
	if !reflect.DeepEqual(res.Requests[0], next) {
		t.Fatalf("no request: request %+v, want %+v", res.Requests[0], next)
	}
}
