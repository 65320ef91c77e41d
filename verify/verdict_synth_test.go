package verify_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
)

// writeSide synthesizes cfg under a new temporary directory.
func writeSide(t testing.TB, cfg synth.Config) []string {
	t.Helper()
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// sideChecks checksums the dumps at paths.
func sideChecks(t testing.TB, paths []string) *side.Checks {
	t.Helper()
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	c, err := side.Compute(context.Background(), dumps, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// flipBit flips one bit of byte i of a cell of the dumps at paths, in
// place (the dumps are the test's own).
func flipBit(t testing.TB, paths []string, ref dumpindex.CellRef, i, bit int) {
	t.Helper()
	if _, _, err := dumpindex.FlipBit(paths, ref, i, bit); err != nil {
		t.Fatal(err)
	}
}

func llama(edits ...func(*synth.Config)) synth.Config {
	c := synth.Config{Preset: "llama", Requests: 2, Seed: 11, Role: "producer"}
	for _, e := range edits {
		e(&c)
	}
	return c
}

func consumerOf(c synth.Config, edits ...func(*synth.Config)) synth.Config {
	c.Role = "consumer"
	for _, e := range edits {
		e(&c)
	}
	return c
}

func blockSize(n int) func(*synth.Config) { return func(c *synth.Config) { c.BlockSize = n } }
func tp(n int) func(*synth.Config)        { return func(c *synth.Config) { c.TP = n } }
func pp(n int) func(*synth.Config)        { return func(c *synth.Config) { c.PP = n } }
func prefix(n int) func(*synth.Config)    { return func(c *synth.Config) { c.PrefixTokens = n } }
func lay(s string) func(*synth.Config)    { return func(c *synth.Config) { c.Layout = s } }

// TestDiffSynth compares producers and consumers synthesized from the same
// logical KV in other configurations: every request's verdict and, for
// unverified ones, the reason of group 0.
func TestDiffSynth(t *testing.T) {
	p16 := llama()
	cases := []struct {
		name     string
		producer synth.Config
		consumer synth.Config
		verdict  verify.Verdict
		reason   string
	}{
		{"tp1 flash vs tp2 hnd", p16, consumerOf(p16, tp(2), lay("hnd")), verify.Verified, ""},
		{"pp2 vs tp4 pp2 packed", llama(pp(2)), consumerOf(p16, tp(4), pp(2), lay("packed")), verify.Verified, ""},
		{"tp2 pp2 vs tp1", llama(tp(2), pp(2)), consumerOf(p16), verify.Verified, ""},
		{"16 vs 32", p16, consumerOf(p16, blockSize(32), tp(2)), verify.Verified, ""},
		{"32 vs 16", llama(blockSize(32)), consumerOf(p16, pp(2)), verify.Verified, ""},
		{"16 vs 48 (multiples)", p16, consumerOf(p16, blockSize(48)), verify.Verified, ""},
		{"32 vs 48", llama(blockSize(32)), consumerOf(p16, blockSize(48)), verify.Unverified, verify.ReasonBlockSizes},
		{"prefix hit 20, 16 vs 16", p16, consumerOf(p16, prefix(20)), verify.Verified, ""},
		{"prefix hit 32, 32 vs 16", llama(blockSize(32)), consumerOf(p16, prefix(32)), verify.Verified, ""},
		{"prefix hit 16 inside a producer block, 32 vs 16", llama(blockSize(32)), consumerOf(p16, prefix(16)), verify.Unverified, verify.ReasonInsideProducerBlock},
		{"prefix hit 20, 16 vs 32", p16, consumerOf(p16, blockSize(32), prefix(20)), verify.Verified, ""},
		{"mla tp1 vs tp2 (replicated latent)", synth.Config{Preset: "mla", Seed: 3}, synth.Config{Preset: "mla", Seed: 3, TP: 2, Role: "consumer"}, verify.Verified, ""},
		{"swa window, 16 vs 16 tp2", synth.Config{Preset: "swa", Seed: 3}, synth.Config{Preset: "swa", Seed: 3, TP: 2, Layout: "nhd", Role: "consumer"}, verify.Verified, ""},
		{"mamba2-hybrid tp1 vs tp2 (state at position 0)", synth.Config{Preset: "mamba2-hybrid", Seed: 3}, synth.Config{Preset: "mamba2-hybrid", Seed: 3, TP: 2, Role: "consumer", Layout: "hnd"}, verify.Verified, ""},
		{"mamba2-hybrid tp2 channels-last vs tp1 dim-first", synth.Config{Preset: "mamba2-hybrid", Seed: 3, TP: 2, ConvLayout: "channels-last"}, synth.Config{Preset: "mamba2-hybrid", Seed: 3, Role: "consumer"}, verify.Verified, ""},
		{"mamba1 tp4 vs tp2, fp32 conv", synth.Config{Preset: "mamba1", Seed: 3, TP: 4, ConvDtype: "float32"}, synth.Config{Preset: "mamba1", Seed: 3, TP: 2, ConvDtype: "float32", Role: "consumer"}, verify.Verified, ""},
		{"mamba2-hybrid without a split, tp1 vs tp2 (state left out)", synth.Config{Preset: "mamba2-hybrid", Seed: 3, NoStateSplit: true}, synth.Config{Preset: "mamba2-hybrid", Seed: 3, TP: 2, NoStateSplit: true, Role: "consumer"}, verify.Verified, verify.LeftOutSplitLess},
		{"mamba1 without a split, tp1 vs tp2 (nothing left to verify)", synth.Config{Preset: "mamba1", Seed: 3, NoStateSplit: true}, synth.Config{Preset: "mamba1", Seed: 3, TP: 2, NoStateSplit: true, Role: "consumer"}, verify.Unverified, verify.ReasonNoLoadedGroup},
		{"mamba2-hybrid without a split, tp2 vs tp2", synth.Config{Preset: "mamba2-hybrid", Seed: 3, TP: 2, NoStateSplit: true}, synth.Config{Preset: "mamba2-hybrid", Seed: 3, TP: 2, NoStateSplit: true, Role: "consumer", Layout: "nhd"}, verify.Verified, ""},
		// PP 2 of two layers: stage 0 holds the attention layer only, so
		// its record lists the state group with no layers of it.
		{"mamba2-hybrid without a split, pp2 (no state on stage 0) vs tp2 (state left out)", synth.Config{Preset: "mamba2-hybrid", Seed: 3, Layers: 2, PP: 2, NoStateSplit: true}, synth.Config{Preset: "mamba2-hybrid", Seed: 3, Layers: 2, TP: 2, NoStateSplit: true, Role: "consumer"}, verify.Verified, verify.LeftOutSplitLess},
		{"mamba2-hybrid without a split, pp2 (no state on stage 0) vs pp1", synth.Config{Preset: "mamba2-hybrid", Seed: 3, Layers: 2, PP: 2, NoStateSplit: true}, synth.Config{Preset: "mamba2-hybrid", Seed: 3, Layers: 2, NoStateSplit: true, Role: "consumer"}, verify.Verified, ""},
		{"gdn-hybrid 16 vs 32", synth.Config{Preset: "gdn-hybrid", Seed: 3}, synth.Config{Preset: "gdn-hybrid", Seed: 3, BlockSize: 32, Role: "consumer"}, verify.Verified, ""},
		{"another seed", p16, consumerOf(p16, func(c *synth.Config) { c.Seed = 12 }), verify.Mismatch, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := verify.Diff(sideChecks(t, writeSide(t, tc.producer)), sideChecks(t, writeSide(t, tc.consumer)))
			if len(res.Requests) == 0 {
				t.Fatal("no requests")
			}
			for _, r := range res.Requests {
				if r.Verdict != tc.verdict {
					t.Errorf("request %s: %q (reasons %q, groups %s), want %q", r.ID, r.Verdict, r.Reasons, groupsString(r), tc.verdict)
				}
				found := slices.Contains(r.Reasons, tc.reason)
				for _, g := range r.Groups {
					found = found || g.Reason == tc.reason
					if tc.verdict == verify.Verified && g.Verdict != verify.Verified && g.Reason != tc.reason {
						t.Errorf("request %s: group %d %q %q: every group must be compared", r.ID, g.ID, g.Verdict, g.Reason)
					}
				}
				if tc.reason != "" && !found {
					t.Errorf("request %s: reasons %q, groups %s, want the reason %q", r.ID, r.Reasons, groupsString(r), tc.reason)
				}
			}
		})
	}
}

func groupsString(r *verify.RequestVerdict) string {
	s := ""
	for _, g := range r.Groups {
		s += fmt.Sprintf("[%d %s %q %v checks %v] ", g.ID, g.Verdict, g.Reason, g.Positions, g.Checks)
	}
	return s
}

// TestDiffCorruptedByte flips one bit of one consumer cell (token 20,
// layer 1, head 3) with producer and consumer block sizes differing both
// ways: the load mismatches at exactly the consumer positions that hold
// token 20 in the compared chunk, in every check, and the other request
// verifies.
func TestDiffCorruptedByte(t *testing.T) {
	cases := []struct {
		name      string
		producer  synth.Config
		consumer  synth.Config
		positions []int
	}{
		{"16 vs 16", llama(), consumerOf(llama(), tp(2)), []int{1}},
		{"16 vs 32", llama(), consumerOf(llama(), blockSize(32), tp(2), lay("nhd")), []int{0}},
		{"32 vs 16", llama(blockSize(32)), consumerOf(llama(), tp(4)), []int{0, 1}},
		{"16 vs 48", llama(), consumerOf(llama(), blockSize(48)), []int{0}},
		{"48 vs 16", llama(blockSize(48)), consumerOf(llama(), pp(2)), []int{0, 1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prod := sideChecks(t, writeSide(t, tc.producer))
			cpaths := writeSide(t, tc.consumer)
			if v := verify.Diff(prod, sideChecks(t, cpaths)).Verdict; v != verify.Verified {
				t.Fatalf("before the flip: %q", v)
			}
			flipBit(t, cpaths, dumpindex.CellRef{Request: "req-1", Group: 0, Layer: "model.layers.1.self_attn.attn", Head: 3, Token: 20}, 77, 5)
			res := verify.Diff(prod, sideChecks(t, cpaths))
			if res.Verdict != verify.Mismatch {
				t.Fatalf("after the flip: %q", res.Verdict)
			}
			for _, r := range res.Requests {
				switch r.ID {
				case "req-0":
					if r.Verdict != verify.Verified {
						t.Errorf("req-0: %q %s", r.Verdict, groupsString(r))
					}
				case "req-1":
					g := r.Groups[0]
					if r.Verdict != verify.Mismatch || !slices.Equal(g.Positions, tc.positions) || !slices.Equal(g.Checks, []int{0}) {
						t.Errorf("req-1: %q %s, want positions %v in check 0", r.Verdict, groupsString(r), tc.positions)
					}
				}
			}
		})
	}
}

// TestDiffDivergedReplica corrupts one TP rank's copy of a replicated head
// (tiny has 2 KV heads, TP4 holds each twice): only the check of that copy
// differs, and the load is a mismatch.
func TestDiffDivergedReplica(t *testing.T) {
	p := synth.Config{Preset: "tiny", Seed: 5, Tokens: 7}
	c := synth.Config{Preset: "tiny", Seed: 5, Tokens: 7, TP: 4, Layout: "hnd", Role: "consumer"}
	prod := sideChecks(t, writeSide(t, p))
	cpaths := writeSide(t, c)
	before := sideChecks(t, cpaths)
	if len(before.Requests[0].Groups[0].Checks) != 2 {
		t.Fatalf("consumer has %d checks, want 2 (two copies of each head)", len(before.Requests[0].Groups[0].Checks))
	}
	flipBit(t, cpaths, dumpindex.CellRef{Request: "req-0", Group: 0, Layer: "model.layers.0.self_attn.attn", Head: 1, Replica: 1, Token: 4}, 3, 0)
	res := verify.Diff(prod, sideChecks(t, cpaths))
	g := res.Requests[0].Groups[0]
	if res.Verdict != verify.Mismatch || !slices.Equal(g.Checks, []int{1}) || !slices.Equal(g.Positions, []int{2}) {
		t.Errorf("got %q %s, want a mismatch at position 2 in check 1 only", res.Verdict, groupsString(res.Requests[0]))
	}
}

// TestDiffFlatVector builds, byte by byte as Python's msgspec encodes it,
// the flat payload a producer sends for req-0 (values from synth.Expected
// turned block-numbered, as vLLM's published code computes them: each
// block's slices restart their piece index, which for docs/spec.md §1's sums means
// subtracting 2*f*P*A per slice; the flat fingerprint from the producer's
// dump), decodes it and verifies it against a consumer with another TP
// size and layout. The same bytes with one value changed mismatch at that
// position, and a consumer with another block size is unverified (the
// flat fingerprint holds it). The request-numbered values, as a flat
// payload, mismatch at every position but 0 (the false mismatch).
func TestDiffFlatVector(t *testing.T) {
	pcfg := llama(func(c *synth.Config) { c.Requests = 1 })
	want, err := synth.Expected(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	values := blockNumberedLlama(t, pcfg)
	requestValues := want["req-0"][0].Values
	if values[0] != requestValues[0] || values[1] == requestValues[1] {
		t.Fatalf("block numbering %#x vs request %#x: want equal at position 0 only", values, requestValues)
	}
	fp := sideChecks(t, writeSide(t, pcfg)).Requests[0].Groups[0].FingerprintFlat
	if fp < 1<<32 {
		t.Fatalf("fingerprint %#x: the vector below writes a uint64", fp)
	}
	msg := []byte{
		0x93,       // fixarray of 3: (version, num_tokens, groups)
		0x01,       // version 1
		0x28,       // num_tokens 40 (positive fixint)
		0x91,       // fixarray of 1 group
		0x94,       // fixarray of 4: (group_id, fingerprint, start, values)
		0x00,       // group_id 0
		0xcf,       // uint 64, big-endian
		0, 0, 0, 0, // (fingerprint, filled below)
		0, 0, 0, 0,
		0x00,       // start 0
		0xc4, 0x18, // bin 8 of 24 bytes: three little-endian uint64
	}
	binary.BigEndian.PutUint64(msg[7:15], fp)
	if len(values) != 3 {
		t.Fatalf("%d values, want 3", len(values))
	}
	for _, v := range values {
		msg = binary.LittleEndian.AppendUint64(msg, v)
	}

	consumer := sideChecks(t, writeSide(t, consumerOf(pcfg, tp(2), lay("hnd"))))
	diff := func(msg []byte, consumer *side.Checks) *verify.DiffResult {
		p, err := wire.DecodePayload(msg)
		if err != nil {
			t.Fatal(err)
		}
		if p.Form != wire.FormFlat {
			t.Fatalf("form %v", p.Form)
		}
		return verify.Diff(side.ProducerChecks(side.PayloadRequest("req-0", p)), consumer)
	}
	if res := diff(msg, consumer); res.Verdict != verify.Verified {
		t.Errorf("flat vector: %q %s", res.Verdict, groupsString(res.Requests[0]))
	}
	bad := slices.Clone(msg)
	bad[len(bad)-1] ^= 0x80 // the last value, position 2
	if res := diff(bad, consumer); res.Verdict != verify.Mismatch || !slices.Equal(res.Requests[0].Groups[0].Positions, []int{2}) {
		t.Errorf("changed value: %q %s", res.Verdict, groupsString(res.Requests[0]))
	}
	other := sideChecks(t, writeSide(t, consumerOf(pcfg, blockSize(32))))
	if res := diff(msg, other); res.Verdict != verify.Unverified || res.Requests[0].Groups[0].Reason != verify.ReasonFingerprint {
		t.Errorf("other block size: %q %s", res.Verdict, groupsString(res.Requests[0]))
	}
	reqWire := slices.Clone(msg[:len(msg)-24])
	for _, v := range requestValues {
		reqWire = binary.LittleEndian.AppendUint64(reqWire, v)
	}
	if res := diff(reqWire, consumer); res.Verdict != verify.Mismatch || !slices.Equal(res.Requests[0].Groups[0].Positions, []int{1, 2}) {
		t.Errorf("request-numbered values in the flat form: %q %s", res.Verdict, groupsString(res.Requests[0]))
	}
}

// blockNumberedLlama is group 0's block-numbered checks of req-0 of a
// llama configuration (one group, 8 heads, P = 64 pieces of bfloat16
// cells), summed plainly from the logical KV.
func blockNumberedLlama(t *testing.T, cfg synth.Config) []uint64 {
	c, err := cfg.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	m, err := synth.BuildModel(c)
	if err != nil {
		t.Fatal(err)
	}
	S := c.BlockSize
	var out []uint64
	for pos := 0; pos*S < c.Tokens; pos++ {
		var sum uint64
		for _, ca := range m.Groups[0].Caches {
			P := 2 * ca.HeadSize * 2 / 8
			for h := range ca.Heads {
				var s uint64
				for tok := 0; tok < S && pos*S+tok < c.Tokens; tok++ {
					for p := range P {
						s += c.Piece("req-0", ca.Name, ca.Layer, h, pos*S+tok, p) * uint64(2*(tok*P+p)+1)
					}
				}
				sum += uint64(2*(ca.Layer*65536+h)+1) * s
			}
		}
		out = append(out, sum)
	}
	return out
}

// TestPayloadRoundTrip: the payloads NewPayload writes for a producer, in
// both forms, verify against a consumer; the nested one across block
// sizes, the flat one only with equal block sizes. A malformed payload is
// unverified, never verified.
func TestPayloadRoundTrip(t *testing.T) {
	pcfg := llama()
	prod := sideChecks(t, writeSide(t, pcfg))
	same := sideChecks(t, writeSide(t, consumerOf(pcfg, tp(2))))
	bigger := sideChecks(t, writeSide(t, consumerOf(pcfg, blockSize(32))))
	for _, form := range []wire.PayloadForm{wire.FormNested, wire.FormFlat} {
		var reqs []*side.RequestChecks
		for _, r := range prod.Requests {
			p, err := side.NewPayload(prod, r, form)
			if err != nil {
				t.Fatal(err)
			}
			text, err := wire.EncodePayloadBase64(p)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := side.PayloadRequestBase64(r.ID, text)
			if err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, rc)
		}
		if v := verify.Diff(side.ProducerChecks(reqs...), same).Verdict; v != verify.Verified {
			t.Errorf("%v, same block size: %q", form, v)
		}
		want := verify.Verified
		if form == wire.FormFlat {
			want = verify.Unverified
		}
		if v := verify.Diff(side.ProducerChecks(reqs...), bigger).Verdict; v != want {
			t.Errorf("%v, 16 vs 32: %q, want %q", form, v, want)
		}
	}
	rc, err := side.PayloadRequestBase64("req-0", "kwEokZQAzw==")
	if err == nil {
		t.Fatal("truncated payload decoded")
	}
	res := verify.Diff(side.ProducerChecks(rc), same)
	if r := res.Requests[0]; r.Verdict != verify.Unverified || !slices.Equal(r.Reasons, []string{verify.ReasonInvalidChecksums}) {
		t.Errorf("malformed payload: %q %q", r.Verdict, r.Reasons)
	}
	// A producer that is missing a rank sends nothing.
	partial := *prod.Requests[0]
	partial.Unverified = []string{verify.ReasonNotEveryWorker}
	if _, err := side.NewPayload(prod, &partial, wire.FormNested); err == nil {
		t.Error("payload of a partial request")
	}
}
