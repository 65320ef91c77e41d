package cli

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
)

// wireGroup is a group of a hand-built wire variant: each field is its
// msgpack encoding, so variants can use other encodings than msgspec's.
type wireGroup struct{ id, fingerprint, start, values []byte }

func mpInt64(v int64) []byte { return binary.BigEndian.AppendUint64([]byte{0xd3}, uint64(v)) }

func wireOf(g vllmGroup) wireGroup {
	var vals []byte
	for _, v := range g.values {
		vals = binary.LittleEndian.AppendUint64(vals, v)
	}
	return wireGroup{mpUint(nil, uint64(g.id)), mpUint(nil, g.fingerprint), mpUint(nil, uint64(g.start)), mpBin(nil, vals)}
}

func wireEncode(version, numTokens []byte, groups ...wireGroup) []byte {
	b := append(mpArray(nil, 3), version...)
	b = append(b, numTokens...)
	b = mpArray(b, len(groups))
	for _, g := range groups {
		b = mpArray(b, 4)
		b = append(append(append(append(b, g.id...), g.fingerprint...), g.start...), g.values...)
	}
	return b
}

// TestVLLMWireVariants: payload variants on the wire, each with the
// verdict vLLM's consumer reaches on it (scheduler.py: pybase64.b64decode,
// a typed msgspec decode of tuple[int, int, list[tuple[int, int, int,
// bytes]]], version 1, np.frombuffer of the values, a dict of the groups,
// then the comparison of the overlapping positions with equal token
// counts).
func TestVLLMWireVariants(t *testing.T) {
	cfg := synth.Config{Preset: "llama", Layers: 2, Requests: 1, Seed: 11} // 40 tokens: 3 blocks of 16
	dir := t.TempDir()
	if _, err := synth.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := synth.Write(dir, func() synth.Config { c := cfg; c.Role = "consumer"; return c }()); err != nil {
		t.Fatal(err)
	}
	numTokens, groups := vllmPayload(t, cfg, 0, nil)
	g := groups[0]
	ok := wireOf(g)
	badAt1 := func() wireGroup {
		b := g
		b.values = slices.Clone(g.values)
		b.values[1] ^= 1 << 40
		return wireOf(b)
	}()
	v1, nt := mpUint(nil, 1), mpUint(nil, uint64(numTokens))
	good := wireEncode(v1, nt, ok)
	shifted := g // start -1: a value for position -1, then positions 0 and 1
	shifted.start = 0
	shifted.values = append([]uint64{0xdead}, g.values[:2]...)
	neg := wireOf(shifted)
	neg.start = []byte{0xff} // -1 as a negative fixint
	twelve := ok
	twelve.values = mpBin(nil, make([]byte, 12))
	asStr := ok
	asStr.values = append([]byte{0xb8}, make([]byte, 24)...) // fixstr of 24
	extra := wireOf(vllmGroup{id: 5, fingerprint: 12345, values: []uint64{1, 2, 3}})
	nonMinimal := wireGroup{
		id: []byte{0xcd, 0, 0}, fingerprint: binary.BigEndian.AppendUint64([]byte{0xcf}, g.fingerprint),
		start: []byte{0xd0, 0}, values: append([]byte{0xc6, 0, 0, 0, 24}, ok.values[2:]...),
	}
	asInt64 := ok
	asInt64.fingerprint = mpInt64(int64(g.fingerprint))
	int64Verdict, int64Reason := "verified", ""
	if g.fingerprint >= 1<<63 {
		// As an int64 it is negative: Python compares it unequal.
		int64Verdict, int64Reason = "unverified", "a group holds other layers, block size or dtype on the producer"
	}
	b64 := base64.StdEncoding.EncodeToString
	const invalid = "the producer's checksums are invalid"

	cases := []struct {
		name      string
		text      string // the kv_checksums text
		verdict   string
		reason    string // a load reason or group 0's reason
		positions []int
		note      string // a note the leniency must leave
	}{
		{name: "as sent", text: b64(good), verdict: "verified"},
		{name: "duplicate group ids, same", text: b64(wireEncode(v1, nt, ok, ok)), verdict: "verified", note: "listed more than once"},
		{name: "duplicate group ids, bad first", text: b64(wireEncode(v1, nt, badAt1, ok)), verdict: "verified"},
		{name: "duplicate group ids, bad last", text: b64(wireEncode(v1, nt, ok, badAt1)), verdict: "mismatch", positions: []int{1}, note: "listed more than once"},
		{name: "negative start", text: b64(wireEncode(v1, nt, neg)), verdict: "verified", note: "start is negative"},
		{name: "negative num_tokens", text: b64(wireEncode(v1, []byte{0xd0, 0xd8}, ok)), verdict: "unverified", reason: "a group has no block in common", note: "num_tokens is negative"},
		{name: "newline inside the base64", text: b64(good)[:20] + "\n" + b64(good)[20:], verdict: "verified", note: "outside the base64 alphabet"},
		{name: "missing padding", text: strings.TrimRight(b64(append(good, 0x00)), "="), verdict: "unverified", reason: invalid},
		{name: "12-byte values", text: b64(wireEncode(v1, nt, twelve)), verdict: "unverified", reason: invalid},
		{name: "values as str", text: b64(wireEncode(v1, nt, asStr)), verdict: "unverified", reason: invalid},
		{name: "version 2", text: b64(wireEncode(mpUint(nil, 2), nt, ok)), verdict: "unverified", reason: invalid},
		{name: "version as bool", text: b64(wireEncode([]byte{0xc3}, nt, ok)), verdict: "unverified", reason: invalid},
		{name: "trailing byte", text: b64(append(slices.Clone(good), 0x00)), verdict: "unverified", reason: invalid},
		{name: "truncated", text: b64(good[:len(good)-1]), verdict: "unverified", reason: invalid},
		{name: "a map instead of an array", text: b64(append([]byte{0x83}, good[1:]...)), verdict: "unverified", reason: invalid},
		{name: "no groups", text: b64(wireEncode(v1, nt)), verdict: "unverified", reason: "a group is checksummed by one side only"},
		{name: "an extra group the consumer lacks", text: b64(wireEncode(v1, nt, ok, extra)), verdict: "verified"},
		{name: "non-minimal integer encodings", text: b64(wireEncode([]byte{0xcf, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{0xce, 0, 0, 0, byte(numTokens)}, nonMinimal)), verdict: "verified"},
		{name: "fingerprint as int64", text: b64(wireEncode(v1, nt, asInt64)), verdict: int64Verdict, reason: int64Reason},
	}
	if !strings.HasSuffix(b64(append(good, 0x00)), "=") {
		t.Fatal("the missing-padding variant has no padding to strip")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "params.json")
			params, _ := json.Marshal(map[string]any{"kv_checksums": tc.text})
			if err := os.WriteFile(f, params, 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, stderr := run(t, "diff", "-o", "json", f, filepath.Join(dir, "consumer"))
			var d struct {
				Verdict  string `json:"verdict"`
				Requests []struct {
					Reasons []string `json:"reasons"`
					Notes   []string `json:"notes"`
					Groups  []struct {
						ID        int    `json:"id"`
						Verdict   string `json:"verdict"`
						Reason    string `json:"reason"`
						Positions []int  `json:"positions"`
					} `json:"groups"`
				} `json:"requests"`
			}
			if err := json.Unmarshal([]byte(out), &d); err != nil {
				t.Fatalf("exit %d: %v: %s", code, err, stderr)
			}
			wantCode := map[string]int{"verified": ExitOK, "mismatch": ExitMismatch, "unverified": ExitUnverified}[tc.verdict]
			if d.Verdict != tc.verdict || code != wantCode {
				t.Fatalf("verdict %q exit %d, want %q exit %d: %s", d.Verdict, code, tc.verdict, wantCode, out)
			}
			r := d.Requests[0]
			if tc.reason != "" {
				var got []string
				got = append(got, r.Reasons...)
				for _, gv := range r.Groups {
					got = append(got, gv.Reason)
				}
				if !slices.Contains(got, tc.reason) {
					t.Errorf("reasons %q, want %q", got, tc.reason)
				}
			}
			if tc.note != "" && !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, tc.note) }) {
				t.Errorf("notes %q, want one saying %q", r.Notes, tc.note)
			}
			if tc.positions != nil && (len(r.Groups) == 0 || !slices.Equal(r.Groups[0].Positions, tc.positions)) {
				t.Errorf("groups %+v, want group 0 mismatching at %v", r.Groups, tc.positions)
			}
		})
	}
}
