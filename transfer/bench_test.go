package transfer_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/transfer"
)

// benchAuditEnv makes this test binary, started with it set to a
// directory holding producer/, consumer/ and nixl/, audit them and exit:
// the benchmark measures the audit's peak memory in a process of its own.
const benchAuditEnv = "KVAUDIT_BENCH_AUDIT"

func TestMain(m *testing.M) {
	if dir := os.Getenv(benchAuditEnv); dir != "" {
		res, err := transfer.AuditPaths(context.Background(), []string{filepath.Join(dir, "nixl")},
			[]string{filepath.Join(dir, "producer")}, []string{filepath.Join(dir, "consumer")}, transfer.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pairs := 0
		for _, l := range res.Logs {
			pairs += l.Pairs
		}
		fmt.Printf("%s %d %d\n", res.Verdict, pairs, peakRSS())
		os.Exit(0)
	}
	code := m.Run()
	removeFixtures()
	os.Exit(code)
}

// peakRSS is the process's peak resident memory in bytes since it
// started (Linux's VmHWM; 0 elsewhere). The rusage of a child started by
// fork and exec would count the parent's memory shared before exec.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb * 1024
		}
	}
	return 0
}

var (
	millionOnce sync.Once
	millionDir  string
	millionErr  error
)

// million synthesizes, once, a pull whose one log holds a million
// descriptor pairs (and prepared lists of four million descriptors): 64
// layers, K and V apart, 8 requests of 2,048 tokens in blocks of 2.
func million(b *testing.B) string {
	millionOnce.Do(func() {
		millionDir, millionErr = os.MkdirTemp("", "kvaudit-bench-transfers-")
		if millionErr != nil {
			return
		}
		c := synth.Config{Preset: "tiny", Layers: 64, BlockSize: 2, Requests: 8, Tokens: 2048, Seed: 3}
		if _, millionErr = synth.Write(millionDir, c); millionErr != nil {
			return
		}
		c.Role, c.Transfers = "consumer", true
		_, millionErr = synth.WriteSide(context.Background(), millionDir, c)
	})
	if millionErr != nil {
		b.Fatal(millionErr)
	}
	return millionDir
}

// BenchmarkAuditMillion audits a log of a million descriptor pairs in a
// process of its own and reports its peak resident memory (the child's
// VmHWM, Linux) beside the time: docs/spec.md §13's bound is 300 MB.
func BenchmarkAuditMillion(b *testing.B) {
	dir := million(b)
	st, _ := os.Stat(filepath.Join(dir, "nixl", "consumer-pp0-tp0.jsonl"))
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	var peak int64
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), benchAuditEnv+"="+dir)
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		var verdict string
		var pairs, rss int64
		if _, err := fmt.Sscanf(string(out), "%s %d %d", &verdict, &pairs, &rss); err != nil || verdict != transfer.Clean || pairs != 1<<20 {
			b.Fatalf("audit: %s", out)
		}
		peak = max(peak, rss)
	}
	b.ReportMetric(float64(peak)/1e6, "peak-MB")
	b.ReportMetric(float64(st.Size())/1e6, "log-MB")
	if peak > 300e6 {
		b.Errorf("peak resident memory %d MB, over 300 MB", peak/1e6)
	}
}

// BenchmarkReadLog streams the million-pair log through the reader alone.
func BenchmarkReadLog(b *testing.B) {
	path := filepath.Join(million(b), "nixl", "consumer-pp0-tp0.jsonl")
	st, _ := os.Stat(path)
	b.SetBytes(st.Size())
	b.ResetTimer()
	for range b.N {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		r, err := nixl.NewReader(f, path)
		if err != nil {
			b.Fatal(err)
		}
		var rec nixl.Record
		n := 0
		for err = r.Next(&rec); err == nil; err = r.Next(&rec) {
			n++
		}
		f.Close()
		if err != io.EOF {
			b.Fatalf("record %d: %v", n+1, err)
		}
		if n == 0 {
			b.Fatal("no records")
		}
	}
}
