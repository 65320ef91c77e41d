package inject_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
)

// pulled is a producer, a consumer prepared as a campaign prepares it and
// the logs of the correct pull between them.
type pulled struct {
	dir        string
	side, logs string
	prod, cons []*layout.Dump
}

func pullPair(t *testing.T, p, c synth.Config) pulled {
	t.Helper()
	dir := t.TempDir()
	p.Seed, c.Seed, p.Requests, c.Requests = 4, 4, 2, 2
	prodPaths, err := synth.Write(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	c.Role = "consumer"
	raw, err := synth.Write(filepath.Join(dir, "raw"), c)
	if err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(dir, "consumer")
	paths, err := inject.Prepare(context.Background(), open(t, raw), side, inject.PrepareOptions{ZeroTails: true, ExtraBlocks: 1, Stored: true})
	if err != nil {
		t.Fatal(err)
	}
	pl := pulled{dir: dir, side: side, logs: filepath.Join(dir, "nixl"), prod: open(t, prodPaths), cons: open(t, paths)}
	if _, err := nixl.WritePlan(pl.logs, pl.prod, pl.cons, false, nixl.PlanOptions{Planner: nixl.PlannerExact}); err != nil {
		t.Fatal(err)
	}
	return pl
}

// transferSides are pulls the transfer-log kinds go into: a head split,
// producer blocks of two kernel blocks with a prefix hit, MLA at TP 2,
// consumer blocks of two producer blocks with state blocks.
var transferSides = [][2]synth.Config{
	{{Preset: "llama", Layers: 2, Layout: "hnd"}, {Preset: "llama", Layers: 2, Layout: "hnd", TP: 2, Format: "dir"}},
	{{Preset: "llama", Layers: 2, Layout: "nhd", BlockSize: 32, KernelBlockSize: 16}, {Preset: "llama", Layers: 2, Layout: "nhd", BlockSize: 16, PrefixTokens: 32, Format: "raw"}},
	{{Preset: "mla", Layers: 2}, {Preset: "mla", Layers: 2, TP: 2}},
	{{Preset: "mamba2-hybrid", Layout: "hnd"}, {Preset: "mamba2-hybrid", Layout: "hnd", BlockSize: 32}},
}

// TestTransferFaults: every transfer-log kind writes a copy of the
// consumer that differs from the input exactly where fault.json says, the
// logs with exactly the transfer it names changed, and a fault whose
// expected findings the transfer audit reports, and whose mismatches the
// comparison reports at the places it changed; the inputs are unchanged.
func TestTransferFaults(t *testing.T) {
	applied := map[inject.Kind]int{}
	var kinds []inject.Kind
	for _, k := range inject.Kinds() {
		if info, _ := inject.InfoOf(k); info.Input == inject.InputLogs {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) != 6 {
		t.Fatalf("%d transfer-log kinds: %v", len(kinds), kinds)
	}
	ctx := context.Background()
	for si, sc := range transferSides {
		t.Run(fmt.Sprintf("%s-%d", sc[0].Preset, si), func(t *testing.T) {
			pl := pullPair(t, sc[0], sc[1])
			before := testfiles.HashTree(t, pl.dir)
			prodChecks, err := side.Compute(ctx, pl.prod, checksum.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range kinds {
				for seed := range uint64(3) {
					out := filepath.Join(t.TempDir(), "out")
					f, err := inject.Inject(ctx, pl.cons, out, inject.Options{Kind: k, Seed: seed, Transfers: []string{pl.logs}, Producer: pl.prod})
					if errors.As(err, new(*inject.NotApplicableError)) {
						continue
					}
					if err != nil {
						t.Fatalf("%s seed %d: %v", k, seed, err)
					}
					applied[k]++
					checkTransferFault(t, ctx, pl, k, f, out, prodChecks)
				}
			}
			testfiles.AssertUnchanged(t, pl.dir, before)
		})
	}
	for _, k := range kinds {
		if applied[k] == 0 {
			t.Errorf("%s: no pull took it", k)
		}
	}
}

func checkTransferFault(t *testing.T, ctx context.Context, pl pulled, k inject.Kind, f *inject.Fault, out string, prodChecks *side.Checks) {
	t.Helper()
	onDisk, err := inject.ReadFault(filepath.Join(out, inject.FaultFile))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(f)
	b, _ := json.Marshal(onDisk)
	// A late READ changes only the log's times, no byte of the dumps.
	late := k == inject.XferLateRead
	if !bytes.Equal(a, b) || f.Transfer == nil || len(f.Expect.Transfers) == 0 || (len(f.Changes) == 0) != late {
		t.Fatalf("%s: fault %s", k, a)
	}
	// The dumps: every byte that differs is listed.
	want := map[string][][2]int64{}
	for _, c := range f.Changes {
		want[c.File] = append(want[c.File], [2]int64{c.Offset, c.Offset + c.Length})
	}
	filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == inject.FaultFile || strings.HasSuffix(p, nixl.LogExt) {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		got, _ := os.ReadFile(p)
		orig, err := os.ReadFile(filepath.Join(pl.side, rel))
		if err != nil || len(got) != len(orig) {
			t.Fatalf("%s: %s: %v, %d bytes, the input %d", k, rel, err, len(got), len(orig))
		}
		var diff [][2]int64
		for i := 0; i < len(got); i++ {
			if got[i] != orig[i] {
				j := i
				for j < len(got) && got[j] != orig[j] {
					j++
				}
				diff = append(diff, [2]int64{int64(i), int64(j)})
				i = j
			}
		}
		if merged := mergeRanges(want[filepath.ToSlash(rel)]); !slices.Equal(diff, merged) {
			t.Errorf("%s: %s differs at %v, fault.json lists %v", k, rel, head(diff), head(merged))
		}
		return nil
	})
	// The logs: only the one fault.json names differs, at one line.
	entries, _ := os.ReadDir(pl.logs)
	for _, e := range entries {
		got, _ := os.ReadFile(filepath.Join(out, "nixl", e.Name()))
		orig, _ := os.ReadFile(filepath.Join(pl.logs, e.Name()))
		gl, ol := strings.Split(string(got), "\n"), strings.Split(string(orig), "\n")
		var changed []int
		for i := range min(len(gl), len(ol)) {
			if gl[i] != ol[i] {
				changed = append(changed, i+1)
			}
		}
		named := "nixl/"+e.Name() == f.Transfer.Log
		if late && named {
			// The named transfer's line and later ones change, in their
			// times only.
			h1, r1 := readLog(t, filepath.Join(out, "nixl", e.Name()))
			h0, r0 := readLog(t, filepath.Join(pl.logs, e.Name()))
			for i := range r1 {
				r1[i].Time, r0[i].Time = nixl.Stamp{}, nixl.Stamp{}
			}
			if len(changed) == 0 || changed[0] != f.Transfer.Line || h1 != h0 || fmt.Sprint(r1) != fmt.Sprint(r0) {
				t.Errorf("%s: log %s: lines %v changed, fault.json names line %d, records equal but for times: %v", k, e.Name(), changed, f.Transfer.Line, fmt.Sprint(r1) == fmt.Sprint(r0))
			}
			continue
		}
		if len(gl) != len(ol) || (named && !slices.Equal(changed, []int{f.Transfer.Line})) || (!named && len(changed) > 0) {
			t.Errorf("%s: log %s: lines %v changed, fault.json names %s line %d", k, e.Name(), changed, f.Transfer.Log, f.Transfer.Line)
		}
	}
	// The audit reports what fault.json expects; the comparison the
	// mismatches.
	paths, _, _ := layout.FindDumps([]string{out})
	bad := open(t, paths)
	logs, _ := transfer.FindLogs([]string{filepath.Join(out, "nixl")})
	res, err := transfer.Audit(ctx, logs, pl.prod, bad, transfer.Options{MaxFindings: -1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := side.Compute(ctx, bad, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clean, err := side.Compute(ctx, pl.cons, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obs := inject.Observed{Diff: verify.Diff(prodChecks, c), Clean: verify.Diff(prodChecks, clean), CleanConsumer: clean, Transfers: res.Findings}
	if j := inject.Judge(f, obs); !j.Localised || j.FalsePositive {
		t.Fatalf("%s: %s: %v", k, f.Description, j.Problems)
	}
	// The judge holds the audit to every field of an expected finding.
	for name, mutate := range map[string]func(e *inject.TransferExpect){
		"invariant":  func(e *inject.TransferExpect) { e.Invariant = transfer.Failed },
		"transfer":   func(e *inject.TransferExpect) { e.Transfer++ },
		"descriptor": func(e *inject.TransferExpect) { e.Descriptor += 100 },
		"layer":      func(e *inject.TransferExpect) { e.Layer += 100 },
		"tokens":     func(e *inject.TransferExpect) { e.Tokens[1]++ },
		"request":    func(e *inject.TransferExpect) { e.Request = "req-9" },
	} {
		var g inject.Fault
		json.Unmarshal(a, &g)
		mutate(&g.Expect.Transfers[0])
		if j := inject.Judge(&g, obs); j.Localised {
			t.Errorf("%s: %s changed: still localised", k, name)
		}
	}
	// Without the audit's findings, nothing detects it.
	if obs.Transfers = nil; inject.Judge(f, obs).Detected {
		t.Errorf("%s: detected with no finding", k)
	}
}

// readLog reads a log's header and records.
func readLog(t *testing.T, path string) (nixl.Header, []nixl.Record) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := nixl.NewReader(f, path)
	if err != nil {
		t.Fatal(err)
	}
	var out []nixl.Record
	for {
		var rec nixl.Record
		if err := r.Next(&rec); err != nil {
			break
		}
		out = append(out, rec)
	}
	return r.Header(), out
}
