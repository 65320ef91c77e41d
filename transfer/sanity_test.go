package transfer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
	"github.com/kvaudit/kvaudit/transfer"
)

func hasNote(notes []string, sub string) bool {
	return slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, sub) })
}

// TestSwappedSides: the producer's and the consumer's dumps given the
// wrong way round are not "clean": nothing is audited, the pairing note
// says the sides look swapped, and the consumer ranks (the producer's
// dumps) have no log.
func TestSwappedSides(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	res := audit(t, logs, cons, prod)
	if res.Verdict != transfer.Unresolved || len(res.Findings) > 0 || !hasNote(res.Pairing, "look swapped") ||
		!hasNote(res.Unresolved, "has no log") || !hasNote(res.Unresolved, "nothing could be audited") {
		t.Fatalf("verdict %s, pairing %v, unresolved %v", res.Verdict, res.Pairing, res.Unresolved)
	}
}

// TestOneDumpTwice: one dump given as both sides is said.
func TestOneDumpTwice(t *testing.T) {
	_, cons, logs := pull(t, t.TempDir(), geometries()[0])
	res := audit(t, logs, cons, cons)
	if !hasNote(res.Pairing, "one dump given twice") || res.Verdict == transfer.Clean {
		t.Fatalf("verdict %s, pairing %v", res.Verdict, res.Pairing)
	}
}

// TestLogsOfAnotherRun: logs recorded against other dumps (the same agent
// names, other addresses) are not 117 findings on bytes outside every
// cache: the pairing note says they belong to another run, nothing is
// audited, and the audit is unresolved. A log of an agent no dump names,
// whose memory lies in no cache, matches neither dump.
func TestLogsOfAnotherRun(t *testing.T) {
	g := geometries()[0]
	_, _, logs := pull(t, t.TempDir(), g)
	other := t.TempDir()
	g.p.Seed, g.c.Seed = 9, 9
	for _, c := range []synth.Config{g.p, g.c} {
		if _, err := synth.Write(other, c); err != nil {
			t.Fatal(err)
		}
	}
	oprod, ocons := openSides(t, other)
	res := audit(t, logs, oprod, ocons)
	if len(res.Findings) > 0 || res.Verdict != transfer.Unresolved || !hasNote(res.Pairing, "recorded by another run") {
		t.Fatalf("verdict %s, %d findings, pairing %v, unresolved %v", res.Verdict, len(res.Findings), res.Pairing, res.Unresolved)
	}
	h, recs := records(t, logs[0])
	h.Agent = "stranger"
	for i := range recs {
		if recs[i].Op == nixl.OpDList && recs[i].Agent != nixl.LocalAgent {
			recs[i].Agent = "stranger-producer"
		}
		if recs[i].Op == nixl.OpNotif {
			recs[i].Agent = "stranger-producer"
		}
	}
	rewrite(t, logs[0], h, recs)
	res = audit(t, logs, oprod, ocons)
	if !hasNote(res.Pairing, "matches neither dump") {
		t.Fatalf("pairing %v", res.Pairing)
	}
}

// TestRankWithoutLog: a consumer rank with no log leaves the audit
// unresolved, naming the rank; AllowUnverified audits the rest, with a
// note.
func TestRankWithoutLog(t *testing.T) {
	g := geometries()[4] // tp1-tp2
	prod, cons, logs := pull(t, t.TempDir(), g)
	if len(logs) != 2 {
		t.Fatalf("%d logs", len(logs))
	}
	res := audit(t, logs[:1], prod, cons)
	if res.Verdict != transfer.Unresolved || !hasNote(res.Unresolved, "rank pp 0 tp 1") {
		t.Fatalf("verdict %s, unresolved %v", res.Verdict, res.Unresolved)
	}
	res, err := transfer.Audit(context.Background(), logs[:1], prod, cons, transfer.Options{AllowUnverified: true})
	if err != nil || res.Verdict != transfer.Clean || !hasNote(res.Notes, "rank pp 0 tp 1") {
		t.Fatalf("allowed: %v, verdict %s, notes %v", err, res.Verdict, res.Notes)
	}
}

// TestTransfersFromZero: a log numbering its transfers from 0 is read and
// audited, and a finding of transfer 0 names transfer 0 (a finding of no
// transfer names -1).
func TestTransfersFromZero(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	for i := range recs {
		if op := recs[i].Op; op == nixl.OpXfer || op == nixl.OpState || op == nixl.OpPost {
			recs[i].ID--
		}
	}
	rewrite(t, logs[0], h, recs)
	if res := audit(t, logs, prod, cons); res.Verdict != transfer.Clean {
		t.Fatalf("verdict %s", res.Verdict)
	}
	x := firstXfer(recs)
	recs[x].RemoteIDs[0]++
	recs[nextXfer(recs, x)].Request = "req-9" // req-1: served by no transfer
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if res.Findings[0].Transfer != 0 || res.Findings[0].Invariant != transfer.Confined {
		t.Fatalf("first finding %+v", res.Findings[0])
	}
	last := res.Findings[len(res.Findings)-1]
	if last.Request != "req-1" || last.Transfer != transfer.NoTransfer || last.Invariant != transfer.Covered {
		t.Fatalf("last finding %+v", last)
	}
}

// TestTransferMadeTwice: an id made again is refused, whether the first
// transfer was audited or not (a request the dumps do not hold, of which
// only the id is kept), before or after its state.
func TestTransferMadeTwice(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	y := nextXfer(recs, x)
	recs[x].Request = "req-9"
	recs[y].ID = recs[x].ID
	for i := y; i < len(recs); i++ {
		if recs[i].Op != nixl.OpXfer && recs[i].ID == recs[x].ID+1 {
			recs[i].ID = recs[x].ID + 5
		}
	}
	rewrite(t, logs[0], h, recs)
	_, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{})
	if le := parse.As(err, parse.NIXLLog); le == nil || !strings.Contains(le.Msg, "made twice") {
		t.Fatalf("got %v", err)
	}
}

// TestLeaseNotAudited: logs without timestamps say the lease was not
// audited.
func TestLeaseNotAudited(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	h.Time = nixl.Stamp{}
	for i := range recs {
		recs[i].Time = nixl.Stamp{}
	}
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if res.Verdict != transfer.Clean || !hasNote(res.Notes, "the lease was not audited: the logs carry no timestamps") {
		t.Fatalf("verdict %s, notes %v", res.Verdict, res.Notes)
	}
}

// TestLeaseFlag: --lease (Options.LeaseS) overrides the logs' lease_s, and
// a heartbeat before the lease lapsed extends it by two thirds of it
// (vLLM's _handle_heartbeat).
func TestLeaseFlag(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	// The first READ 6 s after its request's heartbeat: inside the logs'
	// 30 s lease, outside a 5 s one.
	for i := x; i < len(recs); i++ {
		recs[i].Time.Wall += 6e9
		recs[i].Time.Mono += 6e9
	}
	rewrite(t, logs[0], h, recs)
	if res := audit(t, logs, prod, cons); res.Verdict != transfer.Clean {
		t.Fatalf("30 s: verdict %s %v", res.Verdict, invariants(res))
	}
	res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{LeaseS: 5})
	if err != nil || !slices.Equal(invariants(res), []string{transfer.Lease}) || res.Findings[0].Transfer != recs[x].ID ||
		!strings.Contains(res.Findings[0].Message, "after the producer's lease on request req-0 lapsed") {
		t.Fatalf("5 s: %v %v", err, res.Findings)
	}
	// A heartbeat 4 s after the first, before the lapse, extends the lease
	// to 4 + 3 s: the READ at 6 s is inside it.
	hb := recs[x-1]
	if hb.Op != nixl.OpNotif || !strings.HasPrefix(hb.Msg, "HB:") {
		t.Fatalf("record before the READ: %+v", hb)
	}
	hb.Time.Wall += 4e9
	hb.Time.Mono += 4e9
	recs = slices.Insert(recs, x, hb)
	rewrite(t, logs[0], h, recs)
	res, err = transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{LeaseS: 5})
	if err != nil || res.Verdict != transfer.Clean {
		t.Fatalf("heartbeat: %v %v", err, invariants(res))
	}
	// Messages name vLLM's ids, with the random suffix the dumps strip; an
	// id of no dumped request extends nothing.
	for msg, want := range map[string]string{"HB:req-0-0123abcd": transfer.Clean, "HB:req-0-0123abcX": transfer.Violated} {
		recs[x].Msg = msg
		rewrite(t, logs[0], h, recs)
		res, err = transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{LeaseS: 5})
		if err != nil || res.Verdict != want {
			t.Fatalf("heartbeat %q: %v %s", msg, err, res.Verdict)
		}
	}
}

// openSides opens the producer and the consumer synthesized into dir.
func openSides(t *testing.T, dir string) (prod, cons []*layout.Dump) {
	t.Helper()
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

// TestRegisteredNextToACache: a consumer log whose registered memory only
// touches the caches' ends (a range ending where the first cache starts,
// one starting where the last ends) registered none of their bytes: it
// was recorded by another run. A byte more into either cache, and it was
// not: the pull is audited, clean.
func TestRegisteredNextToACache(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	am, err := addrmap.New(cons[0])
	if err != nil {
		t.Fatal(err)
	}
	first, last := am.Regions[0].Start, am.Regions[len(am.Regions)-1].End
	h, orig := records(t, logs[0])
	for _, in := range []uint64{0, 1} {
		for end := range 2 {
			recs := slices.Clone(orig)
			for i := range recs {
				if recs[i].Op != nixl.OpRegister {
					continue
				}
				before, after := nixl.Desc{Addr: first - 4096, Len: 4096}, nixl.Desc{Addr: last, Len: 4096}
				if end == 0 {
					before.Len += in
				} else {
					after.Addr -= in
				}
				recs[i].Descs = []nixl.Desc{before, after}
			}
			rewrite(t, logs[0], h, recs)
			res := audit(t, logs, prod, cons)
			foreign := hasNote(res.Pairing, "recorded by another run")
			if foreign != (in == 0) || (in == 0 && res.Verdict != transfer.Unresolved) || (in == 1 && res.Verdict != transfer.Clean) {
				t.Fatalf("%d byte(s) into the caches at end %d: verdict %s, pairing %q", in, end, res.Verdict, res.Pairing)
			}
		}
	}
}

// TestEmptyStrangerLog: a log of an agent no dump names that registered
// nothing and named no remote agent is said to match neither dump, in
// those words, with no remote agents listed.
func TestEmptyStrangerLog(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	path := filepath.Join(t.TempDir(), "stranger.jsonl")
	rewrite(t, path, nixl.Header{Agent: "stranger"}, nil)
	res := audit(t, append(logs, path), prod, cons)
	want := fmt.Sprintf("log %q (agent \"stranger\") matches neither dump: no dump names its agents, and it registered no memory: the logs and the dumps do not belong together", path)
	if !slices.Equal(res.Pairing, []string{want}) {
		t.Fatalf("pairing %q, want %q", res.Pairing, want)
	}
}

// TestIndexPastTheList: a transfer's index one past its local list (the
// list's length) is refused, naming the file, the line and the field;
// the list's last index is audited (docs/spec.md: an index past its list
// is bad input).
func TestIndexPastTheList(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	n := len(prepared(t, recs, recs[x].Local))
	recs[x].LocalIDs[1] = n - 1
	rewrite(t, logs[0], h, recs)
	if _, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{}); err != nil {
		t.Fatalf("index %d, the list's last: %v", n-1, err)
	}
	recs[x].LocalIDs[1] = n
	rewrite(t, logs[0], h, recs)
	_, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{})
	want := fmt.Sprintf("index %d past the %d descriptors of list %d", n, n, recs[x].Local)
	if le := parse.As(err, parse.NIXLLog); le == nil || le.File != logs[0] || le.Line != recs[x].Line || le.Field != "local_ids[1]" || le.Msg != want {
		t.Fatalf("index %d: %v, want %q at local_ids[1]", n, err, want)
	}
}

// rangesOutside returns n ranges of 4 KiB, one after another, 1 MiB past
// the end of every cache of the dumps: memory a log registers that is no
// cache (vLLM registers other buffers too).
func rangesOutside(t *testing.T, n int, dumps ...[]*layout.Dump) []nixl.Desc {
	t.Helper()
	var end uint64
	for _, side := range dumps {
		for _, d := range side {
			am, err := addrmap.New(d)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range am.Regions {
				end = max(end, r.End)
			}
		}
	}
	out := make([]nixl.Desc, n)
	for i := range out {
		out[i] = nixl.Desc{Addr: end + 1<<20 + uint64(i)*8192, Len: 4096}
	}
	return out
}

// TestManyRegistrationsBeforeTheCaches: a consumer log that registers 70
// ranges that are no cache before it registers its caches (more than the
// pairing notes keep to name) registered memory in its dump's caches: it
// is no log of another run, its pull is audited, clean. A log of an agent
// no dump names that does the same registered memory in the dumps'
// caches: it is said to be renamed, not to match neither dump.
func TestManyRegistrationsBeforeTheCaches(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	reg := slices.IndexFunc(recs, func(r nixl.Record) bool { return r.Op == nixl.OpRegister })
	if reg < 0 || reg > firstXfer(recs) {
		t.Fatalf("the log registers its caches at record %d, its first transfer is %d", reg, firstXfer(recs))
	}
	other := nixl.Record{Op: nixl.OpRegister, Mem: "VRAM", Time: recs[reg].Time, Descs: rangesOutside(t, 70, prod, cons)}
	recs = slices.Insert(recs, reg, other)
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if res.Verdict != transfer.Clean || len(res.Pairing) > 0 || len(res.Requests) != len(cons[0].Manifest.Requests) {
		t.Fatalf("verdict %s, %d requests audited, pairing %q, unresolved %q", res.Verdict, len(res.Requests), res.Pairing, res.Unresolved)
	}
	h.Agent = "renamed"
	rewrite(t, logs[0], h, recs)
	res = audit(t, logs, prod, cons)
	if !hasNote(res.Pairing, `no dump names its agent "renamed", but memory it registered lies in the dumps' caches`) || hasNote(res.Pairing, "matches neither dump") {
		t.Fatalf("renamed: pairing %q", res.Pairing)
	}
}

// TestForeignLogCountsItsRanges: the pairing notes of a log of another
// run, and of a log that matches neither dump, give the number of ranges
// it registered (70), not as many as they keep.
func TestForeignLogCountsItsRanges(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	ranges := rangesOutside(t, 70, prod, cons)
	for i := range recs {
		if recs[i].Op == nixl.OpRegister {
			recs[i].Descs = ranges
		}
	}
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	want := fmt.Sprintf("log %q: its agent %q names the consumer's dump %q, but none of the 70 memory range(s) it registered lies in that dump's caches: the log was recorded by another run, and its transfers were not audited",
		logs[0], h.Agent, cons[0].Path)
	if res.Verdict != transfer.Unresolved || !slices.Contains(res.Pairing, want) {
		t.Fatalf("verdict %s, pairing %q\nwant %q", res.Verdict, res.Pairing, want)
	}
	path := filepath.Join(t.TempDir(), "stranger.jsonl")
	rewrite(t, path, nixl.Header{Agent: "stranger"}, []nixl.Record{{Op: nixl.OpRegister, Mem: "VRAM", Descs: ranges}})
	res = audit(t, append(logs, path), prod, cons)
	want = fmt.Sprintf("log %q (agent \"stranger\") matches neither dump: no dump names its agents, and none of the 70 memory range(s) it registered lies in a dump's caches: the logs and the dumps do not belong together", path)
	if !slices.Contains(res.Pairing, want) {
		t.Fatalf("stranger: pairing %q\nwant %q", res.Pairing, want)
	}
}
