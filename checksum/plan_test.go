package checksum_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
)

// rewriteManifest replaces a dump directory's manifest.json with edit's
// result (the directory is the test's own).
func rewriteManifest(t *testing.T, dir string, edit func(m *layout.Manifest)) {
	t.Helper()
	p := filepath.Join(dir, "manifest.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := layout.ParseManifest(p, data)
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	text, err := layout.MarshalManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, text, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sharedPrefixDump writes a TP2 rank (two replica-free caches per layer)
// whose requests 1 and 2 hold request 0's first two blocks at the same
// positions (a shared prefix), request 2 also its third block at
// position 2 but with fewer valid tokens there, and request 3 request
// 0's first block at position 1 (not a prefix: another position).
func sharedPrefixDump(t *testing.T) *layout.Dump {
	t.Helper()
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layers: 3, TP: 2, Requests: 4, Tokens: 48, Seed: 3, Format: "dir"})
	if err != nil {
		t.Fatal(err)
	}
	rewriteManifest(t, paths[0], func(m *layout.Manifest) {
		t0 := m.Requests[0].BlockTable["0"]
		m.Requests[1].BlockTable["0"][0], m.Requests[1].BlockTable["0"][1] = t0[0], t0[1]
		m.Requests[2].BlockTable["0"][0], m.Requests[2].BlockTable["0"][1], m.Requests[2].BlockTable["0"][2] = t0[0], t0[1], t0[2]
		m.Requests[2].NumTokens = 40
		m.Requests[3].BlockTable["0"][1] = t0[0]
	})
	d, err := layout.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestNewPlanSharedPrefix: a block that several requests read at the same
// position with the same valid tokens is read once, and every request
// still gets the value the definition gives for its blocks, in both
// numberings, computed here cache by cache with ReferenceBlock.
func TestNewPlanSharedPrefix(t *testing.T) {
	d := sharedPrefixDump(t)
	plan, _, err := checksum.NewPlan(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := d.GroupView(0)
	S := g.Group.BlockSize
	// Distinct (position, block, valid tokens) reads over the requests.
	type read struct{ pos, block, valid int }
	distinct := map[read]bool{}
	for _, r := range d.Manifest.Requests {
		for pos, b := range r.BlockTable["0"][:(r.NumTokens+S-1)/S] {
			distinct[read{pos, b, blockspan.ValidTokens(r.NumTokens, pos, S)}] = true
		}
	}
	var want int64
	for rd := range distinct {
		for _, c := range g.Caches {
			want += int64(rd.valid*c.Cells.Heads) * int64(c.Cells.CellBytes)
		}
	}
	if got := plan.Bytes(); got != want {
		t.Errorf("plan reads %d bytes, the distinct (position, block, tokens) reads hold %d", got, want)
	}
	// 4 requests of 3 positions: requests 1 and 2 take positions 0 and 1
	// from request 0 (4 copies); request 2's last block (fewer tokens)
	// and request 3's position 1 (another position) are read again.
	if len(distinct) != 8 || len(plan.Copies) != 4 {
		t.Errorf("%d distinct reads, %d copies; want 8 and 4", len(distinct), len(plan.Copies))
	}
	for i := 1; i < len(plan.Tasks); i++ {
		a, b := plan.Tasks[i-1], plan.Tasks[i]
		if a.Cache.Key() == b.Cache.Key() && &a.Rows[0] != &b.Rows[0] {
			t.Errorf("tasks %d and %d (one replica key) do not share their rows", i-1, i)
		}
	}

	for _, eng := range []checksum.Engine{checksum.Fast{}, checksum.Reference{}} {
		rec, err := checksum.RankRecord(context.Background(), d, checksum.Options{Engine: eng, BlockValues: true})
		if err != nil {
			t.Fatal(err)
		}
		for ri, rr := range rec.Requests {
			r := d.Manifest.Requests[ri]
			rg := rr.Groups[0]
			for i := range rg.Values.Len() {
				pos := rg.Start + i
				row := ckplan.Row{Block: r.BlockTable["0"][pos], FirstToken: int64(pos * S), Valid: blockspan.ValidTokens(r.NumTokens, pos, S)}
				var req, blk uint64
				for _, c := range g.Caches {
					req += checksum.ReferenceBlock(c, row)
					b := row
					b.FirstToken = 0
					blk += checksum.ReferenceBlock(c, b)
				}
				if rg.Values.At(i)[0] != req || rg.ValuesBlock.At(i)[0] != blk {
					t.Errorf("%s: %s position %d: %#x, %#x; want %#x, %#x", eng.Name(), r.ID, pos, rg.Values.At(i)[0], rg.ValuesBlock.At(i)[0], req, blk)
				}
			}
		}
		// The mix check (docs/spec.md §14) of a shared block is copied as
		// its values are: each request's record equals the record of that
		// request alone, whose plan reads every block it names (no
		// copies).
		for _, rr := range rec.Requests {
			alone, err := checksum.RankRecord(context.Background(), d, checksum.Options{Engine: eng, BlockValues: true, Requests: []string{rr.ID}})
			if err != nil {
				t.Fatal(err)
			}
			if p, _, err := checksum.NewPlan(d, []string{rr.ID}); err != nil || len(p.Copies) != 0 {
				t.Fatalf("%s alone: %v, %d copies; want none", rr.ID, err, len(p.Copies))
			}
			got, want := rr.Groups[0], alone.Requests[0].Groups[0]
			if got.Mix.IsZero() || !got.Mix.Equal(want.Mix) || !got.Values.Equal(want.Values) || !got.ValuesBlock.Equal(want.ValuesBlock) {
				t.Errorf("%s: %s with the others: values %v mix %v; alone: values %v mix %v", eng.Name(), rr.ID, got.Values, got.Mix, want.Values, want.Mix)
			}
		}
	}
	// The ranks of a side checksummed in one pass (Records' cpu path)
	// carry the same mix check.
	recs, err := checksum.Records(context.Background(), []*layout.Dump{d, d}, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := checksum.RankRecord(context.Background(), d, checksum.Options{Engine: checksum.Reference{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		for ri, rr := range rec.Requests {
			if g, w := rr.Groups[0], ref.Requests[ri].Groups[0]; !g.Mix.Equal(w.Mix) || !g.Values.Equal(w.Values) {
				t.Errorf("Records: %s: values %v mix %v; reference %v and %v", rr.ID, g.Values, g.Mix, w.Values, w.Mix)
			}
		}
	}
}

// TestNewPlanReadCap: a manifest whose requests read one block at many
// positions is refused, naming the dump and the field, before anything
// is read; the same number of requests at one position is read once and
// accepted.
func TestNewPlanReadCap(t *testing.T) {
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "tiny", Requests: 1, Tokens: 2, NumBlocks: 2, Format: "dir"})
	if err != nil {
		t.Fatal(err)
	}
	requests := func(shift bool) func(m *layout.Manifest) {
		return func(m *layout.Manifest) {
			m.Requests = nil
			for i := range 12 {
				table := layout.BlockIDs{1}
				if shift {
					// leading null blocks: block 1 is read at position i
					table = make(layout.BlockIDs, i+1)
					for k := range table {
						table[k] = layout.NoBlock
					}
					table[i] = 1
				}
				m.Requests = append(m.Requests, layout.Request{ID: "r" + strconv.Itoa(i), NumTokens: len(table) * 2, BlockTable: map[string]layout.BlockIDs{"0": table}})
			}
		}
	}
	open := func() *layout.Dump {
		d, err := layout.Open(paths[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	rewriteManifest(t, paths[0], requests(false))
	if _, _, err := checksum.NewPlan(open(), nil); err != nil {
		t.Fatalf("12 requests sharing block 1 at position 0: %v", err)
	}
	rewriteManifest(t, paths[0], requests(true))
	_, _, err = checksum.NewPlan(open(), nil)
	de := parse.As(err, parse.Dump)
	var ce *checksum.ReadCapError
	if manifest := filepath.Join(paths[0], "manifest.json"); de == nil || !errors.As(err, &ce) || de.File != manifest || de.Field != "requests" {
		t.Fatalf("12 requests reading block 1 at 12 positions: %v, want a *ReadCapError in a *parse.Error (parse.Dump) naming %q", err, manifest)
	}
	// tiny: 2 layers, 2 heads, 16-byte cells, 2-token blocks, 2 blocks.
	if held := int64(2 * 2 * 2 * 2 * 16); ce.Held != held || ce.Read != 12*held/2 {
		t.Errorf("read %d held %d, want %d and %d", ce.Read, ce.Held, 12*held/2, held)
	}
}

// sharedBlockDump writes a dump directory whose one cache (one bfloat16
// head of 128) holds a single block of size bytes, read at position 0 by
// each of n requests, and opens it.
func sharedBlockDump(tb testing.TB, n, size int) *layout.Dump {
	tb.Helper()
	dir := tb.TempDir()
	S := size / 512
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
		m.Requests = append(m.Requests, layout.Request{ID: "req-" + strconv.Itoa(i), NumTokens: S, BlockTable: map[string]layout.BlockIDs{"0": {0}}})
	}
	text, err := layout.MarshalManifest(m)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), text, 0o644); err != nil {
		tb.Fatal(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*131 + i>>9)
	}
	if err := os.WriteFile(filepath.Join(dir, "kv.bin"), data, 0o644); err != nil {
		tb.Fatal(err)
	}
	d, err := layout.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return d
}

// BenchmarkSharedPrefix checksums a rank whose one 256 MiB block is read
// at position 0 by 1 request, then by 1000 (a 64 KB manifest, as a system
// prompt shared by every request is): the block is read once either way,
// so the two take about as long (x-one-request).
func BenchmarkSharedPrefix(b *testing.B) {
	ctx := context.Background()
	var one time.Duration
	for _, n := range []int{1, 1000} {
		d := sharedBlockDump(b, n, 256<<20)
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				if _, err := checksum.RankRecord(ctx, d, checksum.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			per := time.Since(start) / time.Duration(b.N)
			if n == 1 {
				one = per
			} else if one > 0 {
				b.ReportMetric(float64(per)/float64(one), "x-one-request")
			}
		})
	}
}
