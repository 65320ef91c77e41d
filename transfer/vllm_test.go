package transfer_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/transfer"
)

// vllmGeometries are pulls planned as vLLM's connector plans them
// (nixl.PlannerVLLM) where its pairing is right: 16 -> 64 (with TP 1 -> 2
// too: rank 1's chunks are of heads 4-7) and 64 -> 16 token blocks, TP
// 1 -> 2 with blocks of other kernel counts, MLA TP 2 -> 1, a prefix hit
// with a block-size ratio, a partial last block, Mamba hybrids (which
// pull num_tokens - 1 tokens), kernel rows on both sides.
func vllmGeometries() []geometry {
	g := func(name, preset string, p, c synth.Config) geometry {
		p.Preset, c.Preset = preset, preset
		c.Role, c.ZeroTails = "consumer", true
		if c.Tokens != 0 {
			p.Tokens = c.Tokens
		}
		return geometry{name, p, c, nixl.PlannerVLLM}
	}
	return []geometry{
		g("16-to-64", "llama", synth.Config{Layout: "hnd", BlockSize: 16}, synth.Config{Layout: "hnd", BlockSize: 64}),
		g("64-to-16", "llama", synth.Config{Layout: "nhd", BlockSize: 64, KernelBlockSize: 16}, synth.Config{Layout: "nhd", BlockSize: 16, Tokens: 128}),
		g("tp1-tp2-kernel-blocks", "llama", synth.Config{Layout: "hnd", BlockSize: 32, KernelBlockSize: 16}, synth.Config{Layout: "hnd", BlockSize: 16, TP: 2, Tokens: 64}),
		g("mla-tp2-tp1", "mla", synth.Config{TP: 2, BlockSize: 16}, synth.Config{BlockSize: 32}),
		g("prefix-hit-ratio", "llama", synth.Config{Layout: "hnd", BlockSize: 16}, synth.Config{Layout: "hnd", BlockSize: 32, PrefixTokens: 32, Tokens: 64}),
		g("partial-last-block", "llama", synth.Config{}, synth.Config{Tokens: 37}),
		g("mamba2-tp1-tp2", "mamba2-hybrid", synth.Config{Layout: "hnd"}, synth.Config{Layout: "hnd", TP: 2}),
		g("gdn-tp2-tp1", "gdn-hybrid", synth.Config{Layout: "hnd", TP: 2}, synth.Config{Layout: "hnd"}),
		g("mamba2-16-to-32", "mamba2-hybrid", synth.Config{Layout: "hnd", BlockSize: 16}, synth.Config{Layout: "hnd", BlockSize: 32}),
		// Kernel rows on both sides: rows of 16 tokens (blocks of 32) into
		// rows of 32 (blocks of 64), each a chunk of two.
		g("16-to-64-tp1-tp2", "llama", synth.Config{Layout: "hnd", BlockSize: 16}, synth.Config{Layout: "hnd", BlockSize: 64, TP: 2}),
		g("16x2-to-32x2", "llama", synth.Config{Layout: "hnd", BlockSize: 32, KernelBlockSize: 16}, synth.Config{Layout: "hnd", BlockSize: 64, KernelBlockSize: 32, Tokens: 64}),
		// The hybrid's last token starts a block: the consumer recomputes
		// it, and that block is not pulled (33 tokens in blocks of 16; the
		// producer, which vLLM truncates, computed 32).
		lastStarts,
	}
}

var lastStarts = geometry{"mamba2-last-token-starts-a-block",
	synth.Config{Preset: "mamba2-hybrid", Layout: "hnd", Tokens: 32},
	synth.Config{Preset: "mamba2-hybrid", Layout: "hnd", Tokens: 33, Role: "consumer", ZeroTails: true}, nixl.PlannerVLLM}

// vllmMisaligned are the geometries where vLLM's pairing (the end-trim of
// the producer's kernel-block list) shifts every pair by whole blocks:
// blocks of other kernel counts (32 tokens in two kernel blocks to 16, 40
// tokens: 4 producer kernel blocks trimmed to the consumer's 3), with TP
// 1 -> 2 too, and a prefix hit with a block-size ratio whose last block is
// partial.
func vllmMisaligned() []geometry {
	var out []geometry
	for _, g := range []geometry{
		{"32x2-to-16", synth.Config{Layout: "nhd", BlockSize: 32, KernelBlockSize: 16}, synth.Config{Layout: "nhd", BlockSize: 16}, ""},
		{"tp1-tp2-kernel-blocks", synth.Config{Layout: "hnd", BlockSize: 32, KernelBlockSize: 16}, synth.Config{Layout: "hnd", BlockSize: 16, TP: 2}, ""},
		{"prefix-hit-ratio", synth.Config{Layout: "hnd", BlockSize: 16}, synth.Config{Layout: "hnd", BlockSize: 32, PrefixTokens: 32}, ""},
	} {
		g.p.Preset, g.c.Preset = "llama", "llama"
		g.c.Role, g.c.ZeroTails = "consumer", true
		g.planner = nixl.PlannerVLLM
		out = append(out, g)
	}
	return out
}

// TestVLLMPullIsClean: every pull planned as vLLM plans it, where its
// pairing is right, passes every invariant and accounts for every
// request; the hybrids' last token (recomputed) is neither a gap nor a
// hole.
func TestVLLMPullIsClean(t *testing.T) {
	for _, g := range vllmGeometries() {
		t.Run(g.name, func(t *testing.T) {
			prod, cons, logs := pull(t, t.TempDir(), g)
			res := audit(t, logs, prod, cons)
			if res.Verdict != transfer.Clean || len(res.Pairing) > 0 {
				for _, f := range res.Findings[:min(5, len(res.Findings))] {
					t.Log(f.Message)
				}
				t.Fatalf("verdict %s: %d findings, unresolved %v, pairing %v", res.Verdict, len(res.Findings), res.Unresolved, res.Pairing)
			}
			want := 0
			for _, d := range cons {
				want += len(d.Manifest.Requests)
			}
			if len(res.Requests) != want {
				t.Fatalf("%d requests audited, want %d", len(res.Requests), want)
			}
		})
	}
}

// TestVLLMHybridPullsAllButTheLastToken: a hybrid's pull planned as vLLM
// plans it reads no byte of the last prompt token, and the audit that
// wanted every token below num_tokens (PullTokens without the hybrid
// rule) would have called the correct pull a gap.
func TestVLLMHybridPullsAllButTheLastToken(t *testing.T) {
	if got := nixl.PullTokens(40, true, 0); got != 39 {
		t.Fatalf("PullTokens(40, hybrid) = %d", got)
	}
	if got := nixl.PullTokens(40, false, 3); got != 38 {
		t.Fatalf("PullTokens(40, lookahead 3) = %d", got)
	}
	if got := nixl.PullTokens(40, true, 4); got != 37 {
		t.Fatalf("PullTokens(40, hybrid, lookahead 4) = %d", got)
	}
	if got := nixl.PullTokens(1, true, 0); got != 1 {
		t.Fatalf("PullTokens(1, hybrid) = %d", got)
	}
	gs := vllmGeometries()
	g := gs[len(gs)-1] // 33 tokens: token 32 starts block 2
	prod, cons, logs := pull(t, t.TempDir(), g)
	_, recs := records(t, logs[0])
	x := firstXfer(recs)
	exact := g
	exact.planner = nixl.PlannerExact
	_, _, elogs := pull(t, t.TempDir(), exact)
	_, erecs := records(t, elogs[0])
	// The exact planner pulls the same tokens: both leave token 32 out.
	if len(recs[x].LocalIDs) != len(erecs[firstXfer(erecs)].LocalIDs) {
		t.Fatalf("vllm pairs %d descriptors, exact %d", len(recs[x].LocalIDs), len(erecs[firstXfer(erecs)].LocalIDs))
	}
	res := audit(t, logs, prod, cons)
	if res.Verdict != transfer.Clean {
		t.Fatalf("verdict %s", res.Verdict)
	}
}

// TestLookahead: a pull that leaves the last lookahead-1 prompt tokens to
// the consumer (multi-token prediction: 9 of 40, so the third block of 16
// is not read) is clean when the audit is told the lookahead, and a gap
// when it is not. Planned as vLLM plans it.
func TestLookahead(t *testing.T) {
	// The producer, which vLLM truncates the same way, computed 31.
	g := geometries()[0]
	g.p.Tokens, g.c.Tokens = 31, 40
	dir := t.TempDir()
	prod, cons := sides(t, g)
	logs, err := nixl.WritePlan(filepath.Join(dir, "nixl-mtp"), prod, cons, false, nixl.PlanOptions{Lookahead: 10})
	if err != nil {
		t.Fatal(err)
	}
	res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{Lookahead: 10})
	if err != nil || res.Verdict != transfer.Clean {
		t.Fatalf("told the lookahead: %v, %+v", err, res)
	}
	if res := audit(t, logs, prod, cons); !slices.Contains(invariants(res), transfer.Covered) {
		t.Fatalf("not told: invariants %v", invariants(res))
	}
}

// TestVLLMPullFaults: on every pull planned as vLLM plans it, each fault
// of the seeds (003: a dropped pair, a misaligned pair, a write into a
// co-resident request's block; 004: a read of a block the producer gave
// to another request, a READ after the lease lapsed) is a violation
// naming its invariant.
func TestVLLMPullFaults(t *testing.T) {
	faults := []struct {
		name string
		edit func(recs []nixl.Record, x int) bool
		want string
	}{
		{"dropped pair", func(recs []nixl.Record, x int) bool {
			recs[x].LocalIDs, recs[x].RemoteIDs = recs[x].LocalIDs[1:], recs[x].RemoteIDs[1:]
			return true
		}, transfer.Covered},
		{"misaligned pair", func(recs []nixl.Record, x int) bool {
			ids := recs[x].RemoteIDs
			j := slices.IndexFunc(ids, func(v int) bool { return v != ids[0] })
			if j < 0 {
				return false
			}
			ids[0], ids[j] = ids[j], ids[0]
			return true
		}, transfer.Aligned},
		{"co-resident write", func(recs []nixl.Record, x int) bool {
			y := nextXfer(recs, x)
			if y <= x || recs[y].Request == recs[x].Request {
				return false
			}
			recs[x].LocalIDs[0] = recs[y].LocalIDs[0]
			return true
		}, transfer.Confined},
		{"stale source", func(recs []nixl.Record, x int) bool {
			y := nextXfer(recs, x)
			if y <= x || recs[y].Request == recs[x].Request {
				return false
			}
			recs[x].RemoteIDs[0] = recs[y].RemoteIDs[0]
			return true
		}, transfer.Confined},
		{"late read", func(recs []nixl.Record, x int) bool {
			// Every record from the READ on, 31 s later: past the 30 s
			// lease that started at the request's heartbeat.
			for i := x; i < len(recs); i++ {
				recs[i].Time.Wall += 31e9
				recs[i].Time.Mono += 31e9
			}
			return true
		}, transfer.Lease},
	}
	for _, g := range vllmGeometries() {
		for _, fc := range faults {
			t.Run(g.name+"/"+fc.name, func(t *testing.T) {
				prod, cons, logs := pull(t, t.TempDir(), g)
				h, recs := records(t, logs[0])
				x := firstXfer(recs)
				if !fc.edit(recs, x) {
					t.Skip("not applicable")
				}
				rewrite(t, logs[0], h, recs)
				res := audit(t, logs, prod, cons)
				if res.Verdict != transfer.Violated || !slices.Contains(invariants(res), fc.want) {
					t.Fatalf("verdict %s, invariants %v, want %s", res.Verdict, invariants(res), fc.want)
				}
			})
		}
	}
}

// TestVLLMMisalignedIsFlagged: where vLLM's pairing shifts pairs by
// whole blocks, the log planned as vLLM plans it is flagged, every
// finding aligned; the same pull paired by token is clean.
func TestVLLMMisalignedIsFlagged(t *testing.T) {
	for _, g := range vllmMisaligned() {
		t.Run(g.name, func(t *testing.T) {
			prod, cons, logs := pull(t, t.TempDir(), g)
			res := audit(t, logs, prod, cons)
			if res.Verdict != transfer.Violated || !slices.Equal(invariants(res), []string{transfer.Aligned}) {
				t.Fatalf("vllm: verdict %s, invariants %v", res.Verdict, invariants(res))
			}
			if !strings.Contains(res.Findings[0].Message, "the remote bytes") {
				t.Fatalf("finding %s", res.Findings[0].Message)
			}
			g.planner = nixl.PlannerExact
			prod, cons, logs = pull(t, t.TempDir(), g)
			if res := audit(t, logs, prod, cons); res.Verdict != transfer.Clean {
				t.Fatalf("exact: verdict %s, invariants %v", res.Verdict, invariants(res))
			}
		})
	}
}
