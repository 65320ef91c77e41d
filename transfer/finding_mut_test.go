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
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
)

// TestUnservedRequestFinding: a dumped request no transfer served is one
// covered finding of the request as a whole: no transfer, descriptor,
// group, position, block or heads; its tokens are the ones it had to
// pull (from num_local_computed_tokens to the last).
func TestUnservedRequestFinding(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	recs[nextXfer(recs, x)].Request = "req-9" // req-1: served by no transfer
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	i := slices.IndexFunc(res.Findings, func(f transfer.Finding) bool { return f.Request == "req-1" })
	if i < 0 {
		t.Fatalf("no finding of req-1: %v", res.Findings)
	}
	r := cons[0].Manifest.Request("req-1")
	lo, hi := r.NumLocalComputedTokens, r.NumTokens-1
	f := res.Findings[i]
	want := transfer.Finding{Invariant: transfer.Covered, Request: "req-1", Transfer: transfer.NoTransfer, Descriptor: -1,
		Group: -1, Position: -1, Block: -1, Rank: f.Rank, Heads: [2]int{-1, -1}, Tokens: [2]int{lo, hi},
		Message: fmt.Sprintf("request req-1 (rank pp 0 tp 0, producer request req-1): tokens %d-%d were delivered by no transfer in the logs", lo, hi)}
	if f.Rank.PP != 0 || f.Rank.TP != 0 || fmt.Sprintf("%+v", f) != fmt.Sprintf("%+v", want) {
		t.Fatalf("finding\n%+v\nwant\n%+v", f, want)
	}
}

// TestWrittenTwiceFinding: a transfer writing into the block another
// request's transfer also wrote is a finding of the block's request, at
// its position and block, naming the other transfer and descriptor.
func TestWrittenTwiceFinding(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	y := nextXfer(recs, x) // req-1's transfer
	recs[x].LocalIDs[0] = recs[y].LocalIDs[0]
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	f := findingOf(t, res, transfer.Twice)
	block := cons[0].Manifest.Request("req-1").BlockTable["0"][0]
	// The bytes written twice: the local descriptor both pairs name.
	bytes := prepared(t, recs, recs[x].Local)[recs[x].LocalIDs[0]].Len
	if bytes == 0 || f.Bytes != bytes {
		t.Fatalf("finding of %d bytes, the descriptor has %d: %+v", f.Bytes, bytes, f)
	}
	if f.Request != "req-1" || f.Group != 0 || f.Position != 0 || f.Block != block || f.Other == nil ||
		f.Other.Log != logs[0] || f.Other.Descriptor != 0 || (f.Transfer != recs[x].ID && f.Transfer != recs[y].ID) ||
		(f.Other.Transfer != recs[x].ID && f.Other.Transfer != recs[y].ID) || f.Other.Transfer == f.Transfer || f.Bytes == 0 {
		t.Fatalf("finding %+v (other %+v): want req-1's block %d at position 0, transfers %d and %d", f, f.Other, block, recs[x].ID, recs[y].ID)
	}
}

// TestForeignReadFinding: a descriptor reading another producer
// request's block is a confined finding of the remote side at that
// descriptor, of the descriptor's bytes, at the consumer block it wrote.
func TestForeignReadFinding(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	y := nextXfer(recs, x)
	recs[x].RemoteIDs[2] = recs[y].RemoteIDs[2]
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if len(res.Findings) != 1 {
		t.Fatalf("%d findings: %v", len(res.Findings), invariants(res))
	}
	bytes := prepared(t, recs, recs[x].Remote)[recs[x].RemoteIDs[2]].Len
	f := res.Findings[0]
	block := cons[0].Manifest.Request("req-0").BlockTable["0"][2]
	if f.Invariant != transfer.Confined || f.Side != "remote" || f.Descriptor != 2 || f.Bytes != bytes || bytes == 0 ||
		f.Group != 0 || f.Position != 2 || f.Block != block {
		t.Fatalf("finding %+v\nwant remote, descriptor 2, %d bytes, position 2, block %d", f, bytes, block)
	}
}

// TestWriteIntoAnotherRequestFinding: a descriptor writing into another
// request's block is a confined finding of the local side at that
// descriptor, of the descriptor's bytes, at that block (no position of
// the writer's), naming the block's owner.
func TestWriteIntoAnotherRequestFinding(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	y := nextXfer(recs, x)
	recs[x].LocalIDs[0] = recs[y].LocalIDs[0]
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	f := findingOf(t, res, transfer.Confined)
	bytes := prepared(t, recs, recs[x].Local)[recs[x].LocalIDs[0]].Len
	block := cons[0].Manifest.Request("req-1").BlockTable["0"][0]
	if f.Side != "local" || f.Request != "req-0" || f.Transfer != recs[x].ID || f.Descriptor != 0 || f.Bytes != bytes || bytes == 0 ||
		f.Group != 0 || f.Position != -1 || f.Block != block || f.Owner == nil || f.Owner.Request != "req-1" || f.Owner.Position != 0 {
		t.Fatalf("finding %+v (owner %+v)\nwant local, descriptor 0, %d bytes, req-1's block %d", f, f.Owner, bytes, block)
	}
	// The tokens are the ones the bytes carry: req-0's first block's, read
	// from the producer.
	S := cons[0].Groups[0].Group.BlockSize
	into := fmt.Sprintf("into block %d, which request req-1 holds at position 0, not a block request req-0 loads", block)
	if f.Tokens != [2]int{0, S - 1} || !strings.Contains(f.Message, into) {
		t.Fatalf("tokens %v (want 0-%d), message %q, want %q", f.Tokens, S-1, f.Message, into)
	}
}

// TestDroppedDescriptorBytes: a transfer's first descriptor dropped
// leaves exactly its bytes undelivered: the covered findings add up to the
// descriptor's length, in geometries with and without kernel-block
// splits.
func TestDroppedDescriptorBytes(t *testing.T) {
	for _, gi := range []int{0, 2, 3} { // equal, producer-blocks-x2-kernel, consumer-kernel-split
		g := geometries()[gi]
		prod, cons, logs := pull(t, t.TempDir(), g)
		h, recs := records(t, logs[0])
		x := firstXfer(recs)
		bytes := prepared(t, recs, recs[x].Local)[recs[x].LocalIDs[0]].Len
		recs[x].LocalIDs, recs[x].RemoteIDs = recs[x].LocalIDs[1:], recs[x].RemoteIDs[1:]
		rewrite(t, logs[0], h, recs)
		res := audit(t, logs, prod, cons)
		var got uint64
		for _, f := range res.Findings {
			if f.Invariant == transfer.Covered {
				got += f.Bytes
			}
			// Bytes no descriptor delivered: no descriptor, at the
			// request's block.
			if (f.Invariant == transfer.Covered || f.Invariant == transfer.Zeroed) && (f.Descriptor != -1 || f.Position < 0 || f.Request != recs[x].Request) {
				t.Fatalf("%s: finding %+v", g.name, f)
			}
		}
		if bytes == 0 || got != bytes {
			t.Fatalf("%s: covered findings of %d bytes, the dropped descriptor has %d: %v", g.name, got, bytes, invariants(res))
		}
	}
}

// TestWriteIntoAFreeBlockFinding: a descriptor writing into a block no
// consumer request holds is a confined finding whose owner is no request.
func TestWriteIntoAFreeBlockFinding(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	free, id := freeBlockDesc(t, cons[0], recs, recs[x].Local)
	recs[x].LocalIDs[0] = id
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	f := findingOf(t, res, transfer.Confined)
	into := fmt.Sprintf("into block %d, which no request of the consumer holds, not a block request req-0 loads", free)
	if f.Side != "local" || f.Block != free || f.Position != -1 || f.Owner == nil || *f.Owner != (transfer.Owner{Position: -1, Block: free}) ||
		!strings.Contains(f.Message, into) {
		t.Fatalf("finding %+v (owner %+v)\nwant %q", f, f.Owner, into)
	}
}

// TestGapLaidToItsTransfer: with two producer ranks (TP 2 -> 1) each
// request is pulled by two transfers; a descriptor dropped from the
// second is a gap laid to the second (the rank that holds those heads),
// not to the request's first transfer.
func TestGapLaidToItsTransfer(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[5]) // tp2-tp1
	h, recs := records(t, logs[0])
	var xs []int
	for i, r := range recs {
		if r.Op == nixl.OpXfer && r.Request == "req-0" {
			xs = append(xs, i)
		}
	}
	if len(xs) != 2 {
		t.Fatalf("req-0 has %d transfers, want one per producer rank", len(xs))
	}
	for _, x := range xs {
		recs := slices.Clone(recs)
		recs[x].LocalIDs, recs[x].RemoteIDs = recs[x].LocalIDs[1:], recs[x].RemoteIDs[1:]
		rewrite(t, logs[0], h, recs)
		res := audit(t, logs, prod, cons)
		i := slices.IndexFunc(res.Findings, func(f transfer.Finding) bool { return f.Invariant == transfer.Covered })
		if i < 0 || res.Findings[i].Transfer != recs[x].ID || res.Findings[i].Request != "req-0" {
			t.Fatalf("descriptor of transfer %d dropped: findings %+v", recs[x].ID, res.Findings)
		}
	}
}

// TestLogWithoutTransfers: a consumer's log that made no transfer is not
// said to have its pairs outside the caches, nor the sides swapped, nor
// every log a producer's; with no log at all, neither is said.
func TestLogWithoutTransfers(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	recs = slices.DeleteFunc(recs, func(r nixl.Record) bool {
		return r.Op == nixl.OpXfer || r.Op == nixl.OpPost || r.Op == nixl.OpState
	})
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	// Nothing audited, but nothing swapped, and the log is the
	// consumer's: neither is said.
	if hasNote(res.Pairing, "descriptor pair(s)") || hasNote(res.Pairing, "look swapped") || hasNote(res.Pairing, "every log is a producer's") ||
		res.Logs[0].Pairs != 0 || res.Verdict == transfer.Clean {
		t.Fatalf("verdict %s, pairing %q, summary %+v", res.Verdict, res.Pairing, res.Logs[0])
	}
	if res := audit(t, nil, prod, cons); len(res.Pairing) != 0 || res.Verdict != transfer.Unresolved {
		t.Fatalf("no log: verdict %s, pairing %q", res.Verdict, res.Pairing)
	}
}

// TestReadOfAReleasedBlockFinding: a descriptor reading a producer block
// no producer request holds is a confined remote finding whose source is
// that block, of no request.
func TestReadOfAReleasedBlockFinding(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	free, id := freeBlockDesc(t, prod[0], recs, recs[x].Remote)
	recs[x].RemoteIDs[0] = id
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	i := slices.IndexFunc(res.Findings, func(f transfer.Finding) bool { return f.Invariant == transfer.Confined && f.Side == "remote" })
	if i < 0 {
		t.Fatalf("no confined remote finding: %v", invariants(res))
	}
	f := res.Findings[i]
	msg := fmt.Sprintf("read producer block %d (rank pp 0 tp 0), which no request of the producer holds (a released block), not request req-0's", free)
	if f.Descriptor != 0 || f.Source == nil || f.Source.Block != free || f.Source.Request != "" || f.Source.Position != -1 || !strings.Contains(f.Message, msg) {
		t.Fatalf("finding %+v (source %+v)\nwant %q", f, f.Source, msg)
	}
}

// TestMisalignedPairFinding: a pair reading the request's next block is
// an aligned finding at that descriptor, of the descriptor's bytes, whose
// source is the request's own block at the next position.
func TestMisalignedPairFinding(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	recs[x].RemoteIDs[0] = recs[x].RemoteIDs[1]
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if !slices.Equal(invariants(res), []string{transfer.Aligned}) {
		t.Fatalf("invariants %v", invariants(res))
	}
	bytes := prepared(t, recs, recs[x].Local)[recs[x].LocalIDs[0]].Len
	f := res.Findings[0]
	pblock := prod[0].Manifest.Request("req-0").BlockTable["0"][1]
	if f.Descriptor != 0 || f.Request != "req-0" || f.Bytes != bytes || bytes == 0 || f.Position != 0 || f.Source == nil ||
		*f.Source != (transfer.Source{Agent: f.Source.Agent, Rank: f.Source.Rank, Block: pblock, Request: "req-0", Position: 1, Expected: "req-0"}) ||
		!strings.Contains(f.Message, "descriptor 0: the local bytes hold layer ") || !strings.Contains(f.Message, ", the remote bytes layer ") {
		t.Fatalf("finding %+v (source %+v)", f, f.Source)
	}
}

// freeBlockDesc finds, in the prepared list handle of recs, a descriptor
// (its index id) touching a block of d that no request of d holds.
func freeBlockDesc(t *testing.T, d *layout.Dump, recs []nixl.Record, handle int) (free, id int) {
	t.Helper()
	held := map[int]bool{}
	for _, r := range d.Manifest.Requests {
		for _, bt := range r.BlockTable {
			for _, b := range bt {
				held[b] = true
			}
		}
	}
	return blockDesc(t, d, recs, handle, func(c addrmap.Cells) bool { return c.Block != layout.NoBlock && !held[c.Block] })
}

// blockDesc finds, in the prepared list handle of recs, the first
// descriptor (its index id) whose first cells of d's blocks are ones
// want takes, and their block.
func blockDesc(t *testing.T, d *layout.Dump, recs []nixl.Record, handle int, want func(addrmap.Cells) bool) (block, id int) {
	t.Helper()
	am, err := addrmap.New(d)
	if err != nil {
		t.Fatal(err)
	}
	block, id = -1, -1
	for _, r := range recs {
		if r.Op != nixl.OpDList || r.Handle != handle {
			continue
		}
		for i, desc := range r.Descs {
			am.Resolve(desc.Addr, desc.Len, func(c addrmap.Cells) error {
				if block < 0 && want(c) {
					block, id = c.Block, i
				}
				return nil
			})
			if block >= 0 {
				return block, id
			}
		}
	}
	t.Fatalf("%s: the list %d names no such block", d.Path, handle)
	return
}

// TestFailedWithNothingToPull: a transfer that ended in ERR is a failed
// finding only where its request had tokens to pull. req-0 of the
// prefix-hit geometry holds 16 of its 40 tokens as computed locally;
// with a lookahead of 25 the consumer recomputes the last 24 (it pulls
// none), with 24 it pulls token 16 (docs/spec.md: what a pull delivers).
func TestFailedWithNothingToPull(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[13])
	if m := cons[0].Manifest.Request("req-0"); m.NumLocalComputedTokens != 16 || m.NumTokens != 40 {
		t.Fatalf("req-0: %d tokens, %d computed locally", m.NumTokens, m.NumLocalComputedTokens)
	}
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	recs[stateOf(recs, x)].State = nixl.Err
	rewrite(t, logs[0], h, recs)
	for lookahead, want := range map[int]string{25: "", 24: "16-16"} {
		res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{Lookahead: lookahead})
		if err != nil {
			t.Fatal(err)
		}
		var failed []string
		for _, f := range res.Findings {
			if f.Invariant == transfer.Failed {
				failed = append(failed, f.Message)
			}
		}
		msg := fmt.Sprintf("transfer %d ended in ERR, but request req-0 was loaded anyway (its dump on rank pp 0 tp 0 holds tokens %s as loaded)", recs[x].ID, want)
		if (want == "" && len(failed) != 0) || (want != "" && !slices.Equal(failed, []string{msg})) {
			t.Fatalf("lookahead %d: failed findings %q, want %q", lookahead, failed, want)
		}
	}
}

// TestWrittenTwiceIsOneFindingPerPair: two pairs writing one destination
// descriptor's bytes from different sources are one written-twice finding
// of the later pair, naming the earlier, at the bytes' layer, part, every
// head they span and their tokens, of all their bytes: whether the pairs
// move bytes as they lie (llama, equal blocks: a descriptor is one layer's
// K of a block, 16 tokens, heads 0-7) or the consumer converts what it
// receives (vLLM 16 -> 64, hnd: a descriptor is a chunk of 16 tokens of a
// block of 64, whose bytes lie apart head by head: one finding, not one a
// head). The pairs: req-0's pairs 0 and 1 (pair 1 made to write pair 0's
// descriptor), or req-0's pair 0 and req-1's (written into req-1's
// block at position 0: req-1's finding, of req-1's transfer).
func TestWrittenTwiceIsOneFindingPerPair(t *testing.T) {
	vllm := vllmGeometries()
	for _, g := range []geometry{geometries()[0], vllm[slices.IndexFunc(vllm, func(g geometry) bool { return g.name == "16-to-64" })]} {
		for _, across := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/across=%v", g.name, across), func(t *testing.T) {
				prod, cons, logs := pull(t, t.TempDir(), g)
				h, recs := records(t, logs[0])
				x := firstXfer(recs)
				y := nextXfer(recs, x)
				if recs[x].Request != "req-0" || recs[y].Request != "req-1" {
					t.Fatalf("transfers of %s and %s", recs[x].Request, recs[y].Request)
				}
				bytes := prepared(t, recs, recs[x].Local)[recs[x].LocalIDs[0]].Len
				want := transfer.Finding{Invariant: transfer.Twice, Request: "req-0", Transfer: recs[x].ID, Descriptor: 1, Group: 0, Position: 0,
					Block: cons[0].Manifest.Request("req-0").BlockTable["0"][0], Layer: 0, LayerName: "model.layers.0.self_attn.attn", Part: "K",
					Heads: [2]int{0, 7}, Tokens: [2]int{0, 15}, Bytes: bytes, Other: &transfer.Ref{Log: logs[0], Transfer: recs[x].ID, Descriptor: 0}}
				if across {
					recs[x].LocalIDs[0] = recs[y].LocalIDs[0]
					want.Request, want.Transfer, want.Descriptor = "req-1", recs[y].ID, 0
					want.Block = cons[0].Manifest.Request("req-1").BlockTable["0"][0]
				} else {
					recs[x].LocalIDs[1] = recs[x].LocalIDs[0]
				}
				want.Message = fmt.Sprintf("transfer %d descriptor %d wrote layer 0 K heads 0-7 tokens 0-15, which transfer %d descriptor 0 (log %q) also wrote, from another source",
					want.Transfer, want.Descriptor, recs[x].ID, logs[0])
				rewrite(t, logs[0], h, recs)
				res := audit(t, logs, prod, cons)
				var got []transfer.Finding
				for _, f := range res.Findings {
					if f.Invariant == transfer.Twice {
						f.Line = 0
						got = append(got, f)
					}
				}
				want.Log = logs[0]
				if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
					t.Fatalf("%d written-twice finding(s):\n%+v\nwant one:\n%+v", len(got), got, want)
				}
			})
		}
	}
}
