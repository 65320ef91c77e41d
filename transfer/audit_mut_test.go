package transfer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
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

// TestLogSummaryCounts: each log's summary counts the log's prepared
// lists, transfers, descriptor pairs and the transfers that ended DONE
// and ERR, as its records say.
func TestLogSummaryCounts(t *testing.T) {
	for _, gi := range []int{0, 4, 5} { // equal, tp1-tp2 (two logs), tp2-tp1
		g := geometries()[gi]
		prod, cons, logs := pull(t, t.TempDir(), g)
		h, recs := records(t, logs[0])
		recs[stateOf(recs, firstXfer(recs))].State = nixl.Err
		rewrite(t, logs[0], h, recs)
		res := audit(t, logs, prod, cons)
		if len(res.Logs) != len(logs) {
			t.Fatalf("%s: %d log summaries, %d logs", g.name, len(res.Logs), len(logs))
		}
		for i, path := range logs {
			h, recs := records(t, path)
			want := transfer.LogSummary{File: path, Agent: h.Agent, Rank: layout.Rank{PP: h.PPRank, TP: h.TPRank}, Side: "consumer"}
			for _, r := range recs {
				switch r.Op {
				case nixl.OpDList:
					want.Lists++
				case nixl.OpXfer:
					want.Xfers++
					want.Pairs += len(r.LocalIDs)
				case nixl.OpState:
					switch r.State {
					case nixl.Done:
						want.Done++
					case nixl.Err:
						want.Failed++
					}
				}
			}
			if res.Logs[i] != want {
				t.Fatalf("%s log %d: summary %+v, want %+v", g.name, i, res.Logs[i], want)
			}
			if want.Lists == 0 || want.Xfers == 0 || want.Done == 0 || (i == 0) != (want.Failed == 1) {
				t.Fatalf("%s log %d: the log is not what the test needs: %+v", g.name, i, want)
			}
		}
	}
}

// TestReadPostedLate: a READ's time is when it was posted, not when it
// was made: a transfer made inside the lease and posted 6 s later is
// past a 5 s lease.
func TestReadPostedLate(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	if recs[x+1].Op != nixl.OpPost || recs[x+1].ID != recs[x].ID {
		t.Fatalf("record after the transfer: %+v", recs[x+1])
	}
	lateBy(recs, x+1, 6)
	rewrite(t, logs[0], h, recs)
	res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{LeaseS: 5})
	if err != nil || !slices.Equal(invariants(res), []string{transfer.Lease}) || res.Findings[0].Transfer != recs[x].ID {
		t.Fatalf("posted 6 s after it was made: %v, %v", err, invariants(res))
	}
	// The lease is the transfer's as a whole: no descriptor, place, heads
	// or tokens.
	none := [2]int{-1, -1}
	if f := res.Findings[0]; f.Request != "req-0" || f.Descriptor != -1 || f.Group != -1 || f.Position != -1 || f.Block != -1 || f.Heads != none || f.Tokens != none {
		t.Fatalf("lease finding %+v", f)
	}
}

// TestOnlyProducerLogs: logs that are all the producer's, none of whose
// transfers writes into the consumer's dumps, are said to be the wrong
// side's.
func TestOnlyProducerLogs(t *testing.T) {
	prod, cons, _ := pull(t, t.TempDir(), geometries()[0])
	plog := filepath.Join(t.TempDir(), "producer.jsonl")
	rewrite(t, plog, nixl.Header{Agent: *prod[0].Manifest.Parallel.Agent}, nil)
	res := audit(t, []string{plog}, prod, cons)
	if !hasNote(res.Pairing, "every log is a producer's (1), and none of their transfers writes into the consumer's dumps") {
		t.Fatalf("pairing %q", res.Pairing)
	}
}

// TestStrangerLogNamesItsAgents: a log no dump names, recorded against
// other memory, is said to match neither dump, naming its agent and the
// remote agents its lists and notifications name; one whose
// notifications come from a dumped agent is not said to match neither.
func TestStrangerLogNamesItsAgents(t *testing.T) {
	g := geometries()[0]
	_, _, logs := pull(t, t.TempDir(), g)
	g.p.Seed, g.c.Seed = 9, 9
	oprod, ocons := openSides(t, synthesized(t, g.p, g.c))
	h, recs := records(t, logs[0])
	h.Agent = "stranger"
	producer := ""
	for i := range recs {
		switch {
		case recs[i].Op == nixl.OpDList && recs[i].Agent != nixl.LocalAgent:
			producer, recs[i].Agent = recs[i].Agent, "stranger-producer"
		case recs[i].Op == nixl.OpNotif:
			recs[i].Agent = "stranger-notifier"
		}
	}
	if producer == "" || *oprod[0].Manifest.Parallel.Agent != producer {
		t.Fatalf("the log's remote agent %q, the dump's %q", producer, *oprod[0].Manifest.Parallel.Agent)
	}
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, oprod, ocons)
	want := `(agent "stranger", remote agents "stranger-producer", "stranger-notifier") matches neither dump`
	if !hasNote(res.Pairing, want) {
		t.Fatalf("pairing %q, want %q", res.Pairing, want)
	}
	for i := range recs {
		if recs[i].Op == nixl.OpNotif {
			recs[i].Agent = producer
		}
	}
	rewrite(t, logs[0], h, recs)
	res = audit(t, logs, oprod, ocons)
	if hasNote(res.Pairing, "matches neither dump") {
		t.Fatalf("notifications from the dumped producer: pairing %q", res.Pairing)
	}
}

// TestReadbacksSaid: with the sides swapped, every transfer writes into
// the (given) producer's agents: each log says how many it left out as
// readbacks.
func TestReadbacksSaid(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	_, recs := records(t, logs[0])
	n := len(slices.DeleteFunc(recs, func(r nixl.Record) bool { return r.Op != nixl.OpXfer }))
	res := audit(t, logs, cons, prod)
	want := fmt.Sprintf("log %q: %d transfer(s) write into the producer's agents (readbacks): not audited", logs[0], n)
	if n == 0 || !slices.Contains(res.Notes, want) {
		t.Fatalf("notes %q, want %q", res.Notes, want)
	}
}

// TestTransferLevelFinding: a transfer pairing more local descriptors
// than remote is one aligned finding of the transfer as a whole: no
// descriptor, group, position or block.
func TestTransferLevelFinding(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	nl := len(recs[x].LocalIDs)
	recs[x].RemoteIDs = recs[x].RemoteIDs[:nl-1]
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	f := findingOf(t, res, transfer.Aligned)
	msg := fmt.Sprintf("transfer %d pairs %d local descriptors with %d remote", recs[x].ID, nl, nl-1)
	if f.Transfer != recs[x].ID || f.Request != "req-0" || f.Descriptor != -1 || f.Group != -1 || f.Position != -1 || f.Block != -1 || !strings.Contains(f.Message, msg) {
		t.Fatalf("finding %+v, want transfer %d as a whole: %q", f, recs[x].ID, msg)
	}
}

// TestFailedFindingIsOfTheTransfer: a transfer that ended in ERR while
// its request was loaded anyway is one failed finding of the transfer as
// a whole (no descriptor, group, position, block, heads or tokens), naming
// the tokens the dump holds as loaded.
func TestFailedFindingIsOfTheTransfer(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	recs[stateOf(recs, x)].State = nixl.Err
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	f := findingOf(t, res, transfer.Failed)
	req := cons[0].Manifest.Request("req-0")
	msg := fmt.Sprintf("transfer %d ended in ERR, but request req-0 was loaded anyway (its dump on rank pp 0 tp 0 holds tokens %d-%d as loaded)",
		recs[x].ID, req.NumLocalComputedTokens, req.NumTokens-1)
	none := [2]int{-1, -1}
	if f.Transfer != recs[x].ID || f.Request != "req-0" || f.Descriptor != -1 || f.Group != -1 || f.Position != -1 || f.Block != -1 ||
		f.Heads != none || f.Tokens != none || f.Message != msg {
		t.Fatalf("finding %+v\nwant the transfer as a whole: %q", f, msg)
	}
}

// TestPairsOutsideEveryCache: a log (registering nothing) whose every
// descriptor pair lies outside both sides' caches (recorded against other
// dumps) is said not to belong with them, counting its pairs.
func TestPairsOutsideEveryCache(t *testing.T) {
	g := geometries()[0]
	_, _, logs := pull(t, t.TempDir(), g)
	g.p.Seed, g.c.Seed = 9, 9
	oprod, ocons := openSides(t, synthesized(t, g.p, g.c))
	h, recs := records(t, logs[0])
	recs = slices.DeleteFunc(recs, func(r nixl.Record) bool { return r.Op == nixl.OpRegister })
	pairs := 0
	for _, r := range recs {
		if r.Op == nixl.OpXfer {
			pairs += len(r.LocalIDs)
		}
	}
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, oprod, ocons)
	want := fmt.Sprintf("log %q: none of its %d descriptor pair(s) lies in a cache of the dumps (every byte outside both sides' caches): the log and the dumps do not belong together", logs[0], pairs)
	if pairs == 0 || !slices.Contains(res.Pairing, want) {
		t.Fatalf("pairing %q\nwant %q", res.Pairing, want)
	}
}

// TestOneDumpByTwoPaths: one dump given as both sides by two spellings of
// its path (relative and absolute) is said, as one path twice is.
func TestOneDumpByTwoPaths(t *testing.T) {
	g := geometries()[0]
	g.p.Seed, g.c.Seed = 5, 5
	dir := filepath.Join(synthesized(t, g.p, g.c), "consumer")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, dir)
	if err != nil || filepath.IsAbs(rel) {
		t.Fatalf("no relative path to %s from %s: %v", dir, wd, err)
	}
	abs, err := layout.OpenPaths([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(abs)
	relDump, err := layout.OpenPaths([]string{rel})
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(relDump)
	_, _, logs := pull(t, t.TempDir(), g)
	res := audit(t, logs, relDump, abs)
	if !hasNote(res.Pairing, "one dump given twice: ") || !hasNote(res.Pairing, "is both the producer's and the consumer's") || res.Verdict == transfer.Clean {
		t.Fatalf("verdict %s, pairing %q", res.Verdict, res.Pairing)
	}
}
