package cli

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// signFlip is one candidate change of the attack: the top bit of one
// 8-byte word of one block position (the sign of a bfloat16 element),
// where it lies in the file and what it adds to the published key's mix
// check.
type signFlip struct {
	file  string
	off   int64
	delta uint64
}

// wagnerNode is one sum of a generalized-birthday level: its value and
// the two entries of the level below it adds (a word's index at level 0).
type wagnerNode struct {
	v    uint64
	a, b int32
}

// cancellingFlips is a generalized-birthday search (Wagner's k-tree) over
// 32 lists of candidate top-bit flips: each of four rounds pairs the
// lists' entries whose sum has 12 more low bits zero, and the last pairs
// those that sum to 0 mod 2^64. It returns the indices of 32 flips whose
// mix-check differences cancel, nil when it finds none.
func cancellingFlips(flips []signFlip) []int {
	const lists = 32
	level := make([][]wagnerNode, lists)
	for i, f := range flips {
		level[i%lists] = append(level[i%lists], wagnerNode{v: f.delta, a: int32(i), b: -1})
	}
	var tree [][][]wagnerNode // tree[l][list]: level l's lists
	tree = append(tree, level)
	for round, bits := 1, 12; len(level) > 1; round, bits = round+1, bits+12 {
		mask := ^uint64(0)
		if len(level) > 2 {
			mask = 1<<bits - 1
		}
		next := make([][]wagnerNode, len(level)/2)
		for i := range next {
			A, B := level[2*i], level[2*i+1]
			byLow := map[uint64][]int32{}
			for bi, b := range B {
				byLow[b.v&mask] = append(byLow[b.v&mask], int32(bi))
			}
			for ai, a := range A {
				for _, bi := range byLow[-a.v&mask] {
					if len(next[i]) < 1<<13 {
						next[i] = append(next[i], wagnerNode{v: a.v + B[bi].v, a: int32(ai), b: bi})
					}
				}
			}
		}
		level = next
		tree = append(tree, level)
	}
	if len(level[0]) == 0 {
		return nil
	}
	var words []int
	var collect func(l, list int, n wagnerNode)
	collect = func(l, list int, n wagnerNode) {
		if l == 0 {
			words = append(words, int(n.a))
			return
		}
		collect(l-1, 2*list, tree[l-1][2*list][n.a])
		collect(l-1, 2*list+1, tree[l-1][2*list+1][n.b])
	}
	collect(len(tree)-1, 0, level[0][0])
	return words
}

// signFlips lists every top-bit flip of block position 0 of the dump's
// first request, group 0, with its difference in the published key's
// mix check (docs/spec.md §14): Mix(x ^ 2^63 ^ K) - Mix(x ^ K).
func signFlips(t *testing.T, path string) []signFlip {
	t.Helper()
	d, err := layout.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	g := d.Groups[0]
	span, _, err := blockspan.Of(&d.Manifest.Requests[0], g.Group)
	if err != nil || span.Start != 0 {
		t.Fatalf("span %+v: %v", span, err)
	}
	block := span.Blocks[0]
	var flips []signFlip
	var cell []byte
	for _, c := range g.Caches {
		v := &c.Cells
		for tok := range d.Manifest.Requests[0].NumTokens {
			for h := range c.Heads {
				cell = v.ReadCell(cell[:0], block, tok, h)
				W := len(cell) / 8
				for p := range W {
					x := binary.LittleEndian.Uint64(cell[8*p:])
					k := checksum.MixKey(checksum.MixSlice(c, c.HeadBase+h), uint64(tok*W+p))
					i := 8*p + 7 // the word's top byte, in logical order
					var off int64 = -1
					for _, r := range v.Runs {
						if i < r.Len {
							off = v.FileOffset + v.CellAddr(block, tok, h) + r.Offset + int64(i)
							break
						}
						i -= r.Len
					}
					flips = append(flips, signFlip{file: v.File, off: off, delta: checksum.Mix(x^1<<63^k) - checksum.Mix(x^k)})
				}
			}
		}
	}
	return flips
}

// TestMixKeyAttack (issue 33, attack 6): 32 bfloat16 sign bits of one block
// position, chosen by a generalized-birthday search against the published
// key, cancel in vLLM's checksum (an even number of top-bit flips) and in
// the published key's mix check. diff of dumps against dumps keys its mix
// check per run, so it reports the mismatch; --mix-key published
// reproduces the blind spot, and the table says the key is published.
func TestMixKeyAttack(t *testing.T) {
	dir := t.TempDir()
	cfg := synth.Config{Preset: "llama", Layers: 16, Tokens: 16, BlockSize: 16, Requests: 1, Seed: 5}
	if _, err := synth.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Role = "consumer"
	paths, err := synth.Write(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	flips := signFlips(t, paths[0])
	words := cancellingFlips(flips)
	if len(words) != 32 {
		t.Fatalf("the search over %d flips found no 32 that cancel", len(flips))
	}
	var sum uint64
	for _, w := range words {
		sum += flips[w].delta
	}
	if sum != 0 || len(slices.Compact(slices.Sorted(slices.Values(words)))) != 32 {
		t.Fatalf("the pattern %v does not cancel: %#x", words, sum)
	}
	for _, w := range words {
		f, err := os.OpenFile(flips[w].file, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{0}
		if _, err := f.ReadAt(b, flips[w].off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x80
		if _, err := f.WriteAt(b, flips[w].off); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	P, C := filepath.Join(dir, "producer"), filepath.Join(dir, "consumer")

	// A run's own key catches it, in kvaudit's mix check only.
	code, out, stderr := run(t, "diff", "-o", "json", P, C)
	var doc struct {
		Verdict, MixKey, MixKeySource string
		Requests                      []struct {
			Groups []struct {
				Positions, MixOnly []int
				Strength           string
			}
		}
	}
	decode := func(out string) {
		t.Helper()
		doc.Requests = nil
		if err := json.Unmarshal([]byte(strings.NewReplacer(`"mix_key"`, `"MixKey"`, `"mix_key_source"`, `"MixKeySource"`, `"mix_only"`, `"MixOnly"`).Replace(out)), &doc); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	decode(out)
	if code != ExitMismatch || doc.Verdict != "mismatch" || doc.MixKeySource != "run" || len(doc.Requests) != 1 ||
		!slices.Equal(doc.Requests[0].Groups[0].MixOnly, []int{0}) || doc.Requests[0].Groups[0].Strength != "vllm+mix" {
		t.Fatalf("a run's key: exit %d, want 1 (mismatch at position 0, by the mix check only):\n%s%s", code, out, stderr)
	}
	// Under the published key, both checks miss it, and the table says
	// which key it was.
	code, out, stderr = run(t, "diff", "--mix-key", "published", P, C)
	if code != ExitOK || !strings.Contains(out, "published key") || !strings.Contains(out, "can cancel in both checks") {
		t.Fatalf("--mix-key published: exit %d, want 0 (the blind spot reproduced), the key said published:\n%s%s", code, out, stderr)
	}
	// --mix-key with the run's key reproduces the run.
	key := doc.MixKey
	code, out, _ = run(t, "diff", "-o", "json", "--mix-key", key, P, C)
	decode(out)
	if code != ExitMismatch || doc.MixKey != key || doc.MixKeySource != "given" {
		t.Fatalf("--mix-key %s: exit %d, key %s (%s):\n%s", key, code, doc.MixKey, doc.MixKeySource, out)
	}
	// Records keep the published key: the blind spot, said in the table.
	rec := filepath.Join(t.TempDir(), "rec")
	if err := os.Mkdir(rec, 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "checksum", "-o", "record", "--out", rec, P); code != ExitOK {
		t.Fatalf("checksum -o record: exit %d: %s", code, stderr)
	}
	code, out, stderr = run(t, "diff", rec, C)
	if code != ExitOK || !strings.Contains(out, "under the published key, which records and payloads carry") {
		t.Errorf("records against dumps: exit %d, want 0 and the published key said:\n%s%s", code, out, stderr)
	}
	if code, _, stderr := run(t, "diff", "--mix-key", key, rec, C); code != ExitInvalid || !strings.Contains(stderr, "--mix-key") {
		t.Errorf("--mix-key with a side of records: exit %d, want 3: %s", code, stderr)
	}
}
