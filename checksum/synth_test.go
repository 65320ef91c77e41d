package checksum_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/side"
)

// tester is what both *testing.T and *rapid.T offer.
type tester interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

// synthSide synthesizes cfg into a new temporary directory and returns
// the rank paths and a function that removes them (rapid's T has no
// TempDir).
func synthSide(t tester, cfg synth.Config) (paths []string, remove func()) {
	t.Helper()
	dir, err := os.MkdirTemp("", "kvaudit-side-")
	if err != nil {
		t.Fatal(err)
	}
	paths, err = synth.Write(dir, cfg)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	return paths, func() { os.RemoveAll(dir) }
}

// computeSide synthesizes cfg and checksums every rank with engine.
func computeSide(t tester, cfg synth.Config, engine checksum.Engine) *side.Checks {
	t.Helper()
	paths, remove := synthSide(t, cfg)
	defer remove()
	return checksumPaths(t, paths, engine)
}

// checksumPaths checksums the side of paths with engine.
func checksumPaths(t tester, paths []string, engine checksum.Engine) *side.Checks {
	t.Helper()
	cRes, err := side.Checksum(context.Background(), side.Input{Paths: paths}, side.ChecksumOptions{Engine: engine, Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	return cRes.Checks
}

// checkExpected compares every check of every request and group with the
// reference computed from the logical KV.
func checkExpected(t tester, cfg synth.Config, got *side.Checks) {
	t.Helper()
	want, err := synth.Expected(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkExpectedOf(t, want, got)
}

// checkEnginesExpected synthesizes cfg once and checks the checksums of
// both engines against one reference computed from the logical KV.
func checkEnginesExpected(t tester, cfg synth.Config) {
	t.Helper()
	paths, remove := synthSide(t, cfg)
	defer remove()
	want, err := synth.Expected(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []checksum.Engine{checksum.Reference{}, checksum.Fast{}} {
		checkExpectedOf(t, want, checksumPaths(t, paths, e))
	}
}

// checkExpectedOf is checkExpected with the reference already computed.
func checkExpectedOf(t tester, want map[string]map[int]synth.ExpectedGroup, got *side.Checks) {
	t.Helper()
	if len(got.Requests) != len(want) {
		t.Fatalf("%d requests, want %d", len(got.Requests), len(want))
	}
	for _, r := range got.Requests {
		if len(r.Unverified) != 0 {
			t.Errorf("request %s: unverified %v", r.ID, r.Unverified)
		}
		wg := want[r.ID]
		if len(r.Groups) != len(wg) {
			t.Fatalf("request %s: %d groups, want %d (skipped %v)", r.ID, len(r.Groups), len(wg), got.Skipped)
		}
		for _, g := range r.Groups {
			e := wg[g.ID]
			if g.Start != e.Start {
				t.Errorf("request %s group %d: start %d, want %d", r.ID, g.ID, g.Start, e.Start)
			}
			if g.MissingReplica {
				t.Errorf("request %s group %d: missing replica", r.ID, g.ID)
			}
			for k, check := range g.Checks {
				if fmt.Sprint(check) != fmt.Sprint(e.Values) {
					t.Errorf("request %s group %d check %d:\n got %x\nwant %x", r.ID, g.ID, k, check, e.Values)
				}
			}
		}
	}
}

func TestSynthMatchesExpected(t *testing.T) {
	for _, preset := range synth.Presets {
		for _, lay := range synth.Layouts {
			for _, tp := range []int{1, 2, 4} {
				cfg := synth.Config{Preset: preset, Layout: lay, TP: tp, PP: 2, Seed: 7}
				t.Run(fmt.Sprintf("%s/%s/tp%d", preset, lay, tp), func(t *testing.T) {
					t.Parallel()
					checkEnginesExpected(t, cfg)
				})
			}
		}
	}
}
