package main

import (
	"bufio"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/kvaudit/kvaudit/layout"
)

// cmdSharedBlock writes a dump directory whose one cache holds a single
// block of BYTES bytes (one bfloat16 KV head of 128, BYTES/512 tokens a
// block) and whose REQUESTS requests all read it: at position 0 ("same",
// a prefix every request shares, as a system prompt is; "token", the same
// with one token each, the rest of the block a tail) or request i at
// position i ("shifted", the work amplification a hostile manifest asks
// for: leading null blocks put it there). The manifest stays small
// whatever the block's size: sharedblock DIR REQUESTS BYTES
// same|token|shifted.
func cmdSharedBlock(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 || (args[3] != "same" && args[3] != "token" && args[3] != "shifted") {
		ts.Fatalf("usage: sharedblock DIR REQUESTS BYTES same|token|shifted")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	size, err := strconv.Atoi(args[2])
	ts.Check(err)
	S := size / 512
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o755))
	m := &layout.Manifest{
		Format: layout.ManifestFormat, Model: layout.Model{Name: "shared-block", NumKVHeads: 1},
		Parallel: layout.Parallel{TPSize: 1, PPSize: 1}, NumBlocks: 1,
		Groups: []layout.Group{{ID: 0, Kind: layout.KindFullAttention, BlockSize: S, Layers: []layout.Layer{{
			Name: "model.layers.0.self_attn.attn", Dtype: "bfloat16", NumKVHeads: 1, HeadSize: 128,
			Layout: []string{"kv", "block", "token", "head", "dim"},
			Source: &layout.Source{File: "kv.bin", Dtype: "BF16", Shape: []int64{2, 1, int64(S), 1, 128}, Strides: []int64{int64(S) * 128, int64(S) * 128, 128, 128, 1}},
		}}}},
	}
	for i := range n {
		table := layout.BlockIDs{0}
		if args[3] == "shifted" {
			table = make(layout.BlockIDs, i+1)
			for k := range table {
				table[k] = layout.NoBlock
			}
			table[i] = 0
		}
		tokens := len(table) * S
		if args[3] == "token" {
			tokens = 1
		}
		m.Requests = append(m.Requests, layout.Request{ID: "req-" + strconv.Itoa(i), NumTokens: tokens, BlockTable: map[string]layout.BlockIDs{"0": table}})
	}
	text, err := layout.MarshalManifest(m)
	ts.Check(err)
	ts.Check(os.WriteFile(filepath.Join(dir, "manifest.json"), text, 0o644))
	f, err := os.Create(filepath.Join(dir, "kv.bin"))
	ts.Check(err)
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(1, uint64(size)))
	for i := 0; i < size; i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			w.WriteByte(byte(v >> (8 * k)))
		}
	}
	ts.Check(w.Flush())
	ts.Check(f.Close())
}
