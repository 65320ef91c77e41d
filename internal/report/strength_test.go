package report_test

import (
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/verify"
)

// TestRunnerCheckSaid: the runner check is said in every format of diff:
// the table's note (what was recomputed, the probability of catching one
// wrong slot) and title, JSON's runner_check and verdict, and a JUnit
// case that errors when rows only the runner read were not accepted.
func TestRunnerCheckSaid(t *testing.T) {
	c := &checksum.EngineCheck{Engine: "cuda", Requests: 1, HostSlots: 4096, Checked: 512, Sample: "default", CatchProbability: 0.125, DeviceSlots: 7}
	res := &verify.DiffResult{Verdict: verify.Verified, EngineCheck: c, Requests: []*verify.RequestVerdict{{ID: "r", ProducerID: "r", Verdict: verify.Verified,
		Groups: []*verify.GroupVerdict{{ID: 0, Verdict: verify.Verified, Strength: verify.StrengthMix, Map: []verify.PositionState{verify.PosVerified}}}}}}
	render := func(f report.Format) string {
		t.Helper()
		var b strings.Builder
		if err := report.RenderDiffAudits(&b, res, nil, f, report.DiffOptions{}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	note := "note: runner check: the cpu engine recomputed 512 of the 4096 host-resident output slots the cuda runner computed in 1 request(s) (--runner-check default): a single wrong slot is caught with probability 12.5% (--runner-check all: always); 7 part(s) of slots from rows in device memory (cuda_ipc) are the runner's alone, unchecked: unverified unless --trust-runner"
	if out := render(report.FormatTable); !strings.Contains(out, note) || !strings.Contains(out, "# kvaudit diff: unverified (the comparison: verified; the runner check: rows only the runner read, unchecked)") {
		t.Errorf("table:\n%s", out)
	}
	js := render(report.FormatJSON)
	for _, want := range []string{`"verdict": "unverified"`, `"comparison_verdict": "verified"`, `"host_slots": 4096`, `"checked": 512`, `"catch_probability": 0.125`, `"device_slots": 7`, `"trusted": false`} {
		if !strings.Contains(js, want) {
			t.Errorf("JSON lacks %s:\n%s", want, js)
		}
	}
	if x := render(report.FormatJUnit); !strings.Contains(x, `<testcase name="runner check" classname="kvaudit diff" time="0.000">`) || !strings.Contains(x, `<error message="7 output slot part(s)`) {
		t.Errorf("JUnit:\n%s", x)
	}
	c.Trusted = true
	if x := render(report.FormatJUnit); strings.Contains(x, "<error") || !strings.Contains(x, "accepted by --trust-runner") {
		t.Errorf("JUnit, trusted:\n%s", x)
	}
}
