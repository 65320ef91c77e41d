package drill_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

const layer1 = "model.layers.1.self_attn.attn"

// kv is a synthesized side.
type kv struct {
	t     *testing.T
	paths []string
	// changed counts the bytes writes changed; at lists the offsets of
	// those bytes by file.
	changed int
	at      map[string][]int64
	dumps   []*layout.Dump   // opened by locate
	index   *dumpindex.Index // of dumps, built by locate
}

func write(t *testing.T, cfg synth.Config) *kv {
	t.Helper()
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &kv{t: t, paths: paths}
}

// locate returns the file and the offset of every byte of a cell.
func (s *kv) locate(ref dumpindex.CellRef) (string, []int64) {
	s.t.Helper()
	if s.dumps == nil {
		dumps, err := layout.OpenSide(s.paths)
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(func() { layout.CloseAll(dumps) })
		s.dumps = dumps
	}
	if s.index == nil {
		s.index = dumpindex.New(s.dumps)
	}
	var file string
	var offs []int64
	for i := 0; ; i++ {
		f, off, err := s.index.Locate(ref, i)
		if err != nil {
			if i == 0 {
				s.t.Fatal(err)
			}
			return file, offs
		}
		file, offs = f, append(offs, off)
	}
}

func (s *kv) read(ref dumpindex.CellRef) []byte {
	s.t.Helper()
	file, offs := s.locate(ref)
	f, err := os.Open(file)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	out := make([]byte, len(offs))
	for i := 0; i < len(offs); {
		j := i + 1
		for j < len(offs) && offs[j] == offs[j-1]+1 {
			j++
		}
		if _, err := f.ReadAt(out[i:j], offs[i]); err != nil {
			s.t.Fatal(err)
		}
		i = j
	}
	return out
}

// write replaces a cell's logical bytes (the side is the test's own).
func (s *kv) write(ref dumpindex.CellRef, b []byte) {
	s.t.Helper()
	old := s.read(ref)
	file, offs := s.locate(ref)
	for i := range b {
		if b[i] != old[i] {
			s.changed++
			if s.at == nil {
				s.at = map[string][]int64{}
			}
			s.at[file] = append(s.at[file], offs[i])
		}
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	for i := 0; i < len(offs); {
		j := i + 1
		for j < len(offs) && offs[j] == offs[j-1]+1 {
			j++
		}
		if _, err := f.WriteAt(b[i:j], offs[i]); err != nil {
			s.t.Fatal(err)
		}
		i = j
	}
}

// explain diffs the two sides and drills the result down.
func explain(t *testing.T, p, c *kv, opts drill.Options) *verify.DiffResult {
	t.Helper()
	pd, err := layout.OpenSide(p.paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(pd)
	cd, err := layout.OpenSide(c.paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(cd)
	ctx := context.Background()
	pc, err := side.Compute(ctx, pd, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := side.Compute(ctx, cd, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res := verify.Diff(pc, cc)
	if err := verify.Explain(ctx, pd, cd, res, opts); err != nil {
		t.Fatal(err)
	}
	return res
}

// detailsOf formats a request's details, and sums their bytes.
func detailsOf(res *verify.DiffResult, id string) (out []string, bytes int) {
	for _, r := range res.Requests {
		if r.ID != id {
			continue
		}
		for _, d := range r.Details {
			out = append(out, fmt.Sprintf("g%d p%d L%s h%s r%d t%d-%d: %s", d.Group, d.Position, ranges.Format(d.Layers), ranges.Format(d.Heads), d.Replica, d.FirstToken, d.LastToken, d.Hint))
			bytes += d.Bytes
		}
	}
	return out, bytes
}

func cell(req string, layer string, head, token int) dumpindex.CellRef {
	return dumpindex.CellRef{Request: req, Group: 0, Layer: layer, Head: head, Token: token}
}

func llama(role string, edits ...func(*synth.Config)) synth.Config {
	c := synth.Config{Preset: "llama", Requests: 2, Seed: 21, Role: role}
	for _, e := range edits {
		e(&c)
	}
	return c
}

// TestExplain makes one kind of fault in the consumer (TP2, HND layout,
// other block ids than the producer's TP1 flash) and checks the one or
// two details the drill-down reports for it, hint included.
func TestExplain(t *testing.T) {
	cons := func(e ...func(*synth.Config)) synth.Config {
		return llama("consumer", append([]func(*synth.Config){func(c *synth.Config) { c.TP, c.Layout = 2, "hnd" }}, e...)...)
	}
	cases := []struct {
		name     string
		consumer synth.Config
		fault    func(c *kv)
		want     []string
	}{
		{"one bit", cons(), func(c *kv) {
			b := c.read(cell("req-1", layer1, 3, 20))
			b[77] ^= 1 << 5
			c.write(cell("req-1", layer1, 3, 20), b)
		}, []string{"g0 p1 L1 h3 r0 t20-20: 1 bit flipped"}},
		{"one bit, consumer blocks of 32 on TP4", llama("consumer", func(c *synth.Config) { c.TP, c.BlockSize, c.Layout = 4, 32, "packed" }), func(c *kv) {
			b := c.read(cell("req-1", layer1, 3, 20))
			b[0] ^= 1
			c.write(cell("req-1", layer1, 3, 20), b)
		}, []string{"g0 p0 L1 h3 r0 t20-20: 1 bit flipped"}},
		{"three bits in two bytes", cons(), func(c *kv) {
			b := c.read(cell("req-1", layer1, 3, 20))
			b[1] ^= 3
			b[200] ^= 0x80
			c.write(cell("req-1", layer1, 3, 20), b)
		}, []string{"g0 p1 L1 h3 r0 t20-20: 3 bits flipped"}},
		{"FlipBits bits flipped", cons(), func(c *kv) {
			b := c.read(cell("req-1", layer1, 3, 20))
			b[1] ^= 0xff
			b[200] ^= 0xff
			c.write(cell("req-1", layer1, 3, 20), b)
		}, []string{fmt.Sprintf("g0 p1 L1 h3 r0 t20-20: %d bits flipped", drill.FlipBits)}},
		{"one bit more than FlipBits", cons(), func(c *kv) {
			b := c.read(cell("req-1", layer1, 3, 20))
			b[1] ^= 0xff
			b[200] ^= 0xff
			b[300] ^= 1
			c.write(cell("req-1", layer1, 3, 20), b)
		}, []string{"g0 p1 L1 h3 r0 t20-20: random bytes"}},
		{"zeroed tail", cons(), func(c *kv) {
			for tok := 36; tok < 40; tok++ {
				c.write(cell("req-0", layer1, 6, tok), make([]byte, 512))
			}
		}, []string{"g0 p2 L1 h6 r0 t36-39: zeroed"}},
		{"heads swapped across TP ranks", cons(), func(c *kv) {
			a, b := c.read(cell("req-0", layer1, 2, 5)), c.read(cell("req-0", layer1, 5, 5))
			c.write(cell("req-0", layer1, 2, 5), b)
			c.write(cell("req-0", layer1, 5, 5), a)
		}, []string{"g0 p0 L1 h2 r0 t5-5: heads 2<->5 swapped", "g0 p0 L1 h5 r0 t5-5: heads 2<->5 swapped"}},
		{"layers swapped", cons(), func(c *kv) {
			l2 := "model.layers.2.self_attn.attn"
			a, b := c.read(cell("req-1", layer1, 0, 33)), c.read(cell("req-1", l2, 0, 33))
			c.write(cell("req-1", layer1, 0, 33), b)
			c.write(cell("req-1", l2, 0, 33), a)
		}, []string{"g0 p2 L1-2 h0 r0 t33-33: layers 1<->2 swapped"}},
		{"tokens swapped", cons(), func(c *kv) {
			a, b := c.read(cell("req-0", layer1, 4, 17)), c.read(cell("req-0", layer1, 4, 18))
			c.write(cell("req-0", layer1, 4, 17), b)
			c.write(cell("req-0", layer1, 4, 18), a)
		}, []string{"g0 p1 L1 h4 r0 t17-18: tokens swapped"}},
		{"the block of another position", cons(), func(c *kv) {
			for i := range 16 {
				c.write(cell("req-1", layer1, 7, 16+i), c.read(cell("req-1", layer1, 7, i)))
			}
		}, []string{"g0 p1 L1 h7 r0 t16-31: holds the block of position 0"}},
		{"random bytes", cons(), func(c *kv) {
			b := make([]byte, 512)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			c.write(cell("req-0", layer1, 0, 0), b)
		}, []string{"g0 p0 L1 h0 r0 t0-0: random bytes"}},
	}
	prod := write(t, llama("producer"))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := write(t, tc.consumer)
			tc.fault(c)
			res := explain(t, prod, c, drill.Options{})
			if res.Verdict != verify.Mismatch {
				t.Fatalf("verdict %q", res.Verdict)
			}
			d0, n0 := detailsOf(res, "req-0")
			d1, n1 := detailsOf(res, "req-1")
			got, want := strings.Join(append(d0, d1...), "\n"), strings.Join(tc.want, "\n")
			if got != want {
				t.Errorf("details:\n%s\nwant:\n%s", got, want)
			}
			if n0+n1 != c.changed {
				t.Errorf("details count %d differing bytes, the fault changed %d", n0+n1, c.changed)
			}
			checkWhere(t, c, res)
		})
	}
}

// checkWhere checks that each detail names the consumer's rank, file and
// block id, and, as its offset, the first byte the fault changed in that
// file (in these tests one detail holds every change of its file).
func checkWhere(t *testing.T, c *kv, res *verify.DiffResult) {
	t.Helper()
	dumps, err := layout.OpenSide(c.paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	index := dumpindex.New(dumps)
	for _, r := range res.Requests {
		for _, d := range r.Details {
			offs := c.at[d.File]
			if len(offs) == 0 {
				t.Errorf("detail %+v: file %q, which the fault did not change", d, d.File)
				continue
			}
			if want := slices.Min(offs); d.Offset != want {
				t.Errorf("detail at %s: offset %d, the first changed byte is at %d", d.File, d.Offset, want)
			}
			di := slices.IndexFunc(dumps, func(x *layout.Dump) bool {
				return x.Manifest.Parallel.TPRank == d.TPRank && x.Manifest.Parallel.PPRank == d.PPRank
			})
			if di < 0 || !strings.HasPrefix(d.File, dumps[di].Path) {
				t.Errorf("detail at %s: rank pp %d tp %d, which is not that file's", d.File, d.PPRank, d.TPRank)
				continue
			}
			pos, g := d.Position, index.Group(d.Group)
			if b, _ := index.Block(di, r.ID, g, pos); b != d.Block {
				t.Errorf("detail at %s: block %d, the consumer holds position %d in block %d", d.File, d.Block, pos, b)
			}
		}
	}
}

// TestExplainStaleRead: the consumer's block of req-1 at position 1 holds
// req-0's KV of position 1 (a block released and reused) in layers 0 and
// 1, heads 0 and 1 (all on TP rank 0): one detail says so for the four
// slices.
func TestExplainStaleRead(t *testing.T) {
	prod := write(t, llama("producer"))
	c := write(t, llama("consumer", func(c *synth.Config) { c.TP = 2 }))
	for _, name := range []string{"model.layers.0.self_attn.attn", layer1} {
		for h := range 2 {
			for i := range 16 {
				src := cell("req-0", name, h, 16+i)
				c.write(cell("req-1", name, h, 16+i), c.read(src))
			}
		}
	}
	res := explain(t, prod, c, drill.Options{})
	got, n := detailsOf(res, "req-1")
	if want := "g0 p1 L0-1 h0-1 r0 t16-31: holds KV of request req-0"; len(got) != 1 || got[0] != want || n != c.changed {
		t.Fatalf("details %q (%d bytes), want [%q] (%d bytes)", got, n, want, c.changed)
	}
	if d := res.Requests[1].Details[0]; d.Slices != 4 || d.TPRank != 0 || d.LayerName != "model.layers.0.self_attn.attn" {
		t.Errorf("detail %+v: want 4 slices on TP rank 0, first layer model.layers.0.self_attn.attn", d)
	}
	if notes := res.Requests[1].Notes; len(notes) != 0 {
		t.Errorf("notes %q, want none", notes)
	}
	checkWhere(t, c, res)
}

// TestExplainReplica: a diverged copy of a replicated head is reported
// with its replica index, and only that copy.
func TestExplainReplica(t *testing.T) {
	prod := write(t, synth.Config{Preset: "tiny", Seed: 4, Tokens: 7})
	c := write(t, synth.Config{Preset: "tiny", Seed: 4, Tokens: 7, TP: 4, Layout: "nhd", Role: "consumer"})
	ref := dumpindex.CellRef{Request: "req-0", Group: 0, Layer: "model.layers.0.self_attn.attn", Head: 1, Replica: 1, Token: 3}
	b := c.read(ref)
	b[9] ^= 0x10
	c.write(ref, b)
	res := explain(t, prod, c, drill.Options{})
	got, n := detailsOf(res, "req-0")
	want := "g0 p1 L0 h1 r1 t3-3: 1 bit flipped"
	if len(got) != 1 || got[0] != want || n != 1 {
		t.Errorf("details %q (%d bytes), want [%q] (1 byte)", got, n, want)
	}
}

// TestExplainCap: details past MaxDetails are counted in a note, but each
// mismatching position keeps its first: a position with three causes
// (zeroed cells, flipped bits, random bytes) and two positions with one.
func TestExplainCap(t *testing.T) {
	prod := write(t, llama("producer"))
	c := write(t, llama("consumer"))
	l2 := "model.layers.2.self_attn.attn"
	for h := range 8 {
		b := c.read(cell("req-0", layer1, h, 2))
		b[0] ^= 1
		c.write(cell("req-0", layer1, h, 2), b) // position 0: 8 flips in layer 1
	}
	c.write(cell("req-0", l2, 3, 4), make([]byte, 512))      // position 0: zeroed in layer 2
	c.write(cell("req-0", layer1, 0, 20), make([]byte, 512)) // position 1
	c.write(cell("req-0", layer1, 5, 36), make([]byte, 512)) // position 2
	rng := rand.New(rand.NewPCG(3, 4))
	noise := make([]byte, 512)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	c.write(cell("req-0", l2, 0, 7), noise) // position 0: random bytes in layer 2
	all := []string{
		"g0 p0 L1 h0-7 r0 t2-2: 8 bits flipped",
		"g0 p0 L2 h0 r0 t7-7: random bytes",
		"g0 p0 L2 h3 r0 t4-4: zeroed",
		"g0 p1 L1 h0 r0 t20-20: zeroed",
		"g0 p2 L1 h5 r0 t36-36: zeroed",
	}
	res := explain(t, prod, c, drill.Options{MaxDetails: -1})
	if got, n := detailsOf(res, "req-0"); strings.Join(got, "\n") != strings.Join(all, "\n") || n != c.changed {
		t.Errorf("no cap: details\n%s\n(%d bytes), want\n%s\n(%d bytes)", strings.Join(got, "\n"), n, strings.Join(all, "\n"), c.changed)
	}
	for _, tc := range []struct {
		max  int
		want []string
		note string
	}{
		{1, []string{all[0], all[3], all[4]}, "2 more details not shown: the cap is 1 details per request, and each mismatching position keeps its first"},
		{2, []string{all[0], all[1], all[3], all[4]}, "1 more details not shown: the cap is 2 details per request, and each mismatching position keeps its first"},
		{5, all, ""},
	} {
		res := explain(t, prod, c, drill.Options{MaxDetails: tc.max})
		got, _ := detailsOf(res, "req-0")
		notes := strings.Join(res.Requests[0].Notes, "\n")
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") || notes != tc.note {
			t.Errorf("cap %d: details\n%s\nnotes %q; want\n%s\nnotes %q", tc.max, strings.Join(got, "\n"), notes, strings.Join(tc.want, "\n"), tc.note)
		}
	}
}

// TestExplainMisplacedPair: two whole blocks of a request swapped (every
// layer and head of positions 0 and 2) give one detail per position, each
// naming the other, with the default cap; nothing is left out.
func TestExplainMisplacedPair(t *testing.T) {
	prod := write(t, llama("producer", func(c *synth.Config) { c.Tokens = 48 }))
	c := write(t, llama("consumer", func(c *synth.Config) { c.TP, c.Tokens = 2, 48 }))
	for L := range 4 {
		name := fmt.Sprintf("model.layers.%d.self_attn.attn", L)
		for h := range 8 {
			for i := range 16 {
				a, b := c.read(cell("req-1", name, h, i)), c.read(cell("req-1", name, h, 32+i))
				c.write(cell("req-1", name, h, i), b)
				c.write(cell("req-1", name, h, 32+i), a)
			}
		}
	}
	res := explain(t, prod, c, drill.Options{})
	got, n := detailsOf(res, "req-1")
	want := []string{
		"g0 p0 L0-3 h0-3 r0 t0-15: holds the block of position 2",
		"g0 p0 L0-3 h4-7 r0 t0-15: holds the block of position 2",
		"g0 p2 L0-3 h0-3 r0 t32-47: holds the block of position 0",
		"g0 p2 L0-3 h4-7 r0 t32-47: holds the block of position 0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || n != c.changed {
		t.Errorf("details\n%s\n(%d bytes), want\n%s", strings.Join(got, "\n"), n, strings.Join(want, "\n"))
	}
	for _, d := range res.Requests[1].Details {
		if d.Slices != 16 {
			t.Errorf("detail %+v: %d slices, want 16 (4 layers x 4 heads)", d, d.Slices)
		}
	}
	if notes := res.Requests[1].Notes; len(notes) != 0 {
		t.Errorf("notes %q", notes)
	}
}
