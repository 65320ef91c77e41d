package transfer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/transfer"
)

// lateBy moves every record from recs[x] on by s seconds.
func lateBy(recs []nixl.Record, x int, s int64) {
	lateByNS(recs, x, s*1e9)
}

// lateByNS moves every record from recs[x] on by ns nanoseconds.
func lateByNS(recs []nixl.Record, x int, ns int64) {
	for i := x; i < len(recs); i++ {
		recs[i].Time.Wall += ns
		recs[i].Time.Mono += ns
	}
}

// TestLeaseFromWhichLog: the lease is the producer's log's lease_s where a
// producer's log gives one, else the consumer's log's, and the finding
// says which log it came from.
func TestLeaseFromWhichLog(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	if !h.HasLease || h.LeaseS != nixl.VLLMLease {
		t.Fatalf("planned header %+v: want lease_s %d", h, nixl.VLLMLease)
	}
	x := firstXfer(recs)
	// 6 s late: inside the consumer's log's 30 s, outside a 5 s lease.
	lateBy(recs, x, 6)
	rewrite(t, logs[0], h, recs)
	if res := audit(t, logs, prod, cons); res.Verdict != transfer.Clean {
		t.Fatalf("30 s from the consumer's log: verdict %s %v", res.Verdict, invariants(res))
	}

	// A producer's log (no transfers of its own) with lease_s 5: the
	// producer's lease wins over the consumer's log's 30 s.
	plog := filepath.Join(t.TempDir(), "producer.jsonl")
	rewrite(t, plog, nixl.Header{Agent: *prod[0].Manifest.Parallel.Agent, LeaseS: 5, HasLease: true, Time: h.Time}, nil)
	for _, order := range [][]string{{logs[0], plog}, {plog, logs[0]}} {
		res := audit(t, order, prod, cons)
		if !slices.Equal(invariants(res), []string{transfer.Lease}) {
			t.Fatalf("producer's lease_s 5, logs %v: invariants %v", order, invariants(res))
		}
		want := fmt.Sprintf("lease from lease_s of the producer's log %q", plog)
		if m := res.Findings[0].Message; !strings.Contains(m, want) || !strings.Contains(m, "(5 s from ") {
			t.Fatalf("logs %v: finding %q, want %q", order, m, want)
		}
	}

	// The consumer's log alone, 31 s late: its own lease_s, named as the
	// log's (not the producer's).
	lateBy(recs, x, 25)
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if !slices.Equal(invariants(res), []string{transfer.Lease}) {
		t.Fatalf("31 s late: invariants %v", invariants(res))
	}
	m := res.Findings[0].Message
	if !strings.Contains(m, fmt.Sprintf("lease from lease_s of log %q)", logs[0])) || !strings.Contains(m, "(30 s from ") {
		t.Fatalf("31 s late: finding %q", m)
	}
	// Two producer's logs: the first read gives the lease.
	plog2 := filepath.Join(t.TempDir(), "producer2.jsonl")
	rewrite(t, plog2, nixl.Header{Agent: *prod[0].Manifest.Parallel.Agent, LeaseS: 100, HasLease: true, Time: h.Time}, nil)
	for _, c := range []struct {
		logs []string
		want string
	}{
		{[]string{logs[0], plog, plog2}, transfer.Violated},
		{[]string{logs[0], plog2, plog}, transfer.Clean},
	} {
		res, err := transfer.Audit(context.Background(), c.logs, prod, cons, transfer.Options{})
		if err != nil || res.Verdict != c.want {
			t.Fatalf("logs %v: %v, verdict %s, want %s", c.logs, err, res.Verdict, c.want)
		}
	}
}

// TestHeartbeatByEngineID: a heartbeat naming a producer request by the
// engine's id of it (the manifest's engine_request_id) extends that
// request's lease; an engine id no dumped request has extends nothing.
func TestHeartbeatByEngineID(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	lateBy(recs, x, 6)
	hb := recs[x-1]
	if hb.Op != nixl.OpNotif || !strings.HasPrefix(hb.Msg, "HB:") {
		t.Fatalf("record before the READ: %+v", hb)
	}
	// The heartbeat 4 s after the first: inside a 5 s lease, extending it
	// to 4 + 3 s, past the READ at 6 s.
	hb.Time.Wall += 4e9
	hb.Time.Mono += 4e9
	recs = slices.Insert(recs, x, hb)
	x++
	for i := range prod[0].Manifest.Requests {
		r := &prod[0].Manifest.Requests[i]
		r.EngineRequestID = "engine-" + r.ID
	}
	opts := transfer.Options{LeaseS: 5}
	for msg, want := range map[string]string{
		"HB:engine-req-0": transfer.Clean,
		"HB:engine-req-9": transfer.Violated,
		"HB:req-0":        transfer.Clean,
		"HB:req-1":        transfer.Violated,
	} {
		recs[x-1].Msg = msg
		rewrite(t, logs[0], h, recs)
		res, err := transfer.Audit(context.Background(), logs, prod, cons, opts)
		if err != nil || res.Verdict != want {
			t.Fatalf("heartbeat %q: %v, verdict %s, want %s %v", msg, err, res.Verdict, want, invariants(res))
		}
	}
}

// TestLeaseStartsAtANotification: the lease starts at the first record
// naming the request, a notification ("REQ:N") as well as a heartbeat: a
// READ 6 s after a notification naming its request is past a 5 s lease,
// and one after a notification naming another request is not (its lease
// starts at its own transfer).
func TestLeaseStartsAtANotification(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	if recs[x-1].Op != nixl.OpNotif || recs[x-1].Msg != "HB:req-0" {
		t.Fatalf("record before the READ: %+v", recs[x-1])
	}
	lateBy(recs, x, 6)
	for msg, want := range map[string]string{
		"req-0:1":          transfer.Violated,
		"req-0-0123abcd:7": transfer.Violated,
		"req-9:1":          transfer.Clean,
		"req-0-0123abcX:7": transfer.Clean,
		"req-0":            transfer.Clean,
	} {
		recs[x-1].Msg = msg
		rewrite(t, logs[0], h, recs)
		res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{LeaseS: 5})
		if err != nil || res.Verdict != want {
			t.Fatalf("notification %q: %v, verdict %s, want %s %v", msg, err, res.Verdict, want, invariants(res))
		}
		// No heartbeat of req-0 (the notification replaced it): nothing
		// extended the lease.
		if m := res.Findings; want == transfer.Violated && (!strings.Contains(m[0].Message, "the first record naming it;") || strings.Contains(m[0].Message, "heartbeat")) {
			t.Fatalf("notification %q: %s", msg, res.Findings[0].Message)
		}
		// One READ of the log's two (one per request) is late.
		if n := len(slices.DeleteFunc(slices.Clone(recs), func(r nixl.Record) bool { return r.Op != nixl.OpXfer })); n != 2 {
			t.Fatalf("%d transfers in the log, want 2", n)
		}
		if note := "lease: 1 of 2 READ(s) posted after the lease lapsed (5 s, --lease)"; (want == transfer.Violated) != hasNote(res.Notes, note) {
			t.Fatalf("notification %q: notes %q, want %q: %v", msg, res.Notes, note, want == transfer.Violated)
		}
	}
}

// TestLeaseBoundaries: with a 5 s lease from req-0's heartbeat (the
// record before its READ), a READ posted exactly 5 s later is in time,
// one posted a nanosecond or 1.5 s later is late by that much; a
// heartbeat exactly at the lapse extends the lease by two thirds of it
// (3 s), one a nanosecond after it does not.
func TestLeaseBoundaries(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, orig := records(t, logs[0])
	x := firstXfer(orig)
	hb, post := orig[x-1], orig[x+1]
	if hb.Msg != "HB:req-0" || post.Op != nixl.OpPost || post.ID != orig[x].ID {
		t.Fatalf("records around the READ: %+v, %+v", hb, post)
	}
	at := func(recs []nixl.Record) int64 {
		return recs[slices.IndexFunc(recs, func(r nixl.Record) bool { return r.Op == nixl.OpPost })].Time.Wall
	}
	for _, tc := range []struct {
		name     string
		hb, read int64 // after the first heartbeat; hb < 0: none
		late     string
	}{
		{"at the lapse", -1, 5e9, ""},
		{"a nanosecond after", -1, 5e9 + 1, "0.000"},
		{"1.5 s after", -1, 6.5e9, "1.500"},
		{"heartbeat at the lapse", 5e9, 7.5e9, ""},
		{"heartbeat a nanosecond after", 5e9 + 1, 7.5e9, "2.500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := slices.Clone(orig)
			lateByNS(recs, x, tc.read-(post.Time.Wall-hb.Time.Wall))
			if tc.hb >= 0 {
				again := hb
				again.Time.Wall += tc.hb
				again.Time.Mono += tc.hb
				recs = slices.Insert(recs, x, again)
			}
			if got := at(recs) - hb.Time.Wall; got != tc.read {
				t.Fatalf("READ posted %d ns after the heartbeat, want %d", got, tc.read)
			}
			rewrite(t, logs[0], h, recs)
			res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{LeaseS: 5})
			if err != nil {
				t.Fatal(err)
			}
			if tc.late == "" {
				if res.Verdict != transfer.Clean {
					t.Fatalf("verdict %s: %v", res.Verdict, res.Findings)
				}
				return
			}
			// The lease started, and was last extended, at the first
			// heartbeat (the log's clock starts at 2026-01-01 00:00:00).
			want := fmt.Sprintf(", %s s after the producer's lease on request req-0 lapsed (5 s from 2026-01-01 00:00:00.005 UTC, the first record naming it, extended by a heartbeat at 2026-01-01 00:00:00.005 UTC; lease from --lease)", tc.late)
			note := "lease: 1 of 2 READ(s) posted after the lease lapsed (5 s, --lease); the lease starts at the first record naming the request, heartbeats extend it by 3 s"
			if len(res.Findings) != 1 || res.Findings[0].Invariant != transfer.Lease || !strings.Contains(res.Findings[0].Message, want) || !hasNote(res.Notes, note) {
				t.Fatalf("findings %+v, notes %q\nwant %q and %q", res.Findings, res.Notes, want, note)
			}
		})
	}
}

// TestLeaseOfZeroSeconds: a log whose header gives lease_s 0 gives no
// lease (every READ would be late): the lease is not audited, and says
// so; the pull is clean.
func TestLeaseOfZeroSeconds(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	h.LeaseS = 0
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if res.Verdict != transfer.Clean || !hasNote(res.Notes, "the lease was not audited: no log's header gives lease_s, and no --lease was given") {
		t.Fatalf("verdict %s, notes %q", res.Verdict, res.Notes)
	}
}
