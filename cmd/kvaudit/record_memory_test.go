//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/internal/testlong"
)

// peakRSS runs the kvaudit on PATH with args and returns its peak RSS
// (VmHWM, sampled every 2 ms until it exits).
func peakRSS(t *testing.T, args ...string) int64 {
	t.Helper()
	cmd := exec.Command("kvaudit", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var hwm int64
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("kvaudit %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			return hwm
		case <-time.After(2 * time.Millisecond):
			hwm = max(hwm, procStatus(cmd.Process.Pid, "VmHWM:"))
		}
	}
}

// TestRecordPeakMemory: checksum (its table and -o json) of a record in
// the shape that costs a reader the most for its size (compact JSON, the
// shortest hex) holds it at most three times over beyond what kvaudit
// takes anyway, and diff of two such records less than twice what it
// reads (docs/spec.md §8; it took 15x and 9x). BenchmarkRecordPeakRSS
// measures the full 96 MB.
func TestRecordPeakMemory(t *testing.T) {
	testlong.Skip(t, "writes and reads 64 MB of records, three times")
	data := compactRecord(32 << 20)
	dir := t.TempDir()
	p, c := filepath.Join(dir, "p.record.json"), filepath.Join(dir, "c.record.json")
	for _, f := range []string{p, c} {
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	size := int64(len(data))
	data = nil
	debug.FreeOSMemory()
	base := peakRSS(t, "version")
	for _, x := range []struct {
		args  []string
		input int64
		times int64
	}{
		{[]string{"checksum", p}, size, 3},
		{[]string{"checksum", "-o", "json", p}, size, 3},
		{[]string{"diff", p, c}, 2 * size, 2},
	} {
		got := peakRSS(t, x.args...)
		t.Logf("kvaudit %s: %d MB beyond %d MB, %.2fx the %d MB read", x.args[0], (got-base)>>20, base>>20, float64(got-base)/float64(x.input), x.input>>20)
		if got-base > x.times*x.input {
			t.Errorf("kvaudit %s: peak RSS %d MB beyond the %d MB of kvaudit version, for %d MB of records (want under %dx)",
				strings.Join(x.args[:len(x.args)-1], " "), (got-base)>>20, base>>20, x.input>>20, x.times)
		}
	}
}
