package transfer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/dumpwrite"
	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
)

// specDoc is the project's specification, which users read.
var specDoc = filepath.Join("..", "docs", "spec.md")

// specBlocks returns the fenced code blocks of docs/spec.md §13's worked
// example by their name (the word after the language).
func specBlocks(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(specDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## 13. Transfers")
	if !ok {
		t.Fatalf("%s: no §13", specDoc)
	}
	_, sec, ok = strings.Cut(sec, "\n### Worked example\n")
	if !ok {
		t.Fatalf("%s: §13 has no worked example", specDoc)
	}
	blocks := map[string]string{}
	for {
		_, rest, ok := strings.Cut(sec, "\n```")
		if !ok {
			break
		}
		info, rest, _ := strings.Cut(rest, "\n")
		body, after, ok := strings.Cut(rest, "\n```\n")
		if !ok {
			t.Fatalf("%s: an unterminated block %q", specDoc, info)
		}
		if f := strings.Fields(info); len(f) == 2 {
			blocks[f[1]] = body + "\n"
		}
		sec = after
	}
	for _, name := range []string{"producer-manifest", "consumer-manifest", "log", "lapsed-lease", "dropped"} {
		if blocks[name] == "" {
			t.Fatalf("%s: §13's worked example has no %q block", specDoc, name)
		}
	}
	return blocks
}

// exampleDump writes a dump of the example's manifest: every byte of a
// request's blocks before its last token is fill, every other byte zero.
func exampleDump(t *testing.T, path, manifest string, fill byte) *layout.Dump {
	t.Helper()
	m, err := layout.ParseManifest(path, []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	l := m.Groups[0].Layers[0]
	shape := []int64{2, int64(m.NumBlocks), 2, 2, 2} // kv, block, token, head, dim
	data := make([]byte, 2*m.NumBlocks*2*2*2*4)
	for _, r := range m.Requests {
		for pos, b := range r.BlockTable["0"] {
			for tok := range 2 {
				if pos*2+tok >= r.NumTokens {
					continue
				}
				for kv := range 2 {
					off := ((kv*m.NumBlocks+b)*2 + tok) * 2 * 2 * 4
					for i := range 16 {
						data[off+i] = fill
					}
				}
			}
		}
	}
	f32, _ := layout.ParseDtype("F32")
	if err := dumpwrite.File(path, m, []safetensors.TensorData{{Name: l.Tensor, Dtype: f32, Shape: shape, Data: data}}); err != nil {
		t.Fatal(err)
	}
	d, err := layout.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestSpecWorkedExample holds docs/spec.md §13's worked example to the
// audit: the pair it resolves resolves so, the log passes, and each
// changed log gives exactly the findings the document lists.
func TestSpecWorkedExample(t *testing.T) {
	blocks := specBlocks(t)
	dir := t.TempDir()
	prod := exampleDump(t, filepath.Join(dir, "producer.safetensors"), blocks["producer-manifest"], 0x5a)
	cons := exampleDump(t, filepath.Join(dir, "consumer.safetensors"), blocks["consumer-manifest"], 0x01)

	// "Pair 1 of transfer 1: local id 3 is 0x20060, 32 bytes, the
	// consumer's block 3, K, tokens 0 and 1 of the block, heads 0 and 1
	// ...; remote id 0 is 0x10000, the producer's block 0, K."
	for _, c := range []struct {
		d     *layout.Dump
		addr  uint64
		block int
	}{{cons, 0x20060, 3}, {prod, 0x10000, 0}} {
		am, err := addrmap.New(c.d)
		if err != nil {
			t.Fatal(err)
		}
		var got []addrmap.Cells
		am.Resolve(c.addr, 32, func(x addrmap.Cells) error { got = append(got, x); return nil })
		if len(got) != 1 || got[0].Block != c.block || got[0].Tokens != [2]int{0, 2} || got[0].Heads != [2]int{0, 2} || got[0].Bytes != [2]int{0, 8} {
			t.Fatalf("0x%x resolves to %+v, the document says block %d, K, tokens 0-1, heads 0-1", c.addr, got, c.block)
		}
	}

	audit := func(log string) []string {
		path := filepath.Join(t.TempDir(), "decode-0.jsonl")
		if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := transfer.Audit(context.Background(), []string{path}, []*layout.Dump{prod}, []*layout.Dump{cons}, transfer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, f := range res.Findings {
			lines = append(lines, fmt.Sprintf("%s %s %d %d: %s", f.Invariant, f.Request, f.Transfer, f.Descriptor, f.Message))
		}
		return lines
	}
	log := blocks["log"]
	if got := audit(log); len(got) != 0 {
		t.Fatalf("the example's log: %v, the document says it passes", got)
	}
	for name, edit := range map[string][2]string{
		"lapsed-lease": {`"remote_ids":[2,0,6,4]`, `"remote_ids":[2,3,6,4]`},
		"dropped":      {`"local_ids":[1,3,5,7],"remote":2,"remote_ids":[2,0,6,4]`, `"local_ids":[1,3,7],"remote":2,"remote_ids":[2,0,4]`},
	} {
		changed := strings.Replace(log, edit[0], edit[1], 1)
		if changed == log {
			t.Fatalf("%s: %q is not in the document's log", name, edit[0])
		}
		got := strings.Join(audit(changed), "\n") + "\n"
		if got != blocks[name] {
			t.Errorf("%s: the audit finds\n%s\nthe document says\n%s", name, got, blocks[name])
		}
	}
}
