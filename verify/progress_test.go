package verify

import (
	"context"
	"github.com/kvaudit/kvaudit/side"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// TestProgressHooks: Compare starts Options.Progress for the consumer's,
// then the producer's checksums, and the engines report every cell byte
// each side's plans read through it; Step names the audits; CheckStored
// names its work too. Without hooks nothing changes.
func TestProgressHooks(t *testing.T) {
	dir := t.TempDir()
	for _, role := range []string{"producer", "consumer"} {
		if _, err := synth.Write(dir, synth.Config{Preset: "swa", TP: 2, Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	type hooked struct {
		name        string
		want, added atomic.Int64
		ended       bool
	}
	var sides []*hooked
	var steps []string
	opts := CompareOptions{
		AuditTail: true,
		Progress: func(name string, dumps []*layout.Dump, requests []string) (func(int64), func()) {
			s := &hooked{name: name}
			for _, d := range dumps {
				p, _, err := checksum.NewPlan(d, requests)
				if err != nil {
					t.Fatal(err)
				}
				s.want.Add(p.Bytes())
			}
			sides = append(sides, s)
			return func(n int64) { s.added.Add(n) }, func() { s.ended = true }
		},
		Step: func(what string) func() { steps = append(steps, what); return func() {} },
	}
	in := func(role string) side.Input { return side.Input{Arg: filepath.Join(dir, role)} }
	res, err := Compare(context.Background(), in("producer"), in("consumer"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Diff.Verdict != Verified || res.Audits == nil || res.Audits.Tail == nil {
		t.Fatalf("comparison %s, audits %+v", res.Diff.Verdict, res.Audits)
	}
	if len(sides) != 2 || sides[0].name != "consumer" || sides[1].name != "producer" {
		t.Fatalf("progress started for %v", sides)
	}
	for _, s := range sides {
		if s.want.Load() == 0 || s.added.Load() != s.want.Load() || !s.ended {
			t.Errorf("%s: %d of %d bytes reported, ended %v", s.name, s.added.Load(), s.want.Load(), s.ended)
		}
	}
	if !slices.Equal(steps, []string{"auditing the consumer's dumps"}) {
		t.Errorf("steps %q", steps)
	}
	steps = nil
	if _, err := CheckStored(context.Background(), in("consumer"), StoredOptions{Step: opts.Step}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(steps, []string{"computing the stored checksums"}) {
		t.Errorf("CheckStored steps %q", steps)
	}
}
