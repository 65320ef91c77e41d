package transfer_test

import (
	"context"
	"fmt"
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

// outsideDesc adds to the prepared list handle of recs a descriptor of
// the length of its first, 1 MiB past every descriptor of the log (so
// outside every cache), and returns its index and address.
func outsideDesc(recs []nixl.Record, handle int) (id int, addr uint64) {
	for _, r := range recs {
		if r.Op == nixl.OpDList {
			for _, d := range r.Descs {
				addr = max(addr, d.Addr+d.Len+1<<20)
			}
		}
	}
	for i := range recs {
		if r := &recs[i]; r.Op == nixl.OpDList && r.Handle == handle {
			d := r.Descs[0]
			d.Addr = addr
			r.Descs = append(r.Descs, d)
			return len(r.Descs) - 1, addr
		}
	}
	return -1, 0
}

// TestPairOutsideEveryCache: a pair one side of which lies outside every
// cache is a confined finding of that side, of the descriptor's bytes; it
// is placed at its destination cells, and, with none, in no block, at no
// head or token (before, heads 0-0 and tokens 0-0: a place it is not).
// The pairs of the llama geometry are one layer's K or V of one block:
// pair 0 of req-0's transfer is layer 0's K at position 0, the 8 KV heads
// of the preset and the block's 16 tokens.
func TestPairOutsideEveryCache(t *testing.T) {
	none := [2]int{-1, -1}
	for _, side := range []string{"local", "remote", "local, remote released"} {
		t.Run(side, func(t *testing.T) {
			prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
			h, recs := records(t, logs[0])
			x := firstXfer(recs)
			handle, ids := recs[x].Local, recs[x].LocalIDs
			if side == "remote" {
				handle, ids = recs[x].Remote, recs[x].RemoteIDs
			}
			id, addr := outsideDesc(recs, handle)
			ids[0] = id
			free := -1
			if side == "local, remote released" {
				free, recs[x].RemoteIDs[0] = freeBlockDesc(t, prod[0], recs, recs[x].Remote)
			}
			rewrite(t, logs[0], h, recs)
			res := audit(t, logs, prod, cons)
			var got []transfer.Finding
			for _, f := range res.Findings {
				if f.Descriptor == 0 {
					f.Log, f.Line = "", 0
					got = append(got, f)
				}
			}
			const bytes = 16 * 8 * 128 * 2 // tokens, heads, head size, bf16: one block's K of one layer
			base := transfer.Finding{Invariant: transfer.Confined, Request: "req-0", Transfer: recs[x].ID, Descriptor: 0, Rank: layout.Rank{},
				Bytes: bytes}
			var want []transfer.Finding
			if side == "remote" {
				f := base
				f.Side, f.Group, f.Position, f.Block = "remote", 0, 0, cons[0].Manifest.Request("req-0").BlockTable["0"][0]
				f.LayerName, f.Part, f.Heads, f.Tokens = "model.layers.0.self_attn.attn", "K", [2]int{0, 7}, [2]int{0, 15}
				f.Message = fmt.Sprintf("transfer %d descriptor 0 reads %d bytes at %#x.. outside every cache of the producer's rank pp 0 tp 0", recs[x].ID, bytes, addr)
				want = append(want, f)
			} else {
				f := base
				f.Side, f.Group, f.Position, f.Block, f.Heads, f.Tokens = "local", -1, -1, -1, none, none
				f.Message = fmt.Sprintf("transfer %d descriptor 0 writes %d bytes at %#x.. outside every cache of the consumer's rank pp 0 tp 0", recs[x].ID, bytes, addr)
				want = append(want, f)
			}
			if free >= 0 {
				// Read from a block no producer request holds, and
				// written nowhere: the read is placed in no block.
				f := base
				f.Side, f.Group, f.Position, f.Block, f.Heads, f.Tokens = "remote", -1, -1, -1, none, none
				f.LayerName = "model.layers.0.self_attn.attn"
				f.Source = &transfer.Source{Agent: "producer-pp0-tp0", Block: free, Position: -1, Expected: "req-0"}
				f.Message = fmt.Sprintf("transfer %d read producer block %d (rank pp 0 tp 0), which no request of the producer holds (a released block), not request req-0's", recs[x].ID, free)
				want = append(want, f)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("findings of descriptor 0:\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}
