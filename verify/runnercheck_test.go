package verify_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// checkedEngine is the cpu engine reporting a runner's check.
type checkedEngine struct {
	checksum.Fast
	check checksum.EngineCheck
}

func (e checkedEngine) Checked() checksum.EngineCheck { return e.check }

// TestCompareRunnerCheck: what an untrusted engine had checked is the
// comparison's (DiffResult.EngineCheck); rows only it read (device
// memory) make a verified comparison unverified, saying why, unless
// trusted (--trust-runner); the cpu engine reports nothing.
func TestCompareRunnerCheck(t *testing.T) {
	dir := t.TempDir()
	cfg := synth.Config{Preset: "tiny"}
	if _, err := synth.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Role = "consumer"
	if _, err := synth.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	P := side.Input{Paths: []string{filepath.Join(dir, "producer")}}
	C := side.Input{Paths: []string{filepath.Join(dir, "consumer")}}
	run := func(e checksum.Engine) *verify.Result {
		t.Helper()
		res, err := verify.Compare(context.Background(), P, C, verify.CompareOptions{Engine: e})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run(nil); res.Diff.EngineCheck != nil || res.Verdict() != verify.Verified {
		t.Fatalf("cpu engine: %+v, %s", res.Diff.EngineCheck, res.Verdict())
	}
	host := checksum.EngineCheck{Engine: "cuda", Requests: 2, HostSlots: 4, Checked: 4, Sample: "default", CatchProbability: 1}
	if res := run(checkedEngine{check: host}); res.Diff.EngineCheck == nil || *res.Diff.EngineCheck != host || res.Verdict() != verify.Verified {
		t.Fatalf("host rows only: %+v, %s", res.Diff.EngineCheck, res.Verdict())
	}
	dev := host
	dev.DeviceSlots = 3
	res := run(checkedEngine{check: dev})
	if res.Diff.Verdict != verify.Verified || res.Verdict() != verify.Unverified ||
		!strings.HasPrefix(res.Summary(), "unverified: 3 output slot part(s) sum rows in device memory (cuda_ipc) that only the cuda runner read") || !strings.Contains(res.Summary(), "--trust-runner") {
		t.Errorf("device rows unchecked: %s (comparison %s): %q", res.Verdict(), res.Diff.Verdict, res.Summary())
	}
	dev.Trusted = true
	if res := run(checkedEngine{check: dev}); res.Verdict() != verify.Verified || res.Summary() != "" {
		t.Errorf("device rows trusted: %s %q", res.Verdict(), res.Summary())
	}
}
