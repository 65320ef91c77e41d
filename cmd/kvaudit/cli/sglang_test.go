package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSGLangCommands runs the SGLang commands on synthesized SGLang
// sides: checksum --scheme sglang-adler32 (values beside the sent ones,
// exit 1 when one differs), inspect (the pool's buffers), diff (clean,
// then a byte changed: SGLang's table pins it; --sglang-checksum with a
// wrong value fails a request whose KV is intact), and the usage errors.
func TestSGLangCommands(t *testing.T) {
	dir := t.TempDir()
	for _, role := range []string{"producer", "consumer"} {
		if code, _, errs := run(t, "synth", "--out", dir, "--engine", "sglang", "--preset", "tiny", "--block-size", "2", "--tokens", "5", "--requests", "2", "--tp", "2", "--role", role); code != 0 {
			t.Fatalf("synth %s: exit %d: %s", role, code, errs)
		}
	}
	prod, cons := filepath.Join(dir, "producer"), filepath.Join(dir, "consumer")
	code, out, errs := run(t, "checksum", "--scheme", "sglang-adler32", "-o", "json", cons)
	if code != 0 {
		t.Fatalf("checksum: exit %d: %s", code, errs)
	}
	var vals struct {
		Scheme string `json:"scheme"`
		Values []struct {
			Request, Value, Sent string
			TP                   int
			Agrees               *bool
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(out), &vals); err != nil || vals.Scheme != "sglang-adler32" || len(vals.Values) != 4 {
		t.Fatalf("checksum json: %v %s", err, out)
	}
	for _, v := range vals.Values {
		if v.Agrees == nil || !*v.Agrees || v.Value != v.Sent {
			t.Errorf("%+v", v)
		}
	}
	if code, out, _ := run(t, "inspect", filepath.Join(cons, "rank-0-1")); code != 0 || !strings.Contains(out, "SGLang MHATokenToKVPool, page size 2") {
		t.Errorf("inspect: exit %d\n%s", code, out)
	}
	if code, out, errs := run(t, "diff", prod, cons); code != 0 || !strings.Contains(out, "agree: verified") {
		t.Errorf("clean diff: exit %d\n%s%s", code, out, errs)
	}
	// A wrong sent value for req-0 on rank 1: SGLang alone fails it.
	code, out, _ = run(t, "diff", "--sglang-checksum", "req-0@1=0x1", prod, cons)
	if code != 1 || !strings.Contains(out, "SGLang only: the consumer equals the producer") {
		t.Errorf("wrong sent value: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, "diff", "-o", "junit", "--sglang-checksum", "req-0@1=0x1", prod, cons)
	if code != 1 || !strings.Contains(out, `<testsuite name="SGLang KV checksum (sglang-adler32)" tests="4" failures="1"`) || !strings.Contains(out, `type="sglang-adler32 mismatch"`) {
		t.Errorf("junit: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, "diff", "-o", "json", "--sglang-checksum", "req-0@1=0x1", prod, cons)
	var dj struct {
		Verdict string `json:"verdict"`
		SGLang  struct {
			Requests []struct {
				Request, Verdict, Expected, ExpectedFrom string
				TP                                       int
			} `json:"requests"`
		} `json:"sglang"`
	}
	if err := json.Unmarshal([]byte(out), &dj); err != nil || code != 1 || dj.Verdict != "mismatch" || len(dj.SGLang.Requests) != 4 {
		t.Fatalf("json: exit %d, %v\n%s", code, err, out)
	}
	for _, r := range dj.SGLang.Requests {
		if (r.Request == "req-0" && r.TP == 1) != (r.Verdict == "mismatch") {
			t.Errorf("json: %+v", r)
		}
	}
	// One byte of K of layer 0 (buffer 0), token 1 of req-1, on rank 0.
	pool := filepath.Join(cons, "rank-0-0", "pool.bin")
	data, _ := os.ReadFile(pool)
	var man struct {
		Requests []struct {
			ID         string           `json:"id"`
			BlockTable map[string][]int `json:"block_table"`
		} `json:"requests"`
		SGLang struct {
			Buffers []struct {
				Offset  int64 `json:"offset"`
				ItemLen int64 `json:"item_len"`
			} `json:"buffers"`
		} `json:"sglang"`
	}
	text, _ := os.ReadFile(filepath.Join(cons, "rank-0-0", "manifest.json"))
	if err := json.Unmarshal(text, &man); err != nil {
		t.Fatal(err)
	}
	page := man.Requests[1].BlockTable["0"][0]
	at := man.SGLang.Buffers[0].Offset + int64(page)*man.SGLang.Buffers[0].ItemLen + man.SGLang.Buffers[0].ItemLen/2 // slot 1 of the page
	data[at] ^= 0x40
	os.WriteFile(pool, data, 0o644)
	code, out, _ = run(t, "diff", prod, cons)
	if code != 1 || !strings.Contains(out, "both caught it") || !strings.Contains(out, "buffer 0 (layer 0 k), page ") || !strings.Contains(out, "token 1, head 0, byte 0") {
		t.Errorf("flipped byte: exit %d\n%s", code, out)
	}
	if code, out, _ := run(t, "checksum", "--scheme", "sglang-adler32", "--sglang-checksum", "req-1@1=0x1", filepath.Join(cons, "rank-0-1")); code != 1 || !strings.Contains(out, "MISMATCH") {
		t.Errorf("checksum against a given sent value: exit %d\n%s", code, out)
	}
	if code, _, _ := run(t, "checksum", "--scheme", "sglang-adler32", cons); code != 1 {
		t.Errorf("checksum of the changed consumer: exit %d, want 1", code)
	}
	for _, args := range [][]string{
		{"checksum", "--scheme", "crc", cons},
		{"checksum", "--scheme", "sglang-adler32", "-o", "record", cons},
		{"diff", "--sglang-checksum", "req-0=12", prod, cons},
		{"checksum", "--sglang-checksum", "req-0=0x1", cons},
		{"checksum", "--scheme", "sglang-adler32", "--sglang-checksum", "req-7=0x1", cons},
		{"campaign", "--engine", "sglang", prod, cons},
		{"synth", "--out", dir, "--engine", "sglang", "--preset", "swa"},
	} {
		if code, _, _ := run(t, args...); code != 3 {
			t.Errorf("%v: exit %d, want 3", args, code)
		}
	}
	if code, _, _ := run(t, "checksum", "--scheme", "sglang-adler32", filepath.Join(dir, "nope")); code == 0 {
		t.Error("checksum of nothing: exit 0")
	}
}
