package inject_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

func open(t *testing.T, paths []string) []*layout.Dump {
	t.Helper()
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range dumps {
			d.Close()
		}
	})
	return dumps
}

// preparedConsumer synthesizes a consumer and prepares it as a campaign
// does; it returns the prepared side's directory and its dumps.
func preparedConsumer(t *testing.T, cfg synth.Config) (string, []*layout.Dump) {
	t.Helper()
	dir := t.TempDir()
	cfg.Role = "consumer"
	raw, err := synth.Write(filepath.Join(dir, "raw"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(dir, "consumer")
	paths, err := inject.Prepare(context.Background(), open(t, raw), side, inject.PrepareOptions{ZeroTails: true, ExtraBlocks: 1, Stored: true})
	if err != nil {
		t.Fatal(err)
	}
	return side, open(t, paths)
}

// sides are the consumers fault.json is tested on: every format, TP and
// PP splits, replicated heads (MLA, tiny at TP 4) and state rows.
var sides = []synth.Config{
	{Preset: "tiny", TP: 4, Tokens: 7, Requests: 2, Layout: "packed", BlockSize: 4},
	{Preset: "llama", TP: 2, PP: 2, Layers: 2, Requests: 2, Layout: "hnd", Format: "dir"},
	{Preset: "mla", TP: 2, Layers: 2, Requests: 2, Format: "raw"},
	{Preset: "mamba2-hybrid", TP: 2, Requests: 2, ConvLayout: "channels-last"},
}

// TestFaultJSONNamesChanges: for every kind, the bytes of the copy differ
// from the input exactly in the ranges fault.json lists, changed files are
// fresh files (never links to the input), and the input is unchanged.
func TestFaultJSONNamesChanges(t *testing.T) {
	applied := map[inject.Kind]int{}
	defer func() {
		for _, k := range inject.Kinds() {
			if info, _ := inject.InfoOf(k); applied[k] == 0 && info.Input != inject.InputLogs && info.Input != inject.InputStore {
				t.Errorf("%s: no side took it", k)
			}
		}
	}()
	for _, cfg := range sides {
		t.Run(cfg.Preset, func(t *testing.T) {
			side, dumps := preparedConsumer(t, cfg)
			before := testfiles.HashTree(t, side)
			for _, k := range append(inject.Kinds(), inject.None) {
				info, _ := inject.InfoOf(k)
				if info.Input == inject.InputLogs || info.Input == inject.InputStore {
					continue // TestTransferFaults, TestStoreFaults
				}
				out := filepath.Join(t.TempDir(), "out")
				f, err := inject.Inject(context.Background(), dumps, out, inject.Options{Kind: k, Seed: 5})
				if errors.As(err, new(*inject.NotApplicableError)) {
					if _, statErr := os.Stat(out); statErr == nil {
						t.Errorf("%s: not applicable, but %s was written", k, out)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				applied[k]++
				onDisk, err := inject.ReadFault(filepath.Join(out, inject.FaultFile))
				if err != nil {
					t.Fatalf("%s: %v", k, err)
				}
				a, _ := json.Marshal(f)
				b, _ := json.Marshal(onDisk)
				if !bytes.Equal(a, b) {
					t.Errorf("%s: fault.json differs from the returned fault", k)
				}
				if info.Input == inject.InputPayload {
					checkPayloadFault(t, f, out)
					continue
				}
				checkChanges(t, k, f, side, out)
			}
			testfiles.AssertUnchanged(t, side, before)
		})
	}
}

// checkChanges diffs every file of the copy with the input.
func checkChanges(t *testing.T, k inject.Kind, f *inject.Fault, side, out string) {
	t.Helper()
	want := map[string][][2]int64{}
	for _, c := range f.Changes {
		if c.Length <= 0 {
			t.Errorf("%s: empty change %+v", k, c)
		}
		want[c.File] = append(want[c.File], [2]int64{c.Offset, c.Offset + c.Length})
	}
	if (len(f.Changes) == 0) != (k == inject.None) {
		t.Errorf("%s: %d changes", k, len(f.Changes))
	}
	files := 0
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == inject.FaultFile {
			return err
		}
		files++
		rel, _ := filepath.Rel(out, p)
		rel = filepath.ToSlash(rel)
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		orig, err := os.ReadFile(filepath.Join(side, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		if len(got) != len(orig) {
			t.Errorf("%s: %s has %d bytes, the input %d", k, rel, len(got), len(orig))
			return nil
		}
		var diff [][2]int64
		for i := 0; i < len(got); {
			if got[i] == orig[i] {
				i++
				continue
			}
			j := i
			for j < len(got) && got[j] != orig[j] {
				j++
			}
			diff = append(diff, [2]int64{int64(i), int64(j)})
			i = j
		}
		// fault.json may split a run where the tensor changes; merge.
		merged := mergeRanges(want[rel])
		if !slices.Equal(diff, merged) {
			t.Errorf("%s: %s differs at %v, fault.json lists %v", k, rel, head(diff), head(merged))
		}
		st, _ := os.Stat(p)
		in, _ := os.Stat(filepath.Join(side, filepath.FromSlash(rel)))
		// An output never shares storage with an input (issue 13):
		// writing into the copy later must not change the side.
		if os.SameFile(st, in) {
			t.Errorf("%s: %s is a link to the input", k, rel)
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink != 1 {
			t.Errorf("%s: %s has %d links, want 1", k, rel, sys.Nlink)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if inputs := len(testfiles.HashTree(t, side)); files != inputs {
		t.Errorf("%s: the copy holds %d files, the side %d", k, files, inputs)
	}
}

func mergeRanges(rs [][2]int64) [][2]int64 {
	slices.SortFunc(rs, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	var out [][2]int64
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1][1] >= r[0] {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

func head[T any](xs []T) []T { return xs[:min(len(xs), 4)] }

// checkPayloadFault checks a payload fault's payloads.json and the msgpack
// ranges it lists.
func checkPayloadFault(t *testing.T, f *inject.Fault, out string) {
	t.Helper()
	pc := f.Payload
	var payloads map[string]string
	data, err := os.ReadFile(filepath.Join(out, inject.PayloadsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &payloads); err != nil {
		t.Fatal(err)
	}
	if payloads[pc.Request] != pc.Tampered || pc.Tampered == pc.Original {
		t.Errorf("%s: payloads.json does not hold the tampered payload", f.Kind)
	}
	if f.Kind == inject.PayloadTruncate {
		if pc.Tampered != pc.Original[:pc.TextLength] {
			t.Errorf("%s: tampered text is not the original cut at %d", f.Kind, pc.TextLength)
		}
	} else {
		a, _ := base64.StdEncoding.DecodeString(pc.Original)
		b, _ := base64.StdEncoding.DecodeString(pc.Tampered)
		var diff []inject.Change
		for i := 0; i < min(len(a), len(b)); i++ {
			if a[i] != b[i] {
				diff = append(diff, inject.Change{Tensor: "msgpack", Offset: int64(i), Length: 1})
			}
		}
		covered := 0
		for _, c := range pc.Msgpack {
			covered += int(c.Length)
		}
		if f.Kind != inject.PayloadNesting && (len(a) != len(b) || covered != len(diff)) {
			t.Errorf("%s: %d bytes differ, fault.json lists %d", f.Kind, len(diff), covered)
		}
	}
	// A payload that no longer decodes is unverified; a flipped value is
	// a mismatch; never verified.
	_, err = side.PayloadRequestBase64(pc.Request, pc.Tampered)
	if (err == nil) != (f.Kind == inject.PayloadFlip) {
		t.Errorf("%s: decoding the tampered payload: %v", f.Kind, err)
	}
}

// TestNotApplicable: a kind a side cannot take says why and writes
// nothing.
func TestNotApplicable(t *testing.T) {
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layers: 2, Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	dumps := open(t, paths)
	for _, k := range []inject.Kind{inject.ReplicaDiverge, inject.StaleBlock, inject.StrayWrite, inject.StateFlip, inject.WrongPrefix} {
		out := filepath.Join(t.TempDir(), "out")
		_, err := inject.Inject(context.Background(), dumps, out, inject.Options{Kind: k})
		var na *inject.NotApplicableError
		if !errors.As(err, &na) {
			t.Errorf("%s: got %v, want a NotApplicableError", k, err)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: %s written", k, out)
		}
	}
	if _, err := inject.Inject(context.Background(), dumps, t.TempDir(), inject.Options{Kind: "melt"}); err == nil || !strings.Contains(err.Error(), `"melt"`) {
		t.Errorf("unknown kind: %v", err)
	}
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, "x"), nil, 0o644)
	if _, err := inject.Inject(context.Background(), dumps, out, inject.Options{Kind: inject.BitFlip}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a non-empty --out: %v", err)
	}
}

// TestTargets: targets pin where a fault goes.
func TestTargets(t *testing.T) {
	_, dumps := preparedConsumer(t, synth.Config{Preset: "llama", TP: 2, Layers: 2, Requests: 2})
	g, head, pos := 0, 5, 1
	for seed := range uint64(5) {
		f, err := inject.Inject(context.Background(), dumps, filepath.Join(t.TempDir(), "o"), inject.Options{
			Kind: inject.BitFlip, Seed: seed, Bits: 3,
			Target: inject.Target{Request: "req-1", Group: &g, Layer: "1", Head: &head, Position: &pos},
		})
		if err != nil {
			t.Fatal(err)
		}
		d := f.Expect.Details
		if len(d) != 1 || d[0].Request != "req-1" || d[0].Layer != 1 || d[0].Head != 5 || d[0].Position != 1 || d[0].Hint != "3 bits flipped" {
			t.Errorf("seed %d: details %+v", seed, d)
		}
		if f.Rank == nil || *f.Rank != (inject.Rank{PP: 0, TP: 1}) {
			t.Errorf("seed %d: rank %v, want pp 0 tp 1 (head 5 of 8 at TP 2)", seed, f.Rank)
		}
	}
}

// TestPrepare: a prepared consumer holds the same KV (it verifies against
// the producer), its tails are zero, every request has one block past its
// last token, and its stored checksums match.
func TestPrepare(t *testing.T) {
	cfg := synth.Config{Preset: "swa", TP: 2, Requests: 2, BlockSize: 16}
	dir := t.TempDir()
	pp, err := synth.Write(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := synth.Write(dir, synth.Config{Preset: "swa", TP: 1, Requests: 2, BlockSize: 32, Role: "consumer", Format: "dir"})
	if err != nil {
		t.Fatal(err)
	}
	rawDumps := open(t, raw)
	tail, err := verify.AuditTails(rawDumps, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tail.Findings) == 0 {
		t.Fatal("synth fills tails with noise: the audit should find it")
	}
	paths, err := inject.Prepare(context.Background(), rawDumps, filepath.Join(dir, "prepared"), inject.PrepareOptions{ZeroTails: true, ExtraBlocks: 1, Stored: true})
	if err != nil {
		t.Fatal(err)
	}
	cons := open(t, paths)
	tail, err = verify.AuditTails(cons, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tail.Findings) != 0 || tail.Checked == 0 {
		t.Errorf("prepared: %d findings in %d regions", len(tail.Findings), tail.Checked)
	}
	for _, r := range cons[0].Manifest.Requests {
		for key, table := range r.BlockTable {
			S := cons[0].Manifest.Group(0).BlockSize
			if want := (r.NumTokens+S-1)/S + 1; len(table) != want {
				t.Errorf("%s group %s: %d blocks, want %d", r.ID, key, len(table), want)
			}
		}
	}
	st, err := verify.RankStored(context.Background(), cons[0], checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Checked() == 0 || len(st.Mismatches()) != 0 {
		t.Errorf("stored: %d checked, %d mismatches", st.Checked(), len(st.Mismatches()))
	}
	ctx := context.Background()
	p, err := side.Compute(ctx, open(t, pp), checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := side.Compute(ctx, cons, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v := verify.Diff(p, c).Verdict; v != verify.Verified {
		t.Errorf("prepared consumer: %s", v)
	}
}

// TestAuditTailsLocates: one non-zero byte past num_tokens is one finding
// at that byte.
func TestAuditTailsLocates(t *testing.T) {
	side, dumps := preparedConsumer(t, synth.Config{Preset: "llama", Layers: 2, Requests: 2, Tokens: 37, Format: "dir"})
	out := filepath.Join(t.TempDir(), "o")
	pos := 2
	f, err := inject.Inject(context.Background(), dumps, out, inject.Options{Kind: inject.StaleTail, Target: inject.Target{Request: "req-0", Position: &pos, Layer: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = side
	paths, _, _ := layout.FindDumps([]string{out})
	a, err := verify.AuditTails(open(t, paths), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Findings) != 1 {
		t.Fatalf("%d findings, want 1: %+v", len(a.Findings), a.Findings)
	}
	x := a.Findings[0]
	if x.Request != "req-0" || x.Position != 2 || x.Whole || x.FirstToken != 37 || x.LastToken != 47 || x.Layer != "model.layers.1.self_attn.attn" {
		t.Errorf("finding %+v", x)
	}
	if got := (inject.AuditPlace{Request: x.Request, Group: x.Group, Position: x.Position, Rank: x.Rank, Layer: x.Layer}); got != f.Expect.Tail[0] {
		t.Errorf("finding at %+v, fault.json expects %+v", got, f.Expect.Tail[0])
	}
	c := f.Changes[0]
	if x.Offset != c.Offset || filepath.Base(x.File) != filepath.Base(c.File) {
		t.Errorf("first non-zero byte at %s:%d, fault.json's first change at %s:%d", x.File, x.Offset, c.File, c.Offset)
	}
}

// TestJudgeFails: the judge rejects outcomes that differ from fault.json:
// a wrong position, a wrong check, a wrong hint, a missed fault.
func TestJudgeFails(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	prodPaths, err := synth.Write(dir, synth.Config{Preset: "mla", TP: 1, Layers: 2, Requests: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, cons := preparedConsumer(t, synth.Config{Preset: "mla", TP: 2, Layers: 2, Requests: 2})
	prod := open(t, prodPaths)
	p, err := side.Compute(ctx, prod, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clean, err := side.Compute(ctx, cons, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cleanRes := verify.Diff(p, clean)
	out := filepath.Join(t.TempDir(), "o")
	f, err := inject.Inject(ctx, cons, out, inject.Options{Kind: inject.ReplicaDiverge, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	paths, _, _ := layout.FindDumps([]string{out})
	bad := open(t, paths)
	c, err := side.Compute(ctx, bad, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := verify.Diff(p, c)
	if err := verify.Explain(ctx, prod, bad, res, drill.Options{MaxDetails: -1}); err != nil {
		t.Fatal(err)
	}
	if j := inject.Judge(f, inject.Observed{Diff: res, Clean: cleanRes, CleanConsumer: clean}); !j.Localised || j.FalsePositive {
		t.Fatalf("the fault as injected: %+v", j)
	}
	for name, mutate := range map[string]func(f *inject.Fault){
		"position": func(f *inject.Fault) { f.Expect.Requests[0].Groups[0].Positions[0] ^= 1 },
		"check":    func(f *inject.Fault) { f.Expect.Requests[0].Groups[0].Checks = []int{0} },
		"hint":     func(f *inject.Fault) { f.Expect.Details[0].Hint = "zeroed" },
		"head":     func(f *inject.Fault) { f.Expect.Details[0].Head++ },
		"request":  func(f *inject.Fault) { f.Expect.Requests[0].ID = "req-9" },
	} {
		g := *f
		b, _ := json.Marshal(f)
		json.Unmarshal(b, &g)
		mutate(&g)
		if j := inject.Judge(&g, inject.Observed{Diff: res, Clean: cleanRes, CleanConsumer: clean}); j.Localised {
			t.Errorf("%s changed: still localised", name)
		}
	}
	// The clean consumer judged against the fault: missed.
	if j := inject.Judge(f, inject.Observed{Diff: cleanRes, Clean: cleanRes, CleanConsumer: clean}); j.Detected {
		t.Errorf("an untouched consumer detected: %+v", j)
	}
}

// TestCampaignShort runs every kind on every default pair once or twice:
// all detected and localised, no false positive, every kind applicable,
// past-num-tokens never flagged, stale-tail only by the tail audit.
func TestCampaignShort(t *testing.T) {
	res, err := inject.Campaign(context.Background(), inject.CampaignOptions{Trials: 3, Seed: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Pairs {
		if !p.Verified {
			t.Errorf("control %s: %v", p.Name, p.Problems)
		}
	}
	for _, k := range res.Kinds {
		if k.Trials != 3 || k.NotApplicable != 0 || k.Failed() {
			t.Errorf("%s: %+v", k.Kind, k)
		}
		if !k.Control && (k.Detected != 3 || k.Localised != 3) {
			t.Errorf("%s: %d detected, %d localised of 3", k.Kind, k.Detected, k.Localised)
		}
	}
	if !res.Pass || len(res.Kinds) != len(inject.Kinds()) {
		t.Errorf("pass %v, %d kinds", res.Pass, len(res.Kinds))
	}
}

// TestCampaignGivenSides: a campaign over given sides leaves them as they
// were; a consumer whose tails hold noise takes no stale-tail trial, one
// without stored checksums no wrong-prefix trial.
func TestCampaignGivenSides(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Config{Preset: "llama", TP: 1, Layers: 2, Requests: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := synth.Write(dir, synth.Config{Preset: "llama", TP: 2, Layers: 2, Requests: 2, Role: "consumer", Format: "dir"}); err != nil {
		t.Fatal(err)
	}
	before := testfiles.HashTree(t, dir)
	res, err := inject.Campaign(context.Background(), inject.CampaignOptions{
		Trials: 2, Seed: 1, Dir: t.TempDir(),
		Kinds: []inject.Kind{inject.BitFlip, inject.SwapHeads, inject.StaleTail, inject.WrongPrefix, inject.PayloadNesting, inject.None},
		Pairs: []inject.Pair{{Name: "given", Producer: []string{filepath.Join(dir, "producer")}, Consumer: []string{filepath.Join(dir, "consumer")}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	testfiles.AssertUnchanged(t, dir, before)
	if !res.Pass || len(res.Pairs[0].Notes) == 0 {
		t.Errorf("pass %v, notes %v", res.Pass, res.Pairs[0].Notes)
	}
	for _, k := range res.Kinds {
		na := k.Kind == inject.StaleTail || k.Kind == inject.WrongPrefix
		if (k.NotApplicable == 2) != na || k.Failed() {
			t.Errorf("%s: %+v", k.Kind, k)
		}
	}
}

// TestCampaignTrialsIndependent: a trial depends on the campaign's seed,
// its kind and its number only, not on the other kinds run.
func TestCampaignTrialsIndependent(t *testing.T) {
	run := func(kinds ...inject.Kind) inject.KindResult {
		res, err := inject.Campaign(context.Background(), inject.CampaignOptions{Trials: 4, Seed: 9, Kinds: kinds, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return res.Kinds[len(res.Kinds)-1]
	}
	a, b := run(inject.SwapHeads), run(inject.PayloadFlip, inject.StaleTail, inject.SwapHeads)
	if a.Example != b.Example || len(a.Pairs) != len(b.Pairs) {
		t.Errorf("swap-heads alone: %q on %v; after other kinds: %q on %v", a.Example, a.Pairs, b.Example, b.Pairs)
	}
	for p, n := range a.Pairs {
		if b.Pairs[p] != n {
			t.Errorf("pair %s: %d trials alone, %d after other kinds", p, n, b.Pairs[p])
		}
	}
}
