package kernels_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/kerneltest"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
)

// variants are the ways the runner may execute a plan: staged or in place,
// each load variant, and batches small enough that every row is a launch.
var variants = []kernels.Model{
	{},
	{InPlace: true},
	{Mode: kernels.ModeScalar},
	{Mode: kernels.ModeGather, InPlace: true},
	{BatchBytes: 1, MaxRows: 1},
}

func run(t testing.TB, e checksum.Engine, p *ckplan.Plan) []uint64 {
	t.Helper()
	out := make([]uint64, p.Outputs)
	if err := e.Run(context.Background(), p, out); err != nil {
		t.Fatalf("%s: %v", e.Name(), err)
	}
	return out
}

// runMix runs a copy of the plan that asks for kvaudit's mix check too
// (Plan.Mix): vLLM's checksums, then the unused slopes, then the mix
// checks.
func runMix(t interface {
	Helper()
	Fatalf(string, ...any)
}, e checksum.Engine, p *ckplan.Plan) []uint64 {
	t.Helper()
	q := *p
	q.Mix = true
	out := make([]uint64, 3*p.Outputs)
	if err := e.Run(context.Background(), &q, out); err != nil {
		t.Fatalf("%s: %v", e.Name(), err)
	}
	return out
}

// TestModelOddCases runs the hand-built geometries through every variant
// and checks that each exercises the corner it was built for.
func TestModelOddCases(t *testing.T) {
	for _, c := range kerneltest.OddCases() {
		t.Run(c.Name, func(t *testing.T) {
			want := c.Reference()
			wantMix := runMix(t, checksum.Reference{}, c.Plan())
			for _, m := range variants {
				if got := run(t, m, c.Plan()); !slices.Equal(got, want) {
					t.Errorf("%+v:\n got %x\nwant %x", m, got, want)
				}
				if got := runMix(t, m, c.Plan()); !slices.Equal(got, wantMix) {
					t.Errorf("%+v, with the mix check:\n got %x\nwant %x", m, got, wantMix)
				}
			}
		})
	}
}

// TestOddCasesReachTheirCorners checks the decomposition each odd case was
// built to exercise, so that the cases above cannot silently stop covering
// it.
func TestOddCasesReachTheirCorners(t *testing.T) {
	want := map[string]func(k kernels.Kernel, inPlace kernels.Kernel) string{
		"partial": func(k, _ kernels.Kernel) string { return check(k.Vec == 2 && k.BlockTokens == 8, k) },
		"tiles": func(k, _ kernels.Kernel) string {
			return check(k.Vec == 2 && k.Lanes == 525 && k.Tiles == 2 && k.TileLanes == 263 && k.Threads == 288, k)
		},
		"chunks": func(k, _ kernels.Kernel) string {
			return check(k.Lanes == 256 && k.TokenLanes == 2 && k.ChunkTokens == 32 && k.Chunks == 5, k)
		},
		"wrap": func(k, _ kernels.Kernel) string {
			return check(k.TokenLanes == 8 && k.KernelTokens == 3 && k.BlockTokens == 12, k)
		},
		"odd-pieces": func(k, _ kernels.Kernel) string { return check(k.Vec == 1 && k.Gather == 0 && k.Width == 8, k) },
		"narrow2":    func(k, _ kernels.Kernel) string { return check(k.Width == 2 && k.Gather == 0, k) },
		"narrow4":    func(k, _ kernels.Kernel) string { return check(k.Width == 4 && k.Gather == 0, k) },
		"straddle":   func(k, _ kernels.Kernel) string { return check(k.Gather == 1, k) },
		"misaligned": func(k, ip kernels.Kernel) string { return check(k.Vec == 2 && ip.Gather == 1, k) },
		"wide":       func(k, _ kernels.Kernel) string { return check(k.Vec == 2 && k.Lanes == 720 && k.Tiles == 2, k) },
	}
	for _, c := range kerneltest.OddCases() {
		staged, err := kernels.NewJob(c.Cache, c.Rows, kernels.JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inPlace, err := kernels.NewJob(c.Cache, c.Rows, kernels.JobOptions{InPlace: true, Base: uint64(c.Cache.Cells.FileOffset)})
		if err != nil {
			t.Fatal(err)
		}
		if f := want[c.Name]; f != nil {
			if msg := f(staged.Kernel, inPlace.Kernel); msg != "" {
				t.Errorf("%s: %s", c.Name, msg)
			}
		}
	}
	// Scalar mode on "wide": 1440 lanes in 3 tiles of 480.
	for _, c := range kerneltest.OddCases() {
		if c.Name != "wide" {
			continue
		}
		j, _ := kernels.NewJob(c.Cache, c.Rows, kernels.JobOptions{Mode: kernels.ModeScalar})
		if k := j.Kernel; k.Lanes != 1440 || k.Tiles != 3 || k.TileLanes != 480 || k.Threads != 480 {
			t.Errorf("wide, scalar: %+v", k)
		}
	}
}

func check(ok bool, k kernels.Kernel) string {
	if ok {
		return ""
	}
	return fmt.Sprintf("geometry %+v", k)
}

// TestModelRandomGeometry is the property: for any geometry, rows and
// variant, the model equals the reference.
func TestModelRandomGeometry(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := kerneltest.Random(rt)
		m := variants[rapid.IntRange(0, len(variants)-1).Draw(rt, "variant")]
		out := make([]uint64, c.Outputs)
		if err := m.Run(context.Background(), c.Plan(), out); err != nil {
			rt.Fatal(err)
		}
		if want := c.Reference(); !slices.Equal(out, want) {
			rt.Fatalf("%+v:\n got %x\nwant %x", m, out, want)
		}
		if got, want := runMix(rt, m, c.Plan()), runMix(rt, checksum.Reference{}, c.Plan()); !slices.Equal(got, want) {
			rt.Fatalf("%+v, with the mix check:\n got %x\nwant %x", m, got, want)
		}
		// Under a random run key (docs/spec.md §14), as the reference.
		keyed := c.Plan()
		keyed.MixKey = rapid.Uint64().Draw(rt, "mix key")
		if got, want := runMix(rt, m, keyed), runMix(rt, checksum.Reference{}, keyed); !slices.Equal(got, want) {
			rt.Fatalf("%+v, with the mix check under key %#x:\n got %x\nwant %x", m, keyed.MixKey, got, want)
		}
	})
}

// TestModelMatchesReferenceOnSynth compares the model with the reference
// engine on every rank of every synth configuration (presets, layouts, TP,
// PP, kernel-block splits, formats).
func TestModelMatchesReferenceOnSynth(t *testing.T) {
	for i, cfg := range kerneltest.SynthConfigs() {
		t.Run(kerneltest.Name(cfg), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			paths, err := synth.Write(dir, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				d, err := layout.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				plan, _, err := checksum.NewPlan(d, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(plan.Tasks) == 0 {
					t.Fatalf("%s: nothing to checksum", p)
				}
				want := runMix(t, checksum.Reference{}, plan)
				m := variants[i%len(variants)]
				for _, m := range []kernels.Model{{}, m} {
					if got := runMix(t, m, plan); !slices.Equal(got, want) {
						t.Errorf("%s, %+v:\n got %x\nwant %x", p, m, got, want)
					}
				}
			}
		})
	}
}

// TestModelGolden runs the worked example of docs/spec.md §1 and §14
// (checksum/testdata/golden/spec1.txt) through the model.
func TestModelGolden(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "checksum", "testdata", "golden", "spec1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want, wantMix []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "checksums: "); ok {
			want = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "mix: "); ok {
			wantMix = strings.Fields(v)
		}
	}
	if len(want) != 2 || len(wantMix) != 2 {
		t.Fatalf("spec1.txt: want 2 checksums and 2 mix checks, got %q, %q", want, wantMix)
	}
	cfg := synth.Config{Preset: "tiny", Tokens: 3, Requests: 1, Format: "dir",
		Values: func(L, h, t, p int) uint64 { return uint64((L+1)*1000 + (h+1)*100 + t*10 + p) }}
	for _, m := range variants {
		c := computeSide(t, cfg, m)
		g := c.Requests[0].Groups[0]
		var got []string
		for _, v := range g.Checks[0] {
			got = append(got, fmt.Sprintf("0x%016x", v))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%+v: got %v, want %v", m, got, want)
		}
		got = nil
		for _, v := range g.ChecksMix[0] {
			got = append(got, fmt.Sprintf("0x%016x", v))
		}
		if !slices.Equal(got, wantMix) {
			t.Errorf("%+v: mix check %v, want %v", m, got, wantMix)
		}
	}
}

func computeSide(t *testing.T, cfg synth.Config, e checksum.Engine) *side.Checks {
	t.Helper()
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cRes, err := side.Checksum(context.Background(), side.Input{Paths: paths}, side.ChecksumOptions{Engine: e, Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	c := cRes.Checks
	return c
}

// TestModelRejectsDeviceTensors: the model cannot read device memory.
func TestModelRejectsDeviceTensors(t *testing.T) {
	c := kerneltest.OddCases()[0]
	c.Cache.Cells.Device = &layout.DeviceTensor{IPCHandle: "x"}
	err := kernels.Model{}.Run(context.Background(), c.Plan(), make([]uint64, c.Outputs))
	if err == nil || !strings.Contains(err.Error(), "device memory") {
		t.Fatalf("got %v", err)
	}
}
