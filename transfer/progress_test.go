package transfer_test

import (
	"context"
	"os"
	"testing"

	"github.com/kvaudit/kvaudit/transfer"
)

// TestProgressAddsUpToLogBytes: an audit tells Options.Progress every
// byte of every log it reads, and the audit's result is the one without
// a progress function.
func TestProgressAddsUpToLogBytes(t *testing.T) {
	var g geometry
	for _, c := range geometries() {
		if c.name == "tp1-tp2" { // two consumer ranks, two logs
			g = c
		}
	}
	prod, cons, logs := pull(t, t.TempDir(), g)
	var want int64
	for _, l := range logs {
		fi, err := os.Stat(l)
		if err != nil {
			t.Fatal(err)
		}
		want += fi.Size()
	}
	if len(logs) < 2 || want == 0 {
		t.Fatalf("the geometry %s wrote %d logs of %d bytes; the test needs two or more", g.name, len(logs), want)
	}
	var got int64
	calls := 0
	res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{Progress: func(n int64) { got += n; calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("progress told %d bytes in %d calls; the logs hold %d", got, calls, want)
	}
	plain := audit(t, logs, prod, cons)
	if res.Verdict != plain.Verdict || len(res.Findings) != len(plain.Findings) || len(res.Logs) != len(plain.Logs) {
		t.Errorf("with progress: %s, %d findings, %d logs; without: %s, %d, %d", res.Verdict, len(res.Findings), len(res.Logs), plain.Verdict, len(plain.Findings), len(plain.Logs))
	}
}
