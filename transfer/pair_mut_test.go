package transfer_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/picture"
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
	local := prepared(t, orig, orig[y].Local)
	for _, i := range orig[y].LocalIDs {
		bytes += local[i].Len
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

// TestConvertedChunkFindings: where the consumer converts what it
// receives (vLLM's pull of 16-token producer blocks into larger consumer
// blocks, §12), a pair's finding is placed at its chunk: the consumer
// page's layer and part, every head of the rank (the llama preset's 8),
// and the chunk's 16 tokens at the block's position. vLLM's connector
// lists a request's pairs layer by layer, K then V, then chunk by chunk
// (a producer block, or kernel row), so pair d of a request pulling n
// chunks a page is layer d/(2n), part (d/n)%2, chunk d%n.
func TestConvertedChunkFindings(t *testing.T) {
	// chunked makes the findings of a request pulling n chunks a page
	// into its block at cpos, from the producer's blocks of per chunks
	// from position ppos0 on.
	chunked := func(g geometry, n, per int, cpos, ppos0 int, prod, cons []*layout.Dump) func(inv string, d, srcChunk int) transfer.Finding {
		ctable, ptable := cons[0].Manifest.Request("req-0").BlockTable["0"], prod[0].Manifest.Request("req-0").BlockTable["0"]
		S := g.c.BlockSize
		return func(inv string, d, srcChunk int) transfer.Finding {
			layer, part, c := d/(2*n), "KV"[(d/n)%2:(d/n)%2+1], d%n
			tok := func(c int) [2]int { return [2]int{cpos*S + 16*c, cpos*S + 16*c + 15} }
			f := transfer.Finding{Invariant: inv, Request: "req-0", Transfer: 1, Descriptor: d, Rank: layout.Rank{}, Group: 0,
				Position: cpos, Block: ctable[cpos], Layer: layer, LayerName: fmt.Sprintf("model.layers.%d.self_attn.attn", layer),
				Part: part, Heads: [2]int{0, 7}, Tokens: tok(c), Bytes: 16 * 8 * 128 * 2,
				Source: &transfer.Source{Agent: "producer-pp0-tp0", Block: ptable[ppos0+srcChunk/per], Request: "req-0", Position: ppos0 + srcChunk/per, Expected: "req-0"}}
			st := tok(srcChunk)
			f.Message = fmt.Sprintf("transfer 1 descriptor %d: the local bytes hold layer %d %s heads 0-7 tokens %d-%d, the remote bytes layer %d %s heads 0-7 tokens %d-%d (compared per chunk of tokens: the consumer converts what it receives)",
				d, layer, part, f.Tokens[0], f.Tokens[1], layer, part, st[0], st[1])
			return f
		}
	}
	check := func(t *testing.T, g geometry, edit func(recs []nixl.Record, x int), want func(x int, recs []nixl.Record) []transfer.Finding) {
		t.Helper()
		prod, cons, logs := pull(t, t.TempDir(), g)
		h, recs := records(t, logs[0])
		x := firstXfer(recs)
		if recs[x].ID != 1 || recs[x].Request != "req-0" {
			t.Fatalf("first transfer %d of %s, want 1 of req-0", recs[x].ID, recs[x].Request)
		}
		edit(recs, x)
		rewrite(t, logs[0], h, recs)
		res := audit(t, logs, prod, cons)
		var got []transfer.Finding
		for _, f := range res.Findings {
			if f.Descriptor >= 0 && f.Transfer == 1 {
				f.Log, f.Line = "", 0
				got = append(got, f)
			}
		}
		if w := want(x, recs); !reflect.DeepEqual(got, w) {
			t.Fatalf("findings\n%+v\nwant\n%+v", got, w)
		}
	}
	swap := func(i, j int) func(recs []nixl.Record, x int) {
		return func(recs []nixl.Record, x int) {
			ids := recs[x].RemoteIDs
			ids[i], ids[j] = ids[j], ids[i]
		}
	}

	// 40 tokens from blocks of 16 into one block of 64: 3 chunks a page,
	// 24 pairs; the producer's blocks at positions 0-2.
	named := func(name string) geometry {
		gs := vllmGeometries()
		return gs[slices.IndexFunc(gs, func(g geometry) bool { return g.name == name })]
	}
	g := named("16-to-64")
	prod, cons := sides(t, g)
	f := chunked(g, 3, 1, 0, 0, prod, cons)
	t.Run(g.name+"/K", func(t *testing.T) {
		check(t, g, swap(0, 1), func(int, []nixl.Record) []transfer.Finding {
			return []transfer.Finding{f(transfer.Aligned, 0, 1), f(transfer.Aligned, 1, 0)}
		})
	})
	t.Run(g.name+"/V", func(t *testing.T) {
		check(t, g, swap(22, 23), func(int, []nixl.Record) []transfer.Finding {
			return []transfer.Finding{f(transfer.Aligned, 22, 2), f(transfer.Aligned, 23, 1)}
		})
	})
	// req-0's pair 0 written into req-1's block (at position 0): confined,
	// at the chunk, of no position of req-0, the tokens those read (and
	// written twice, req-1's finding, not checked here).
	t.Run(g.name+"/co-resident", func(t *testing.T) {
		check(t, g, func(recs []nixl.Record, x int) {
			recs[x].LocalIDs[0] = recs[nextXfer(recs, x)].LocalIDs[0]
		}, func(x int, recs []nixl.Record) []transfer.Finding {
			other := cons[0].Manifest.Request("req-1").BlockTable["0"][0]
			w := f(transfer.Confined, 0, 0)
			w.Side, w.Position, w.Block, w.Source = "local", -1, other, nil
			w.Owner = &transfer.Owner{Request: "req-1", Position: 0, Block: other}
			w.Message = fmt.Sprintf("transfer 1 descriptor 0 wrote layer 0 K heads 0-7 tokens 0-15 into block %d, which request req-1 holds at position 0, not a block request req-0 loads", other)
			return []transfer.Finding{w}
		})
	})

	// 64 tokens, the first 32 a prefix hit, into blocks of 32: position 1
	// is pulled, 2 chunks a page, from the producer's positions 2 and 3.
	g = named("prefix-hit-ratio")
	prod, cons = sides(t, g)
	f = chunked(g, 2, 1, 1, 2, prod, cons)
	t.Run(g.name, func(t *testing.T) {
		check(t, g, swap(0, 1), func(int, []nixl.Record) []transfer.Finding {
			return []transfer.Finding{f(transfer.Aligned, 0, 1), f(transfer.Aligned, 1, 0)}
		})
	})

	// 64 tokens from blocks of 32 (rows of 16) into a block of 64 (rows
	// of 32): 4 chunks a page, two a row; chunks 2 and 3 are the second
	// row's, from the producer's second block, its two rows.
	g = named("16x2-to-32x2")
	prod, cons = sides(t, g)
	f = chunked(g, 4, 2, 0, 0, prod, cons)
	t.Run(g.name, func(t *testing.T) {
		check(t, g, swap(2, 3), func(int, []nixl.Record) []transfer.Finding {
			return []transfer.Finding{f(transfer.Aligned, 2, 3), f(transfer.Aligned, 3, 2)}
		})
	})
}

// halfDesc adds to the prepared list handle of recs half of its
// descriptor id (the first half, or the second), returning its index.
func halfDesc(recs []nixl.Record, handle, id int, second bool) int {
	for i := range recs {
		if r := &recs[i]; r.Op == nixl.OpDList && r.Handle == handle {
			d := r.Descs[id]
			d.Len /= 2
			if second {
				d.Addr += d.Len
			}
			r.Descs = append(r.Descs, d)
			return len(r.Descs) - 1
		}
	}
	return -1
}

// TestPairOfAnotherLengthOutsideItsBlocks: pair 0 of req-0's transfer
// writes a block req-0 does not hold (req-1's at position 0, or, with one
// request, a free block) from half its source descriptor. Its lists'
// lengths differ: an aligned finding placed at that block, of no position
// and no tokens of req-0; and it writes outside req-0's blocks: a
// confined finding naming the block, of the tokens the half read. The
// llama geometry is nhd (token-major): the second half of a block's K is
// tokens 8-15, every head. The tiny preset's TP 4 consumer ranks hold one
// head each (tp 3: head 1), blocks of 2 tokens, hnd: the first half of a
// head's K is token 0. Where the consumer converts (vLLM 16 -> 64), both
// are placed at the chunk (every head), and the first half of an hnd
// producer block holds its 16 tokens (heads 0-3).
func TestPairOfAnotherLengthOutsideItsBlocks(t *testing.T) {
	for _, tc := range []struct {
		g              geometry
		second, free   bool
		heads, tokens  [2]int
		part           string
		rank           layout.Rank
		bytes, readLen uint64
	}{
		{geometries()[0], true, false, [2]int{0, 7}, [2]int{8, 15}, "K", layout.Rank{}, 32768, 16384},
		{geometries()[6], false, true, [2]int{1, 1}, [2]int{0, 0}, "K", layout.Rank{TP: 3}, 16, 8},
		{vllmGeometries()[0], false, false, [2]int{0, 7}, [2]int{0, 15}, "K", layout.Rank{}, 32768, 16384},
	} {
		t.Run(tc.g.name, func(t *testing.T) {
			prod, cons, logs := pull(t, t.TempDir(), tc.g)
			li := len(logs) - 1
			h, recs := records(t, logs[li])
			x := firstXfer(recs)
			other, into := -1, ""
			owner := transfer.Owner{Request: "req-1", Position: 0}
			if tc.free {
				other, recs[x].LocalIDs[0] = freeBlockDesc(t, cons[li], recs, recs[x].Local)
				owner = transfer.Owner{Position: -1, Block: other}
				into = fmt.Sprintf("block %d, which no request of the consumer holds", other)
			} else {
				recs[x].LocalIDs[0] = recs[nextXfer(recs, x)].LocalIDs[0]
				other = cons[li].Manifest.Request("req-1").BlockTable["0"][0]
				owner.Block = other
				into = fmt.Sprintf("block %d, which request req-1 holds at position 0", other)
			}
			recs[x].RemoteIDs[0] = halfDesc(recs, recs[x].Remote, recs[x].RemoteIDs[0], tc.second)
			rewrite(t, logs[li], h, recs)
			res := audit(t, logs, prod, cons)
			var got []transfer.Finding
			for _, f := range res.Findings {
				if f.Transfer == recs[x].ID && f.Descriptor == 0 {
					f.Log, f.Line = "", 0
					got = append(got, f)
				}
			}
			al := transfer.Finding{Invariant: transfer.Aligned, Request: "req-0", Transfer: recs[x].ID, Rank: tc.rank, Group: 0, Position: -1, Block: other,
				LayerName: "model.layers.0.self_attn.attn", Part: tc.part, Heads: tc.heads, Tokens: [2]int{-1, -1}, Bytes: tc.bytes,
				Message: fmt.Sprintf("transfer %d descriptor 0: the local descriptor has %d bytes, the remote %d", recs[x].ID, tc.bytes, tc.readLen)}
			co := al
			co.Invariant, co.Side, co.Tokens = transfer.Confined, "local", tc.tokens
			co.Owner = &owner
			heads, tokens := fmt.Sprintf("heads %d-%d", tc.heads[0], tc.heads[1]), fmt.Sprintf("tokens %d-%d", tc.tokens[0], tc.tokens[1])
			if tc.heads[0] == tc.heads[1] {
				heads = fmt.Sprintf("head %d", tc.heads[0])
			}
			if tc.tokens[0] == tc.tokens[1] {
				tokens = fmt.Sprintf("token %d", tc.tokens[0])
			}
			co.Message = fmt.Sprintf("transfer %d descriptor 0 wrote layer 0 %s %s %s into %s, not a block request req-0 loads",
				recs[x].ID, tc.part, heads, tokens, into)
			if want := []transfer.Finding{al, co}; !reflect.DeepEqual(got, want) {
				t.Fatalf("findings of pair 0\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// TestMLAPairFinding: an MLA cache holds one latent vector a token (head
// 0, no K or V part; 576 values of 2 bytes), the same on every consumer
// rank: two swapped pairs of TP 2's rank 1 are aligned findings at head
// 0 (not heads 0-1), of their positions' 16 tokens.
func TestMLAPairFinding(t *testing.T) {
	g := geometries()[7]
	prod, cons, logs := pull(t, t.TempDir(), g)
	li := len(logs) - 1
	h, recs := records(t, logs[li])
	x := firstXfer(recs)
	ids := recs[x].RemoteIDs
	ids[0], ids[1] = ids[1], ids[0]
	rewrite(t, logs[li], h, recs)
	res := audit(t, logs, prod, cons)
	ctable, ptable := cons[li].Manifest.Request("req-0").BlockTable["0"], prod[0].Manifest.Request("req-0").BlockTable["0"]
	var want []transfer.Finding
	for d := range 2 {
		want = append(want, transfer.Finding{Invariant: transfer.Aligned, Request: "req-0", Transfer: recs[x].ID, Descriptor: d, Rank: layout.Rank{TP: 1},
			Group: 0, Position: d, Block: ctable[d], LayerName: "model.layers.0.self_attn.attn", Heads: [2]int{0, 0}, Tokens: [2]int{16 * d, 16*d + 15},
			Bytes: 16 * 576 * 2, Source: &transfer.Source{Agent: "producer-pp0-tp0", Block: ptable[1-d], Request: "req-0", Position: 1 - d, Expected: "req-0"},
			Message: fmt.Sprintf("transfer %d descriptor %d: the local bytes hold layer 0 head 0 tokens %d-%d, the remote bytes layer 0 head 0 tokens %d-%d",
				recs[x].ID, d, 16*d, 16*d+15, 16*(1-d), 16*(1-d)+15)})
	}
	for i := range res.Findings {
		res.Findings[i].Log, res.Findings[i].Line = "", 0
	}
	if !reflect.DeepEqual(res.Findings, want) {
		t.Fatalf("findings\n%+v\nwant\n%+v", res.Findings, want)
	}
}

// TestTransferWithoutRequest: a transfer whose record names no request
// (the field is optional) is its first destination block's request's:
// the correct pull with no request named audits as it does with them.
func TestTransferWithoutRequest(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	named := audit(t, logs, prod, cons)
	h, recs := records(t, logs[0])
	for i := range recs {
		recs[i].Request, recs[i].HasRequest = "", false
	}
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if res.Verdict != transfer.Clean || len(res.Requests) != 2 || !reflect.DeepEqual(res.Requests, named.Requests) {
		t.Fatalf("verdict %s, requests %+v, want those named %+v (notes %q)", res.Verdict, res.Requests, named.Requests, res.Notes)
	}
}

// TestSameSourceDeliveredAgain: bytes delivered again from the same
// source (the second halves of pair 0's two descriptors, added as a pair
// of their own) are not written twice (docs/spec.md: the same source,
// delivered again, is not a finding); from another source (the second
// half of pair 1's remote descriptor: the next block's tokens 8-15) they
// are, of the half's bytes, and misaligned.
func TestSameSourceDeliveredAgain(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, orig := records(t, logs[0])
	x := firstXfer(orig)
	for _, from := range []int{0, 1} {
		recs := slices.Clone(orig)
		recs[x].LocalIDs = append(slices.Clone(recs[x].LocalIDs), halfDesc(recs, recs[x].Local, recs[x].LocalIDs[0], true))
		recs[x].RemoteIDs = append(slices.Clone(recs[x].RemoteIDs), halfDesc(recs, recs[x].Remote, recs[x].RemoteIDs[from], true))
		rewrite(t, logs[0], h, recs)
		res := audit(t, logs, prod, cons)
		if from == 0 {
			if res.Verdict != transfer.Clean {
				t.Fatalf("same source: verdict %s, findings %+v", res.Verdict, res.Findings)
			}
			continue
		}
		n := len(recs[x].LocalIDs) - 1 // the added pair
		var got []string
		for _, f := range res.Findings {
			got = append(got, fmt.Sprintf("%s %d %d %d %v", f.Invariant, f.Transfer, f.Descriptor, f.Bytes, f.Tokens))
		}
		want := []string{
			fmt.Sprintf("written-twice %d %d 16384 [8 15]", recs[x].ID, n),
			fmt.Sprintf("aligned %d %d 16384 [8 15]", recs[x].ID, n),
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("another source: findings %q, want %q", got, want)
		}
	}
}

// TestWriteIntoAPrefixHitBlock: the consumer's req-0 holds its first 16
// tokens (block 0 of its table) as a local prefix hit. Pair 0 of its
// transfer, made to write that block (layer 0's K) from outside every
// producer cache, is confined twice: a read outside the caches, and a
// write into the request's own block it does not load, at position 0 and
// that block's tokens 0-15 (with nothing read, the tokens are the
// written block's). What pair 0 was to deliver, layer 0's K at position
// 1 (tokens 16-31), is a gap, and its stale bytes a zeroed finding. The
// picture draws the prefix block's layer 0 intruded, by pair 0.
func TestWriteIntoAPrefixHitBlock(t *testing.T) {
	g := geometries()[13]
	prod, cons, logs := pull(t, t.TempDir(), g)
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	table := cons[0].Manifest.Request("req-0").BlockTable["0"]
	if n := cons[0].Manifest.Request("req-0").NumLocalComputedTokens; g.name != "prefix-hit" || n != 16 {
		t.Fatalf("%s: %d tokens computed locally, want a prefix hit of 16", g.name, n)
	}
	_, recs[x].LocalIDs[0] = blockDesc(t, cons[0], recs, recs[x].Local, func(c addrmap.Cells) bool { return c.Block == table[0] })
	id, addr := outsideDesc(recs, recs[x].Remote)
	recs[x].RemoteIDs[0] = id
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	at := func(inv string, desc, pos int) transfer.Finding {
		return transfer.Finding{Invariant: inv, Request: "req-0", Transfer: recs[x].ID, Descriptor: desc, Rank: layout.Rank{}, Group: 0,
			Position: pos, Block: table[pos], LayerName: "model.layers.0.self_attn.attn", Part: "K", Heads: [2]int{0, 7},
			Tokens: [2]int{16 * pos, 16*pos + 15}, Bytes: 32768}
	}
	read, wrote, gap := at(transfer.Confined, 0, 0), at(transfer.Confined, 0, 0), at(transfer.Covered, -1, 1)
	read.Side = "remote"
	read.Message = fmt.Sprintf("transfer %d descriptor 0 reads 32768 bytes at %#x.. outside every cache of the producer's rank pp 0 tp 0", recs[x].ID, addr)
	wrote.Side, wrote.Owner = "local", &transfer.Owner{Request: "req-0", Position: 0, Block: table[0]}
	wrote.Message = fmt.Sprintf("transfer %d descriptor 0 wrote layer 0 K heads 0-7 tokens 0-15 into block %d, the request's own block at position 0, which it does not load (a local prefix hit), not a block request req-0 loads", recs[x].ID, table[0])
	gap.Message = fmt.Sprintf("request req-0 layer 0 K heads 0-7 tokens 16-31 (position 1, block %d, rank pp 0 tp 0): 32768 bytes delivered by no transfer that reached DONE", table[1])
	if len(res.Findings) != 4 {
		t.Fatalf("%d findings, want 4: %+v", len(res.Findings), res.Findings)
	}
	zeroed := res.Findings[1]
	got := []transfer.Finding{res.Findings[0], res.Findings[2], res.Findings[3]}
	for i := range got {
		got[i].Log, got[i].Line = "", 0
	}
	if want := []transfer.Finding{gap, read, wrote}; !reflect.DeepEqual(got, want) {
		t.Fatalf("findings\n%+v\nwant\n%+v", got, want)
	}
	if zeroed.Invariant != transfer.Zeroed || zeroed.Position != 1 || zeroed.Block != table[1] || zeroed.Tokens != gap.Tokens || zeroed.Bytes == 0 || zeroed.Bytes > 32768 ||
		!strings.HasSuffix(zeroed.Message, "are not zero, the first at token 16") {
		t.Fatalf("zeroed finding %+v, want one at position 1's layer 0 K", zeroed)
	}
	// The picture: layer 0's first 16 tokens (the prefix block's K and V)
	// were written by pair 0 outside the blocks req-0 loads, the first
	// bytes of each the token's 2048 of the K; layer 1's are the
	// consumer's own.
	addr0 := prepared(t, recs, recs[x].Local)[recs[x].LocalIDs[0]].Addr
	cv := res.Coverage[slices.IndexFunc(res.Coverage, func(cv picture.Coverage) bool { return cv.Request == "req-0" })]
	for tok := range 16 {
		a := addr0 + uint64(tok)*2048
		want := picture.Cell{State: picture.CellIntruded, Transfer: recs[x].ID, Descriptor: 0, Log: logs[0], Bytes: [2]uint64{a, a + 2048}}
		own := picture.Cell{State: picture.CellLocal, Transfer: transfer.NoTransfer, Descriptor: -1}
		if cv.Rows[0].Cells[tok] != want || cv.Rows[1].Cells[tok] != own {
			t.Fatalf("token %d: layer 0 %+v, want %+v; layer 1 %+v, want %+v", tok, cv.Rows[0].Cells[tok], want, cv.Rows[1].Cells[tok], own)
		}
	}
}

// TestWrittenTwiceOutsideEveryCache: pairs 0 and 1 of req-0's transfer
// both write one range outside every consumer cache, from their two
// sources: each is confined, and the second wrote the first's bytes
// again, a written-twice finding placed in no block, at no layer, head or
// token (it said "wrote layer 0", heads 0-0, tokens 0-0).
func TestWrittenTwiceOutsideEveryCache(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	id, addr := outsideDesc(recs, recs[x].Local)
	recs[x].LocalIDs[0], recs[x].LocalIDs[1] = id, id
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	f := findingOf(t, res, transfer.Twice)
	f.Line = 0
	none := [2]int{-1, -1}
	want := transfer.Finding{Invariant: transfer.Twice, Request: "req-0", Transfer: recs[x].ID, Descriptor: 1, Log: logs[0], Rank: layout.Rank{},
		Group: -1, Position: -1, Block: -1, Heads: none, Tokens: none, Bytes: 32768, Other: &transfer.Ref{Log: logs[0], Transfer: recs[x].ID, Descriptor: 0},
		Message: fmt.Sprintf("transfer %d descriptor 1 wrote 32768 bytes at %#x.. outside every cache, which transfer %d descriptor 0 (log %q) also wrote, from another source", recs[x].ID, addr, recs[x].ID, logs[0])}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("finding\n%+v\nwant\n%+v", f, want)
	}
}

// TestWrittenTwiceByAnIntruder: req-1's transfer (the log's second)
// writes its pair 0 into req-0's block at position 0, which req-0's pair
// 0 wrote: the written-twice finding is req-0's (the block's), of the
// intruding transfer, and says whose block it is and whose transfer
// wrote it.
func TestWrittenTwiceByAnIntruder(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	y := nextXfer(recs, x)
	recs[y].LocalIDs[0] = recs[x].LocalIDs[0]
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	var twice []transfer.Finding
	for _, f := range res.Findings {
		if f.Invariant == transfer.Twice {
			twice = append(twice, f)
		}
	}
	block := cons[0].Manifest.Request("req-0").BlockTable["0"][0]
	msg := fmt.Sprintf("transfer %d descriptor 0 wrote layer 0 K heads 0-7 tokens 0-15 (request req-0's block, written by request req-1's transfer), which transfer %d descriptor 0 (log %q) also wrote, from another source",
		recs[y].ID, recs[x].ID, logs[0])
	if len(twice) != 1 || twice[0].Request != "req-0" || twice[0].Transfer != recs[y].ID || twice[0].Block != block || twice[0].Position != 0 || twice[0].Message != msg {
		t.Fatalf("written-twice findings %+v\nwant one: %q", twice, msg)
	}
}
