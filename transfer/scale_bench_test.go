package transfer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
)

// xferLog generates a log of n transfers, a record at a time: the planned
// pull's lists, then n READs of one descriptor pair each, cycling over the
// planned pull's pairs (each delivered again and again from the same
// source: clean), each followed by its state. It holds one line at a
// time, so that the benchmark measures the audit, not the log's memory.
type xferLog struct {
	w     *nixl.Writer
	buf   bytes.Buffer
	setup []nixl.Record
	pairs []nixl.Record
	n, k  int
	rec   nixl.Record
}

func newXferLog(l *nixl.PlannedLog, n int) *xferLog {
	g := &xferLog{n: n}
	g.w = nixl.NewWriter(&g.buf, l.Header)
	for _, r := range l.Records {
		switch r.Op {
		case nixl.OpRegister, nixl.OpDList:
			r.Time = nixl.Stamp{}
			g.setup = append(g.setup, r)
		case nixl.OpXfer:
			for i := range r.LocalIDs {
				p := r
				p.Time = nixl.Stamp{}
				p.LocalIDs, p.RemoteIDs = []int{r.LocalIDs[i]}, []int{r.RemoteIDs[i]}
				g.pairs = append(g.pairs, p)
			}
		}
	}
	for i := range g.setup {
		g.w.Write(&g.setup[i])
	}
	g.w.Flush()
	return g
}

func (g *xferLog) Read(p []byte) (int, error) {
	for g.buf.Len() < len(p) && g.k < g.n {
		g.rec = g.pairs[g.k%len(g.pairs)]
		g.rec.ID = g.k
		g.w.Write(&g.rec)
		g.w.Write(&nixl.Record{Op: nixl.OpState, ID: g.k, State: nixl.Done})
		g.k++
		g.w.Flush()
	}
	if g.buf.Len() == 0 {
		return 0, io.EOF
	}
	return g.buf.Read(p)
}

// BenchmarkAuditTransfers audits logs of 10^4, 10^5 and 10^6 transfers
// (one descriptor pair each, over 16 requests) and reports the time per
// transfer: flat in the log's length (transfers are indexed by id), as
// docs/transfers.md quotes it.
func BenchmarkAuditTransfers(b *testing.B) {
	dir := b.TempDir()
	p := synth.Config{Preset: "tiny", Layers: 2, BlockSize: 2, Requests: 16, Tokens: 8, Seed: 3}
	if _, err := synth.Write(dir, p); err != nil {
		b.Fatal(err)
	}
	c := p
	c.Role, c.ZeroTails = "consumer", true
	if _, err := synth.Write(dir, c); err != nil {
		b.Fatal(err)
	}
	prod, err := layout.OpenPaths([]string{dir + "/producer"})
	if err != nil {
		b.Fatal(err)
	}
	defer layout.CloseAll(prod)
	cons, err := layout.OpenPaths([]string{dir + "/consumer"})
	if err != nil {
		b.Fatal(err)
	}
	defer layout.CloseAll(cons)
	planned, err := nixl.Plan(prod, cons, nixl.PlanOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1e4, 1e5, 1e6} {
		b.Run(fmt.Sprintf("transfers=%d", n), func(b *testing.B) {
			for range b.N {
				res, err := transfer.AuditReader(context.Background(), newXferLog(planned[0], n), "bench.jsonl", prod, cons, transfer.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if res.Verdict != transfer.Clean || res.Logs[0].Xfers != n {
					b.Fatalf("verdict %s, %d transfers: %v %v", res.Verdict, res.Logs[0].Xfers, res.Unresolved, res.Notes)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/transfer")
		})
	}
}
