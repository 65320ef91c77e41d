package transfer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
)

// geometry is a producer and a consumer to pull between.
type geometry struct {
	name    string
	p, c    synth.Config
	planner string
}

// geometries are the pulls of docs/spec.md §13: equal and different
// block sizes both ways, kernel-block splits, TP 1->2 and 2->1, MLA,
// hybrid state blocks, prefix hits, another page order, PP.
func geometries() []geometry {
	g := func(name, preset string, p, c synth.Config) geometry {
		p.Preset, c.Preset = preset, preset
		c.Role = "consumer"
		c.ZeroTails = true
		return geometry{name, p, c, nixl.PlannerExact}
	}
	return []geometry{
		g("equal", "llama", synth.Config{}, synth.Config{}),
		g("consumer-blocks-x2", "llama", synth.Config{Layout: "hnd", BlockSize: 16}, synth.Config{Layout: "hnd", BlockSize: 32}),
		g("producer-blocks-x2-kernel", "llama", synth.Config{Layout: "nhd", BlockSize: 32, KernelBlockSize: 16}, synth.Config{Layout: "nhd", BlockSize: 16}),
		g("consumer-kernel-split", "llama", synth.Config{Layout: "flash", BlockSize: 16}, synth.Config{Layout: "nhd", BlockSize: 32, KernelBlockSize: 16}),
		g("tp1-tp2", "llama", synth.Config{Layout: "hnd"}, synth.Config{Layout: "hnd", TP: 2}),
		g("tp2-tp1", "llama", synth.Config{Layout: "packed", TP: 2}, synth.Config{Layout: "packed"}),
		g("tp1-tp4-replicas", "tiny", synth.Config{Layout: "hnd", BlockSize: 2}, synth.Config{Layout: "hnd", TP: 4, BlockSize: 2}),
		g("mla-tp1-tp2", "mla", synth.Config{}, synth.Config{TP: 2}),
		g("mla-tp2-tp1-blocks", "mla", synth.Config{TP: 2, BlockSize: 16}, synth.Config{BlockSize: 32}),
		g("indexer", "indexer", synth.Config{Layout: "hnd", TP: 2}, synth.Config{Layout: "hnd"}),
		g("mamba2-tp1-tp2", "mamba2-hybrid", synth.Config{Layout: "hnd"}, synth.Config{Layout: "hnd", TP: 2}),
		g("gdn-tp2-tp1", "gdn-hybrid", synth.Config{Layout: "hnd", TP: 2}, synth.Config{Layout: "hnd"}),
		g("mamba1-channels-last", "mamba1", synth.Config{ConvLayout: "channels-last"}, synth.Config{ConvLayout: "channels-last", Format: "dir"}),
		g("prefix-hit", "llama", synth.Config{}, synth.Config{PrefixTokens: 16, Format: "raw"}),
		g("hnd-to-nhd", "llama", synth.Config{Layout: "hnd"}, synth.Config{Layout: "nhd"}),
		g("pp2-pp1", "llama", synth.Config{Layout: "hnd", PP: 2}, synth.Config{Layout: "hnd"}),
	}
}

// pull synthesizes a geometry's sides with one seed, plans the correct
// pull and returns the open sides and the logs.
func pull(t testing.TB, dir string, g geometry) (prod, cons []*layout.Dump, logs []string) {
	t.Helper()
	prod, cons = sides(t, g)
	var err error
	if logs, err = nixl.WritePlan(filepath.Join(dir, "nixl"), prod, cons, false, nixl.PlanOptions{Planner: g.planner}); err != nil {
		t.Fatal(err)
	}
	return prod, cons, logs
}

// sides synthesizes a geometry's sides with one seed (once per test
// binary: see synthesized) and opens them.
func sides(t testing.TB, g geometry) (prod, cons []*layout.Dump) {
	t.Helper()
	g.p.Seed, g.c.Seed = 5, 5
	dir := synthesized(t, g.p, g.c)
	var err error
	if prod, err = layout.OpenPaths([]string{filepath.Join(dir, "producer")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { layout.CloseAll(prod) })
	if cons, err = layout.OpenPaths([]string{filepath.Join(dir, "consumer")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { layout.CloseAll(cons) })
	return prod, cons
}

func audit(t testing.TB, logs []string, prod, cons []*layout.Dump) *transfer.Result {
	t.Helper()
	res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestCorrectPullIsClean: the correct pull of every geometry passes every
// invariant, and audits every request of every consumer rank.
func TestCorrectPullIsClean(t *testing.T) {
	for _, g := range geometries() {
		t.Run(g.name, func(t *testing.T) {
			prod, cons, logs := pull(t, t.TempDir(), g)
			res := audit(t, logs, prod, cons)
			if res.Verdict != transfer.Clean {
				for _, f := range res.Findings[:min(5, len(res.Findings))] {
					t.Log(f.Message)
				}
				t.Fatalf("verdict %s: %d findings, unresolved %v", res.Verdict, len(res.Findings), res.Unresolved)
			}
			want := 0
			for _, d := range cons {
				want += len(d.Manifest.Requests)
			}
			if len(res.Requests) != want {
				t.Fatalf("%d requests audited, want %d", len(res.Requests), want)
			}
		})
	}
}

// records reads a log's records.
func records(t testing.TB, path string) (nixl.Header, []nixl.Record) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := nixl.NewReader(f, path)
	if err != nil {
		t.Fatal(err)
	}
	var out []nixl.Record
	for {
		var rec nixl.Record
		if err := r.Next(&rec); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, rec)
	}
	return r.Header(), out
}

// rewrite writes a log's header and records over path.
func rewrite(t testing.TB, path string, h nixl.Header, recs []nixl.Record) {
	t.Helper()
	var b bytes.Buffer
	if err := (&nixl.PlannedLog{Header: h, Records: recs}).Write(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// firstXfer returns the index of a log's first transfer record.
func firstXfer(recs []nixl.Record) int {
	return slices.IndexFunc(recs, func(r nixl.Record) bool { return r.Op == nixl.OpXfer })
}

// nextXfer returns the index of the transfer record after recs[x].
func nextXfer(recs []nixl.Record, x int) int {
	return x + 1 + firstXfer(recs[x+1:])
}

// prepared returns the descriptors of a log's prepared list of handle,
// failing the test when the log has none.
func prepared(t testing.TB, recs []nixl.Record, handle int) []nixl.Desc {
	t.Helper()
	i := slices.IndexFunc(recs, func(r nixl.Record) bool { return r.Op == nixl.OpDList && r.Handle == handle })
	if i < 0 {
		t.Fatalf("no prepared list of handle %d in the log", handle)
	}
	return recs[i].Descs
}

// stateOf returns the index of the state record of the transfer recs[x].
func stateOf(recs []nixl.Record, x int) int {
	return x + slices.IndexFunc(recs[x:], func(r nixl.Record) bool { return r.Op == nixl.OpState && r.ID == recs[x].ID })
}

// findingOf returns the first finding of invariant inv, failing the test
// when there is none.
func findingOf(t testing.TB, res *transfer.Result, inv string) transfer.Finding {
	t.Helper()
	i := slices.IndexFunc(res.Findings, func(f transfer.Finding) bool { return f.Invariant == inv })
	if i < 0 {
		t.Fatalf("no %s finding: %v", inv, invariants(res))
	}
	return res.Findings[i]
}

func invariants(res *transfer.Result) []string {
	var out []string
	for _, f := range res.Findings {
		if !slices.Contains(out, f.Invariant) {
			out = append(out, f.Invariant)
		}
	}
	slices.Sort(out)
	return out
}

// logEdit is a way a log goes wrong: an edit of its first transfer
// (recs[x]).
type logEdit struct {
	name string
	edit func(recs []nixl.Record, x int)
}

// logEdits are the ways a log goes wrong that TestEachInvariant finds and
// TestCoverageOfFaults draws.
var logEdits = []logEdit{
	{"descriptor dropped", func(recs []nixl.Record, x int) {
		recs[x].LocalIDs, recs[x].RemoteIDs = recs[x].LocalIDs[1:], recs[x].RemoteIDs[1:]
	}},
	{"remote ids shifted past the block", func(recs []nixl.Record, x int) {
		recs[x].RemoteIDs[0]++
	}},
	{"remote ids of the next position", func(recs []nixl.Record, x int) {
		recs[x].RemoteIDs[0] = recs[x].RemoteIDs[1]
	}},
	{"local id of another request", func(recs []nixl.Record, x int) {
		y := nextXfer(recs, x) // the second request's transfer
		recs[x].LocalIDs[0] = recs[y].LocalIDs[0]
	}},
	{"remote ids of another request", func(recs []nixl.Record, x int) {
		y := nextXfer(recs, x)
		copy(recs[x].RemoteIDs, recs[y].RemoteIDs)
	}},
	{"lengths differ", func(recs []nixl.Record, x int) {
		recs[x].LocalIDs = recs[x].LocalIDs[:len(recs[x].LocalIDs)-1]
	}},
	{"ERR", func(recs []nixl.Record, x int) {
		recs[stateOf(recs, x)].State = nixl.Err
	}},
}

// auditEdited audits a pull of geometry g whose first log's first
// transfer e changed; it returns the result, the changed records and the
// transfer's index.
func auditEdited(t *testing.T, g geometry, e logEdit) (*transfer.Result, []nixl.Record, int) {
	t.Helper()
	prod, cons, logs := pull(t, t.TempDir(), g)
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	e.edit(recs, x)
	rewrite(t, logs[0], h, recs)
	return audit(t, logs, prod, cons), recs, x
}

// TestEachInvariant: each way a log goes wrong is found, by its
// invariant, at its request, transfer and descriptor.
func TestEachInvariant(t *testing.T) {
	wants := map[string][]string{
		"descriptor dropped":                {transfer.Covered, transfer.Zeroed},
		"remote ids shifted past the block": {transfer.Confined},
		"remote ids of the next position":   {transfer.Aligned},
		"local id of another request":       {transfer.Confined, transfer.Covered, transfer.Twice, transfer.Zeroed},
		"remote ids of another request":     {transfer.Confined},
		"lengths differ":                    {transfer.Aligned, transfer.Covered, transfer.Zeroed},
		"ERR":                               {transfer.Covered, transfer.Failed, transfer.Zeroed},
	}
	g := geometries()[0]
	for _, e := range logEdits {
		t.Run(e.name, func(t *testing.T) {
			want := wants[e.name]
			if want == nil {
				t.Fatalf("no invariants expected of %q", e.name)
			}
			res, recs, x := auditEdited(t, g, e)
			if got := invariants(res); !slices.Equal(got, want) {
				for _, f := range res.Findings {
					t.Log(f.Invariant, f.Message)
				}
				t.Fatalf("invariants %v, want %v", got, want)
			}
			f := res.Findings[0]
			if f.Request != "req-0" || f.Transfer != recs[x].ID {
				t.Fatalf("first finding at request %s transfer %d, want req-0 transfer %d: %s", f.Request, f.Transfer, recs[x].ID, f.Message)
			}
			if res.Verdict != transfer.Violated {
				t.Fatalf("verdict %s", res.Verdict)
			}
		})
	}
}

// TestStaleSourceNamed: a descriptor reading another producer request's
// block (a lapsed lease) is named with the block and the request it
// holds.
func TestStaleSourceNamed(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	recs[x].RemoteIDs[2] = recs[nextXfer(recs, x)].RemoteIDs[2]
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if len(res.Findings) != 1 {
		t.Fatalf("%d findings", len(res.Findings))
	}
	f := res.Findings[0]
	ptable := prod[0].Manifest.Request("req-1").BlockTable["0"]
	want := fmt.Sprintf("read producer block %d (rank pp 0 tp 0), which holds request req-1's KV (position 2)", ptable[2])
	if f.Invariant != transfer.Confined || f.Side != "remote" || f.Descriptor != 2 || !strings.Contains(f.Message, want) ||
		f.Source == nil || f.Source.Request != "req-1" || f.Position != 2 {
		t.Fatalf("finding %+v\nwant %q", f, want)
	}
}

// TestEveryGeometryCatches: on every geometry, a dropped descriptor is an
// uncovered gap at its request, and two remote ids swapped are
// misaligned pairs: neither check passes vacuously where the correct
// pull passes.
func TestEveryGeometryCatches(t *testing.T) {
	for _, g := range geometries() {
		t.Run(g.name, func(t *testing.T) {
			prod, cons, logs := pull(t, t.TempDir(), g)
			li := len(logs) - 1 // the last rank's log
			h, recs := records(t, logs[li])
			x := firstXfer(recs)
			recs[x].LocalIDs, recs[x].RemoteIDs = recs[x].LocalIDs[1:], recs[x].RemoteIDs[1:]
			rewrite(t, logs[li], h, recs)
			res := audit(t, logs, prod, cons)
			if !slices.Contains(invariants(res), transfer.Covered) || res.Findings[0].Request != recs[x].Request {
				t.Fatalf("dropped: findings %v", invariants(res))
			}
			// Swap the remote ids of the first pair with a later one of
			// another remote id.
			h, recs = recordsOf(t, prod, cons, logs[li])
			x = firstXfer(recs)
			ids := recs[x].RemoteIDs
			j := slices.IndexFunc(ids, func(v int) bool { return v != ids[0] })
			if j < 0 {
				t.Skip("one remote id")
			}
			ids[0], ids[j] = ids[j], ids[0]
			rewrite(t, logs[li], h, recs)
			res = audit(t, logs, prod, cons)
			if !slices.Contains(invariants(res), transfer.Aligned) {
				for _, f := range res.Findings {
					t.Log(f.Message)
				}
				t.Fatalf("swapped: findings %v", invariants(res))
			}
		})
	}
}

// recordsOf replans the correct pull and returns a log's records.
func recordsOf(t testing.TB, prod, cons []*layout.Dump, path string) (nixl.Header, []nixl.Record) {
	t.Helper()
	planned, err := nixl.Plan(prod, cons, nixl.PlanOptions{Planner: nixl.PlannerExact})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range planned {
		if filepath.Base(path) == l.Header.Agent+nixl.LogExt {
			return l.Header, l.Records
		}
	}
	t.Fatalf("no planned log for %s", path)
	return nixl.Header{}, nil
}

// TestRequestNotDumped: a transfer of a request the consumer's dumps do
// not hold (a capture connector dumps a sample) is left out with a note;
// the rest is audited, and the dumped request no transfer served (its
// transfer now names another) is a covered finding of its own.
func TestRequestNotDumped(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	recs[nextXfer(recs, x)].Request = "req-9"
	recs[x].RemoteIDs[0]++ // and a finding in the first, which is audited
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if len(res.Requests) != 2 || res.Requests[0].ID != "req-0" || res.Requests[1].ID != "req-1" ||
		len(res.Requests[1].Transfers) != 0 || res.Requests[1].Findings[transfer.Covered] != 1 || len(res.Unresolved) != 0 ||
		!slices.ContainsFunc(res.Notes, func(n string) bool {
			return strings.Contains(n, "1 transfer(s) of requests the consumer's dumps do not hold")
		}) {
		t.Fatalf("requests %+v, unresolved %v, notes %v", res.Requests, res.Unresolved, res.Notes)
	}
	if res.Verdict != transfer.Violated {
		t.Fatalf("verdict %s", res.Verdict)
	}
}

// TestPushWrite: a push (WRITEs in the producer's log, the consumer's
// memory the remote side) is audited as the pull is: clean, and a pair
// whose destination moved into another request's block is confined.
func TestPushWrite(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	_, recs := records(t, logs[0])
	// The producer's view of the same transfers: its list is local, the
	// consumer's remote.
	h := nixl.Header{Agent: *prod[0].Manifest.Parallel.Agent}
	var push []nixl.Record
	for _, r := range recs {
		switch r.Op {
		case nixl.OpDList:
			if r.Agent == nixl.LocalAgent {
				r.Agent = *cons[0].Manifest.Parallel.Agent
			} else {
				r.Agent = nixl.LocalAgent
			}
		case nixl.OpXfer:
			r.Kind = nixl.Write
			r.Local, r.Remote = r.Remote, r.Local
			r.LocalIDs, r.RemoteIDs = r.RemoteIDs, r.LocalIDs
		case nixl.OpRegister:
			continue
		}
		push = append(push, r)
	}
	path := filepath.Join(t.TempDir(), "producer.jsonl")
	rewrite(t, path, h, push)
	// Every log is a producer's, but its transfers write into the
	// consumer's dumps: nothing to say in pairing.
	if res := audit(t, []string{path}, prod, cons); res.Verdict != transfer.Clean || len(res.Requests) != 2 || res.Logs[0].Side != "producer" || len(res.Pairing) != 0 {
		t.Fatalf("push: verdict %s, %d requests, side %q, pairing %q, %v", res.Verdict, len(res.Requests), res.Logs[0].Side, res.Pairing, res.Findings)
	}
	x := firstXfer(push)
	push[x].RemoteIDs[0] = push[nextXfer(push, x)].RemoteIDs[0]
	rewrite(t, path, h, push)
	res := audit(t, []string{path}, prod, cons)
	if f := findingOf(t, res, transfer.Confined); f.Side != "remote" || f.Request != "req-0" || f.Descriptor != 0 || f.Owner == nil || f.Owner.Request != "req-1" {
		t.Fatalf("push: %+v", f)
	}
}

// TestMaxFindings: past Options.MaxFindings the findings are counted, not
// kept, and a note says how many were left out; those kept are findings
// of the uncapped audit (of a transfer and of a request alike).
func TestMaxFindings(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	recs[x].LocalIDs[0] = recs[nextXfer(recs, x)].LocalIDs[0] // another request's block
	rewrite(t, logs[0], h, recs)
	all := audit(t, logs, prod, cons)
	if len(all.Findings) < 3 {
		t.Fatalf("%d findings uncapped, want 3 or more", len(all.Findings))
	}
	for _, max := range []int{1, len(all.Findings) - 1} {
		res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{MaxFindings: max})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Findings) != max {
			t.Fatalf("max %d: %d findings kept", max, len(res.Findings))
		}
		for _, f := range res.Findings {
			if !slices.ContainsFunc(all.Findings, func(g transfer.Finding) bool { return reflect.DeepEqual(f, g) }) {
				t.Fatalf("max %d: finding %+v is none of the uncapped audit's", max, f)
			}
		}
		note := fmt.Sprintf("%d more finding(s) left out (--max-findings)", len(all.Findings)-max)
		if !slices.Contains(res.Notes, note) {
			t.Fatalf("max %d: notes %q, want %q", max, res.Notes, note)
		}
	}
	if slices.ContainsFunc(all.Notes, func(n string) bool { return strings.Contains(n, "left out") }) {
		t.Fatalf("uncapped notes %q", all.Notes)
	}
}
