package verify_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// sglangPair synthesizes an SGLang producer and consumer (same seed, page
// size and TP; other pages) and copies the consumer's rank 0 so that a
// test can change its pool.bin.
func sglangPair(t *testing.T, c synth.Config) (prod, cons []string, pool string, m *layout.Manifest) {
	t.Helper()
	dir := t.TempDir()
	c.Engine = "sglang"
	c.Role = "producer"
	prod, err := synth.Write(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	c.Role = "consumer"
	if cons, err = synth.Write(dir, c); err != nil {
		t.Fatal(err)
	}
	pool = filepath.Join(cons[0], "pool.bin")
	d, err := layout.Open(cons[0])
	if err != nil {
		t.Fatal(err)
	}
	m = d.Manifest
	d.Close()
	return prod, cons, pool, m
}

// sglangOffset is the offset in pool.bin of byte k of head h of token tok
// of request r in buffer b (the layout docs/sglang.md describes, computed
// here from the manifest alone).
func sglangOffset(m *layout.Manifest, b int, r string, tok, h, k int) int64 {
	buf := m.SGLang.Buffers[b]
	ps := m.SGLang.PageSize
	page := m.Request(r).BlockTable["0"][tok/ps]
	slot := buf.ItemLen / int64(ps)
	heads := int64(m.Groups[0].Layers[0].NumKVHeads)
	if heads == 0 {
		heads = 1
	}
	return buf.Offset + int64(page)*buf.ItemLen + int64(tok%ps)*slot + int64(h)*(slot/heads) + int64(k)
}

func compareSGLang(t *testing.T, prod, cons []string, sent map[string]uint64) (*verify.Result, *verify.SGLangAudit) {
	t.Helper()
	res, err := verify.Compare(context.Background(), side.Input{Paths: prod}, side.Input{Paths: cons}, verify.CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.OpenPaths(prod)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(p)
	c, err := layout.OpenPaths(cons)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(c)
	a, err := verify.CompareSGLang(p, c, verify.SGLangOptions{Sent: sent, Diff: res.Diff})
	if err != nil {
		t.Fatal(err)
	}
	return res, a
}

func patch(t *testing.T, pool string, off int64, f func(b []byte)) {
	t.Helper()
	data, err := os.ReadFile(pool)
	if err != nil {
		t.Fatal(err)
	}
	f(data[off:])
	if err := os.WriteFile(pool, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func find(a *verify.SGLangAudit, req string, tp int) *verify.SGLangRequestAudit {
	for _, r := range a.Requests {
		if r.Request == req && r.TP == tp {
			return r
		}
	}
	return nil
}

// TestCompareSGLang: a clean pair agrees; a flipped byte of a token is
// caught by both and pinned to its buffer, layer, page, token, head and
// byte; a byte in an unused tail slot is caught by SGLang alone (its
// whole pages) and said to be a false alarm; three bytes changed by
// +1, -2, +1 leave Adler-32 unchanged (kvaudit alone catches them); a
// wrong sent value is SGLang's alone and the consumer equals the
// producer.
func TestCompareSGLang(t *testing.T) {
	cfg := synth.Config{Preset: "llama", Layers: 2, BlockSize: 16, Tokens: 40, TP: 2}
	prod, cons, pool, m := sglangPair(t, cfg)
	res, a := compareSGLang(t, prod, cons, nil)
	if res.Verdict() != verify.Verified || len(a.Requests) != 4 {
		t.Fatalf("clean: %s, %d SGLang rows", res.Verdict(), len(a.Requests))
	}
	for _, r := range a.Requests {
		if r.Verdict != verify.Verified || r.ExpectedFrom != verify.SGLangFromMetadata || r.Producer == nil || *r.Producer != r.Consumer {
			t.Errorf("clean %s tp %d: %+v", r.Request, r.TP, r)
		}
	}

	// A byte of V (buffer 3: layer 1's V) of token 21, head 2, byte 5.
	off := sglangOffset(m, 3, "req-1", 21, 2, 5)
	patch(t, pool, off, func(b []byte) { b[0] ^= 0x04 })
	res, a = compareSGLang(t, prod, cons, nil)
	r := find(a, "req-1", 0)
	if res.Verdict() != verify.Mismatch || r.Verdict != verify.Mismatch || r.KVAudit != verify.Mismatch || r.Agreement != "both caught it" {
		t.Fatalf("flip: %s; %+v", res.Verdict(), r)
	}
	d := r.Diff
	if d == nil || d.Buffer != 3 || d.Layer != 1 || d.Role != "v" || d.Token != 21 || d.Head != 2 || d.Byte != 5 || d.PagePosition != 1 ||
		d.Page != int64(m.Request("req-1").BlockTable["0"][1]) || d.FileOffset != off || d.Producer^d.Consumer != 0x04 || d.Tail || r.DifferingBytes != 1 {
		t.Errorf("flip pinned at %+v (%d bytes), want buffer 3 layer 1 v page position 1 token 21 head 2 byte 5 offset %d", d, r.DifferingBytes, off)
	}
	if other := find(a, "req-0", 0); other.Verdict != verify.Verified {
		t.Errorf("req-0 untouched: %s", other.Verdict)
	}
	patch(t, pool, off, func(b []byte) { b[0] ^= 0x04 })

	// Token 45 is past the 40 tokens: an unused slot of the last page.
	off = sglangOffset(m, 0, "req-0", 45, 0, 0)
	patch(t, pool, off, func(b []byte) { b[0] ^= 0xff })
	_, a = compareSGLang(t, prod, cons, nil)
	r = find(a, "req-0", 0)
	if r.Verdict != verify.Mismatch || r.KVAudit != verify.Verified || !r.Diff.Tail || r.TailBytes != 1 || !strings.Contains(r.Agreement, "false alarm") {
		t.Errorf("tail write: %+v, diff %+v", r, r.Diff)
	}
	patch(t, pool, off, func(b []byte) { b[0] ^= 0xff })

	// +1, -2, +1 on three consecutive bytes: Adler-32's sums do not move.
	off = sglangOffset(m, 1, "req-0", 3, 1, 10)
	patch(t, pool, off, func(b []byte) {
		for b[0] == 0xff || b[1] < 2 || b[2] == 0xff { // keep the pattern free of carries
			b[0], b[1], b[2] = 0x10, 0x20, 0x30
		}
		b[0]++
		b[1] -= 2
		b[2]++
	})
	res, a = compareSGLang(t, prod, cons, nil)
	r = find(a, "req-0", 0)
	if res.Diff.Verdict != verify.Mismatch || r.Verdict != verify.Verified || r.DifferingBytes != 3 || !strings.HasPrefix(r.Agreement, "kvaudit only") {
		t.Errorf("+1-2+1: kvaudit %s, SGLang %+v", res.Diff.Verdict, r)
	}
}

// TestCompareSGLangSent: --sglang-checksum overrides the kv_checksum row;
// a wrong value is SGLang's mismatch while the consumer equals the
// producer; a value of 0 is skipped, as SGLang skips it; a key naming no
// request is an error. Without the producer's dumps, the row alone holds
// the consumer.
func TestCompareSGLangSent(t *testing.T) {
	prod, cons, _, _ := sglangPair(t, synth.Config{Preset: "mla", Layers: 2, BlockSize: 1, Tokens: 9})
	_, a := compareSGLang(t, prod, cons, nil)
	good := find(a, "req-0", 0).Consumer
	_, a = compareSGLang(t, prod, cons, map[string]uint64{"req-0@0": uint64(good) + 1, "req-1@0": 0})
	r := find(a, "req-0", 0)
	if r.Verdict != verify.Mismatch || r.ExpectedFrom != verify.SGLangFromFlag || !strings.Contains(r.Agreement, "value, not the KV") {
		t.Errorf("wrong sent value: %+v", r)
	}
	if r := find(a, "req-1", 0); r.Verdict != verify.Unverified || !strings.Contains(r.Reason, "skips") {
		t.Errorf("0 sent: %+v", r)
	}
	c, _ := layout.OpenPaths(cons)
	defer layout.CloseAll(c)
	if _, err := verify.CompareSGLang(nil, c, verify.SGLangOptions{Sent: map[string]uint64{"req-9@0": 1}}); err == nil {
		t.Error("--sglang-checksum of no request: no error")
	}
	a, err := verify.CompareSGLang(nil, c, verify.SGLangOptions{})
	if err != nil || find(a, "req-0", 0).Verdict != verify.Verified || find(a, "req-0", 0).Producer != nil {
		t.Errorf("consumer alone: %v %+v", err, a)
	}
	if _, err := verify.ParseSGLangChecksums([]string{"r=12"}); err == nil {
		t.Error("a value without 0x parsed")
	}
	if m, err := verify.ParseSGLangChecksums([]string{"r=0xAB", "r@1=0x1"}); err != nil || m["r@0"] != 0xab || m["r@1"] != 1 {
		t.Errorf("ParseSGLangChecksums: %v %v", m, err)
	}
}

// TestCompareSGLangLayouts: a producer with another page size (or TP
// size) is not comparable by SGLang's value: the audit says so, holds the
// consumer to its kv_checksum row alone and pins nothing, while kvaudit's
// own checks verify the pair.
func TestCompareSGLangLayouts(t *testing.T) {
	dir := t.TempDir()
	p, err := synth.Write(dir, synth.Config{Engine: "sglang", Preset: "llama", Layers: 2, BlockSize: 16, Tokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	c, err := synth.Write(dir, synth.Config{Engine: "sglang", Preset: "llama", Layers: 2, BlockSize: 1, Tokens: 40, TP: 2, Role: "consumer"})
	if err != nil {
		t.Fatal(err)
	}
	res, a := compareSGLang(t, p, c, nil)
	if res.Diff.Verdict != verify.Verified {
		t.Errorf("kvaudit across page and TP sizes: %s", res.Diff.Verdict)
	}
	if len(a.Notes) == 0 || !strings.Contains(strings.Join(a.Notes, "\n"), "not comparable") {
		t.Errorf("no note that the layouts differ: %v", a.Notes)
	}
	for _, r := range a.Requests {
		if r.Producer != nil || r.Diff != nil || r.ExpectedFrom != verify.SGLangFromMetadata || r.Verdict != verify.Verified {
			t.Errorf("%s tp %d: %+v", r.Request, r.TP, r)
		}
	}
}
