package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/inject"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/layout/synth"
)

// TestInjectNeverWritesInputs: every kind, with and without preparing the
// consumer, and a campaign over the sides, leave every input byte as it
// was (inject hard-links unchanged files: a write through a link would
// show here).
func TestInjectNeverWritesInputs(t *testing.T) {
	dir := t.TempDir()
	for _, f := range synth.Formats {
		for _, role := range []string{"producer", "consumer"} {
			cfg := synth.Config{Preset: "mamba2-hybrid", TP: 2, Requests: 2, Format: f, Role: role}
			if _, err := synth.Write(filepath.Join(dir, f), cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := testfiles.HashTree(t, dir)
	out := t.TempDir()
	n := 0
	for _, f := range synth.Formats {
		side := filepath.Join(dir, f, "consumer")
		for _, k := range append(inject.Kinds(), inject.None) {
			in := side
			if info, _ := inject.InfoOf(k); info.Input == inject.InputPayload {
				in = filepath.Join(dir, f, "producer")
			}
			for _, prep := range [][]string{nil, {"--zero-tails", "--extra-blocks", "1", "--stored"}} {
				n++
				args := append([]string{"inject", in, "--fault", string(k), "--out", filepath.Join(out, fmt.Sprintf("o%d", n))}, prep...)
				if code, _, stderr := run(t, args...); code != ExitOK && !strings.Contains(stderr, "fault "+string(k)+":") {
					t.Errorf("%v: exit %d: %s", args, code, stderr)
				}
			}
		}
		prod := filepath.Join(dir, f, "producer")
		run(t, "diff", prod, side, "--audit-tail", "--stored", "-o", "json")
		run(t, "checksum", "--stored", side)
		if code, _, stderr := run(t, "campaign", "--trials", "1", "--dir", out, prod, side); code != ExitOK {
			t.Errorf("campaign over %s sides: exit %d: %s", f, code, stderr)
		}
	}
	testfiles.AssertUnchanged(t, dir, before)
}
