package cli

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// This file checks kvaudit against vLLM's published KV checksum code (the
// fork sawsa307/vllm, vllm/distributed/kv_transfer/kv_checksum/: worker.py
// computes, scheduler.py encodes and verifies). vllmPayload below is an
// independent, deliberately plain implementation of that code's
// definition over the synthesized logical KV; it shares nothing with
// kvaudit's engines, payload encoder or verdicts.

// vllmGroup is one group of a payload as vLLM's producer builds it.
type vllmGroup struct {
	id          int
	fingerprint uint64
	start       int
	values      []uint64 // block-numbered: the token index restarts per block
}

// vllmLayerHash is the first 8 bytes, little-endian, of SHA-256 of the
// repr of (name, spec type, block size, 'torch.<dtype>').
func vllmLayerHash(name, spec string, blockSize int, dtype string) uint64 {
	tuple := fmt.Sprintf("('%s', '%s', %d, 'torch.%s')", name, spec, blockSize, dtype)
	sum := sha256.Sum256([]byte(tuple))
	return binary.LittleEndian.Uint64(sum[:8])
}

// vllmSpec is the spec class vLLM gives a group kind.
func vllmSpec(kind string) string {
	switch kind {
	case "sliding_window":
		return "SlidingWindowSpec"
	case "mla":
		return "MLAAttentionSpec"
	}
	return "FullAttentionSpec"
}

// vllmPayload computes what vLLM's producer sends for request r of cfg:
// per attention group, the fingerprint of its layers (aliases: extra layer
// names holding group 0's first cache) and one block-numbered checksum per
// block position of the request.
func vllmPayload(t *testing.T, cfg synth.Config, r int, aliases []string) (numTokens int, groups []vllmGroup) {
	t.Helper()
	c, err := cfg.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	m, err := synth.BuildModel(c)
	if err != nil {
		t.Fatal(err)
	}
	tables := c.BlockTables(m)
	S := c.BlockSize
	req := synth.RequestID(r)
	for _, g := range m.Groups {
		if g.Kind == "mamba" {
			continue
		}
		// The producer's blocks: the non-null run of [0, cdiv(tokens, S)),
		// a sliding window keeping its last cdiv(window, S)+1.
		table := tables[g.ID][r]
		end := (c.Tokens + S - 1) / S
		start := 0
		for start < end && table[start] == layout.NoBlock {
			start++
		}
		if g.Window > 0 {
			start = max(start, end-((g.Window+S-1)/S+1))
		}
		vg := vllmGroup{id: g.ID, start: start}
		for _, ca := range g.Caches {
			vg.fingerprint += vllmLayerHash(ca.Name, vllmSpec(g.Kind), S, ca.Dtype)
		}
		if g.ID == 0 {
			for _, a := range aliases {
				vg.fingerprint += vllmLayerHash(a, vllmSpec(g.Kind), S, g.Caches[0].Dtype)
			}
		}
		for pos := start; pos < end; pos++ {
			valid := min(S, max(0, c.Tokens-pos*S))
			var block uint64
			for _, ca := range g.Caches {
				cellBytes := 2 * ca.HeadSize * vllmDtypeBytes(t, ca.Dtype)
				if ca.Latent {
					cellBytes /= 2
				}
				P := cellBytes / 8
				for h := range ca.Heads {
					var s uint64
					for tok := range valid { // index within the block
						for p := range P {
							x := c.Piece(req, ca.Name, ca.Layer, h, pos*S+tok, p)
							s += x * uint64(2*(tok*P+p)+1)
						}
					}
					block += uint64(2*(ca.Layer<<16+h)+1) * s
				}
			}
			vg.values = append(vg.values, block)
		}
		groups = append(groups, vg)
	}
	return c.Tokens, groups
}

func vllmDtypeBytes(t *testing.T, dtype string) int {
	switch dtype {
	case "bfloat16", "float16":
		return 2
	case "float32":
		return 4
	}
	t.Fatalf("dtype %q", dtype)
	return 0
}

// msgpack as msgspec writes it: the smallest encoding of every integer,
// fixarray/array16, bin8/16/32.
func mpUint(b []byte, v uint64) []byte {
	switch {
	case v < 0x80:
		return append(b, byte(v))
	case v < 1<<8:
		return append(b, 0xcc, byte(v))
	case v < 1<<16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v < 1<<32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func mpArray(b []byte, n int) []byte {
	if n < 16 {
		return append(b, 0x90|byte(n))
	}
	return append(b, 0xdc, byte(n>>8), byte(n))
}

func mpBin(b []byte, data []byte) []byte {
	switch n := len(data); {
	case n < 1<<8:
		b = append(b, 0xc4, byte(n))
	case n < 1<<16:
		b = append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, data...)
}

// vllmEncode is KVChecksumPayload.to_bytes: (1, num_tokens, [(group_id,
// fingerprint, start, values as little-endian uint64 bytes), ...]).
func vllmEncode(numTokens int, groups []vllmGroup) []byte {
	b := mpArray(nil, 3)
	b = mpUint(b, 1)
	b = mpUint(b, uint64(numTokens))
	b = mpArray(b, len(groups))
	for _, g := range groups {
		b = mpArray(b, 4)
		b = mpUint(b, uint64(g.id))
		b = mpUint(b, g.fingerprint)
		b = mpUint(b, uint64(g.start))
		var vals []byte
		for _, v := range g.values {
			vals = binary.LittleEndian.AppendUint64(vals, v)
		}
		b = mpBin(b, vals)
	}
	return b
}

// TestVLLMGoldenBothNumberings: docs/spec.md §1's worked example through
// `checksum --numbering`, against the independent definition and the
// published constants.
func TestVLLMGoldenBothNumberings(t *testing.T) {
	golden := func(L, h, tok, p int) uint64 { return uint64((L+1)*1000 + (h+1)*100 + tok*10 + p) }
	cfg := synth.Config{Preset: "tiny", BlockSize: 2, Tokens: 3, Requests: 1, Values: golden}
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, groups := vllmPayload(t, cfg, 0, nil)
	if !slices.Equal(groups[0].values, []uint64{0x000000021b8b4990, 0x0000000087acd3f8}) {
		t.Fatalf("independent definition gives %#x, want the published block-numbered vector", groups[0].values)
	}
	for numbering, want := range map[string][]string{
		"block":   {"0x000000021b8b4990", "0x0000000087acd3f8"},
		"request": {"0x000000021b8b4990", "0x00000002a65023b8"},
	} {
		code, out, stderr := run(t, append([]string{"checksum", "-o", "json", "--numbering", numbering}, paths...)...)
		if code != ExitOK {
			t.Fatalf("%s: exit %d: %s", numbering, code, stderr)
		}
		doc := checksumsDoc(t, out)
		if doc.Numbering != numbering {
			t.Errorf("numbering field %q, want %q", doc.Numbering, numbering)
		}
		if got := doc.Requests[0].Groups[0].Checks[0]; !slices.Equal(got, want) {
			t.Errorf("%s numbering: %v, want %v", numbering, got, want)
		}
	}
}

type checksumsOut struct {
	Numbering string `json:"numbering"`
	Requests  []struct {
		ID     string `json:"id"`
		Groups []struct {
			ID     int        `json:"id"`
			Start  int        `json:"start"`
			Checks [][]string `json:"checks"`
		} `json:"groups"`
	} `json:"requests"`
}

func checksumsDoc(t *testing.T, out string) checksumsOut {
	t.Helper()
	var doc checksumsOut
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return doc
}

type diffOut struct {
	Verdict  string `json:"verdict"`
	Requests []struct {
		Numbering string `json:"numbering"`
		Groups    []struct {
			ID        int    `json:"id"`
			Verdict   string `json:"verdict"`
			Positions []int  `json:"positions"`
		} `json:"groups"`
	} `json:"requests"`
}

// vllmCase is one deployment: the producer and the consumer it sends to
// (same block size: the flat form cannot compare others).
type vllmCase struct {
	name               string
	producer, consumer synth.Config
	// aliases adds KV-sharing layers to group 0 (manifest edit, see
	// addAliases); aliasTensor also gives them their target's tensor.
	aliases     []string
	aliasTensor bool
}

func vllmCases() []vllmCase {
	llama := synth.Config{Preset: "llama", Layers: 2, Seed: 7}
	with := func(c synth.Config, f func(*synth.Config)) synth.Config { f(&c); return c }
	cons := func(c synth.Config, f func(*synth.Config)) synth.Config {
		c.Role = "consumer"
		if f != nil {
			f(&c)
		}
		return c
	}
	tp := func(n int) func(*synth.Config) { return func(c *synth.Config) { c.TP = n } }
	return []vllmCase{
		{name: "tp2 shards", producer: with(llama, tp(2)), consumer: cons(llama, func(c *synth.Config) { c.Layout = "hnd" })},
		{name: "pp2 stages", producer: with(llama, func(c *synth.Config) { c.PP = 2 }), consumer: cons(llama, tp(2))},
		{name: "gqa replicas tp4", producer: synth.Config{Preset: "tiny", TP: 4, BlockSize: 2, Tokens: 7, Requests: 1, Seed: 3},
			consumer: cons(synth.Config{Preset: "tiny", TP: 4, BlockSize: 2, Tokens: 7, Requests: 1, Seed: 3}, nil)},
		{name: "mla tp2", producer: synth.Config{Preset: "mla", Layers: 2, TP: 2, Requests: 1, Seed: 5},
			consumer: cons(synth.Config{Preset: "mla", Layers: 2, Requests: 1, Seed: 5}, nil)},
		{name: "kernel-block split", producer: with(llama, func(c *synth.Config) { c.KernelBlockSize = 4 }), consumer: cons(llama, nil)},
		{name: "token-major layout", producer: with(llama, func(c *synth.Config) { c.Layout = "packed-token-major" }), consumer: cons(llama, func(c *synth.Config) { c.Layout = "nhd" })},
		{name: "kv sharing", producer: with(llama, func(c *synth.Config) { c.Format = "dir" }), consumer: cons(llama, func(c *synth.Config) { c.Format = "dir" }),
			aliases: []string{"model.layers.5.self_attn.attn"}},
		{name: "kv sharing, tensor and alias_of", producer: with(llama, func(c *synth.Config) { c.Format = "dir" }), consumer: cons(llama, func(c *synth.Config) { c.Format = "dir" }),
			aliases: []string{"model.layers.5.self_attn.attn"}, aliasTensor: true},
		{name: "last partial block", producer: with(llama, func(c *synth.Config) { c.Tokens = 33; c.Requests = 1 }), consumer: cons(llama, func(c *synth.Config) { c.Tokens = 33; c.Requests = 1 })},
		{name: "two requests", producer: with(llama, func(c *synth.Config) { c.Requests = 2 }), consumer: cons(llama, func(c *synth.Config) { c.Requests = 2 })},
		{name: "prefix hit", producer: llama, consumer: cons(llama, func(c *synth.Config) { c.PrefixTokens = 16 })},
		{name: "sliding window", producer: synth.Config{Preset: "swa", Layers: 2, Requests: 1, Seed: 9},
			consumer: cons(synth.Config{Preset: "swa", Layers: 2, Requests: 1, Seed: 9}, nil)},
	}
}

// addAliases adds KV-sharing layers to group 0 of every rank's manifest
// (Format dir): each an alias_of the group's first layer, with that
// layer's tensor too when withTensor (as an exporter walking vLLM's
// kv_caches writes it).
func addAliases(t *testing.T, paths []string, aliases []string, withTensor bool) {
	t.Helper()
	for _, p := range paths {
		mp := filepath.Join(p, "manifest.json")
		data, err := os.ReadFile(mp)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		g := m["groups"].([]any)[0].(map[string]any)
		layers := g["layers"].([]any)
		first := layers[0].(map[string]any)
		for _, a := range aliases {
			l := map[string]any{"name": a, "dtype": first["dtype"], "alias_of": first["name"]}
			if withTensor {
				l["tensor"] = first["tensor"]
			}
			layers = append(layers, l)
		}
		g["layers"] = layers
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mp, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVLLMVectors: for every deployment, the independent definition of
// vLLM's published code agrees with `checksum --numbering block` (every
// replica check), with the bytes of `checksum -o payload --payload-form
// flat`, and `diff` of its payload verifies against the consumer; one
// flipped bit mismatches at exactly its position.
func TestVLLMVectors(t *testing.T) {
	for _, tc := range vllmCases() {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ppaths, err := synth.Write(dir, tc.producer)
			if err != nil {
				t.Fatal(err)
			}
			cpaths, err := synth.Write(dir, tc.consumer)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.aliases) > 0 {
				addAliases(t, ppaths, tc.aliases, tc.aliasTensor)
				addAliases(t, cpaths, tc.aliases, tc.aliasTensor)
			}
			pc, _ := tc.producer.Normalize()

			code, out, stderr := run(t, append([]string{"checksum", "-o", "json", "--numbering", "block"}, ppaths...)...)
			if code != ExitOK {
				t.Fatalf("checksum: exit %d: %s", code, stderr)
			}
			doc := checksumsDoc(t, out)
			code, out, stderr = run(t, append([]string{"checksum", "-o", "payload", "--payload-form", "flat"}, ppaths...)...)
			if code != ExitOK {
				t.Fatalf("checksum -o payload: exit %d: %s", code, stderr)
			}
			var payloads map[string]string
			if err := json.Unmarshal([]byte(out), &payloads); err != nil {
				t.Fatal(err)
			}
			if len(doc.Requests) != pc.Requests || len(payloads) != pc.Requests {
				t.Fatalf("%d requests, %d payloads, want %d", len(doc.Requests), len(payloads), pc.Requests)
			}
			for r := range pc.Requests {
				req := synth.RequestID(r)
				numTokens, groups := vllmPayload(t, tc.producer, r, tc.aliases)
				// checksum --numbering block: every check equals the
				// definition at every position.
				ri := slices.IndexFunc(doc.Requests, func(x struct {
					ID     string `json:"id"`
					Groups []struct {
						ID     int        `json:"id"`
						Start  int        `json:"start"`
						Checks [][]string `json:"checks"`
					} `json:"groups"`
				}) bool {
					return x.ID == req
				})
				if ri < 0 || len(doc.Requests[ri].Groups) != len(groups) {
					t.Fatalf("request %s: not in the output or %d groups, want %d", req, len(doc.Requests[ri].Groups), len(groups))
				}
				for gi, g := range groups {
					got := doc.Requests[ri].Groups[gi]
					if got.ID != g.id || got.Start != g.start {
						t.Fatalf("%s group %d: start %d, want group %d start %d", req, got.ID, got.Start, g.id, g.start)
					}
					for k, check := range got.Checks {
						for i, v := range g.values {
							if want := fmt.Sprintf("0x%016x", v); i >= len(check) || check[i] != want {
								t.Errorf("%s group %d check %d position %d: %v, want %s", req, g.id, k, g.start+i, check, want)
							}
						}
					}
				}
				// The flat payload, byte for byte.
				wire := vllmEncode(numTokens, groups)
				text := base64.StdEncoding.EncodeToString(wire)
				if payloads[req] != text {
					t.Errorf("%s: flat payload\n%s\nwant what vLLM's producer encodes\n%s", req, payloads[req], text)
				}
				// diff of that payload against the consumer.
				verdict := func(wire []byte) diffOut {
					t.Helper()
					f := filepath.Join(dir, "params.json")
					params, _ := json.Marshal(map[string]any{"kv_checksums": base64.StdEncoding.EncodeToString(wire), "remote_block_ids": []int{}})
					if err := os.WriteFile(f, params, 0o644); err != nil {
						t.Fatal(err)
					}
					_, out, stderr := run(t, "diff", "-o", "json", "--request", req, f, filepath.Dir(cpaths[0]))
					var d diffOut
					if err := json.Unmarshal([]byte(out), &d); err != nil {
						t.Fatalf("diff: %v: %s", err, stderr)
					}
					return d
				}
				if d := verdict(wire); d.Verdict != "verified" || d.Requests[0].Numbering != "block" {
					t.Errorf("%s: diff of the flat payload: %+v, want verified in block numbering", req, d)
				}
				// One flipped bit in the last group's last value.
				g := groups[len(groups)-1]
				bad := vllmEncode(numTokens, groups)
				bit := len(bad) - 8 + 3
				bad[bit] ^= 0x10
				pos := g.start + len(g.values) - 1
				d := verdict(bad)
				if d.Verdict != "mismatch" {
					t.Fatalf("%s: one flipped bit: %+v, want mismatch", req, d)
				}
				for _, gv := range d.Requests[0].Groups {
					want := []int{}
					if gv.ID == g.id {
						want = []int{pos}
					}
					if !slices.Equal(gv.Positions, want) {
						t.Errorf("%s group %d: mismatching positions %v, want %v", req, gv.ID, gv.Positions, want)
					}
				}
			}
		})
	}
}

// TestManifestAliasWithOtherTensor: a layer giving both alias_of and a
// tensor other than the aliased layer's is refused, naming both.
func TestManifestAliasWithOtherTensor(t *testing.T) {
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layers: 2, Format: "dir", Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(paths[0], "manifest.json")
	data, _ := os.ReadFile(mp)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	g := m["groups"].([]any)[0].(map[string]any)
	layers := g["layers"].([]any)
	other := layers[1].(map[string]any)["tensor"]
	g["layers"] = append(layers, map[string]any{"name": "model.layers.5.self_attn.attn", "dtype": "bfloat16", "alias_of": "model.layers.0.self_attn.attn", "tensor": other})
	out, _ := json.Marshal(m)
	if err := os.WriteFile(mp, out, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, "checksum", paths[0])
	if code != ExitInvalid || !strings.Contains(stderr, fmt.Sprint(other)) || !strings.Contains(stderr, "model.layers.0.self_attn.attn") {
		t.Errorf("exit %d: %s; want exit 3 naming the tensor and the aliased layer", code, stderr)
	}
}

// TestVLLMHints: the fixed reasons stay vLLM's, and a hint names the
// cause: another block size behind a flat payload's fingerprint, a
// renamed request, a rank that did not report.
func TestVLLMHints(t *testing.T) {
	dir := t.TempDir()
	cfg := synth.Config{Preset: "llama", Layers: 2, Requests: 1, Seed: 7}
	pp, err := synth.Write(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := synth.Write(dir, synth.Config{Preset: "llama", Layers: 2, Requests: 1, Seed: 7, Role: "consumer", TP: 2, BlockSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ := run(t, append([]string{"checksum", "-o", "payload", "--payload-form", "flat"}, pp...)...)
	if code != ExitOK {
		t.Fatal(out)
	}
	var payloads map[string]string
	_ = json.Unmarshal([]byte(out), &payloads)
	type hinted struct {
		Requests []struct {
			Reasons []string `json:"reasons"`
			Hints   []string `json:"hints"`
			Groups  []struct {
				Reason string `json:"reason"`
				Hint   string `json:"hint"`
			} `json:"groups"`
		} `json:"requests"`
	}
	diff := func(args ...string) hinted {
		t.Helper()
		code, out, stderr := run(t, append([]string{"diff", "-o", "json"}, args...)...)
		var h hinted
		if err := json.Unmarshal([]byte(out), &h); err != nil || code != ExitUnverified {
			t.Fatalf("%v: exit %d: %v %s", args, code, err, stderr)
		}
		return h
	}
	h := diff(payloads["req-0"], filepath.Join(dir, "consumer"))
	if g := h.Requests[0].Groups[0]; g.Reason != "a group holds other layers, block size or dtype on the producer" || !strings.Contains(g.Hint, "producer 16, consumer 32") {
		t.Errorf("flat payload against 32-token blocks: %+v", g)
	}
	// A renamed request (real P/D: cmpl-abc-0 on the consumer).
	f := filepath.Join(dir, "renamed.json")
	b, _ := json.Marshal(map[string]string{"cmpl-abc-0": payloads["req-0"]})
	_ = os.WriteFile(f, b, 0o644)
	h = diff(f, filepath.Join(dir, "consumer"))
	if r := h.Requests[0]; !slices.Equal(r.Reasons, []string{"the producer sent no checksums"}) || len(r.Hints) == 0 || !strings.Contains(r.Hints[0], `no producer request has id "req-0"`) || !strings.Contains(r.Hints[0], "producer_id") {
		t.Errorf("renamed request: %+v", r)
	}
	// One rank of two.
	h = diff(filepath.Join(dir, "producer"), cp[0])
	if r := h.Requests[0]; !slices.Contains(r.Reasons, "not every worker reported its checksums") || !slices.ContainsFunc(r.Hints, func(s string) bool { return strings.Contains(s, "consumer: tp 1 of 2 did not report") }) {
		t.Errorf("missing rank: %+v", r)
	}
}

// TestChecksumNothingExits2: a side whose every group is skipped, and
// --stored with nothing stored, exit 2 with the reasons, never 0.
func TestChecksumNothingExits2(t *testing.T) {
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layers: 2, Requests: 1, Format: "dir"})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "checksum", "--stored", paths[0]); code != ExitUnverified {
		t.Errorf("checksum --stored with nothing stored: exit %d: %s", code, stderr)
	}
	if code, _, stderr := run(t, "checksum", paths[0]); code != ExitOK {
		t.Fatalf("checksum: exit %d: %s", code, stderr)
	}
	mp := filepath.Join(paths[0], "manifest.json")
	data, _ := os.ReadFile(mp)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["groups"].([]any)[0].(map[string]any)["host_resident"] = true
	out, _ := json.Marshal(m)
	if err := os.WriteFile(mp, out, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"table", "json", "payload"} {
		code, _, stderr := run(t, "checksum", "-o", o, paths[0])
		if code != ExitUnverified || !strings.Contains(stderr, "nothing checksummed") || !strings.Contains(stderr, "group 0 skipped") {
			t.Errorf("-o %s, every group skipped: exit %d: %s", o, code, stderr)
		}
	}
}
