package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/layout"
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

// TestBoundSettings: inject's and campaign's flags bound to option fields
// take their value from the command line, else the environment, else the
// command's section of kvaudit.yaml, else a top-level key, else the
// default, as every other setting does.
func TestBoundSettings(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Config{Preset: "tiny", TP: 2, Requests: 2}); err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(dir, "producer")
	cfg := filepath.Join(dir, "kvaudit.yaml")
	if err := os.WriteFile(cfg, []byte("seed: 4\ninject:\n  bits: 3\n  add-stored: true\ncampaign:\n  trials: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	// fault injects a bit flip and returns the fault, how many bits it
	// flipped, and whether the copy holds stored checksums (--add-stored).
	fault := func(args ...string) (f *inject.Fault, bits string, stored bool) {
		t.Helper()
		n++
		out := filepath.Join(dir, fmt.Sprintf("o%d", n))
		code, stdout, stderr := run(t, append([]string{"inject", side, "--config", cfg, "--fault", "bit-flip", "--out", out, "-o", "json"}, args...)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &f); err != nil {
			t.Fatal(err)
		}
		paths, _, err := layout.FindDumps([]string{out})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range open(t, paths) {
			for _, r := range d.Manifest.Requests {
				stored = stored || len(r.StoredChecksums) > 0
			}
		}
		return f, strings.Fields(f.Description)[1], stored
	}
	if f, bits, stored := fault(); f.Seed != 4 || bits != "3" || !stored {
		t.Errorf("kvaudit.yaml: seed %d, %s bit(s), stored checksums %v; want seed 4 (top level), 3 bits and stored checksums (inject section)", f.Seed, bits, stored)
	}
	t.Setenv("KVAUDIT_SEED", "7")
	t.Setenv("KVAUDIT_BITS", "2")
	t.Setenv("KVAUDIT_ADD_STORED", "false")
	if f, bits, stored := fault(); f.Seed != 7 || bits != "2" || stored {
		t.Errorf("environment: seed %d, %s bit(s), stored checksums %v; want seed 7, 2 bits, none", f.Seed, bits, stored)
	}
	if f, bits, stored := fault("--seed", "9", "--bits", "5", "--add-stored"); f.Seed != 9 || bits != "5" || !stored {
		t.Errorf("flags: seed %d, %s bit(s), stored checksums %v; want seed 9, 5 bits, stored checksums", f.Seed, bits, stored)
	}

	code, stdout, stderr := run(t, "campaign", "--config", cfg, "--fault", "bit-flip", "-o", "json", "--dir", dir)
	if code != ExitOK {
		t.Fatalf("campaign: exit %d: %s", code, stderr)
	}
	var res struct {
		Seed   string `json:"seed"`
		Trials int    `json:"trials_per_kind"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res.Trials != 2 || res.Seed != "0x0000000000000007" {
		t.Errorf("campaign: %d trials, seed %s; want 2 (campaign section), 0x...07 (environment)", res.Trials, res.Seed)
	}
}

// open opens a side's dumps for the test.
func open(t *testing.T, paths []string) []*layout.Dump {
	t.Helper()
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { layout.CloseAll(dumps) })
	return dumps
}
