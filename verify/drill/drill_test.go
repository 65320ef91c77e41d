package drill_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/layout/synth"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

const layer1 = "model.layers.1.self_attn.attn"

// kv is a synthesized side.
type kv struct {
	t     *testing.T
	paths []string
	// changed counts the bytes writes changed.
	changed int
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
func (s *kv) locate(ref drill.CellRef) (string, []int64) {
	s.t.Helper()
	dumps, err := layout.OpenSide(s.paths)
	if err != nil {
		s.t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	var file string
	var offs []int64
	for i := 0; ; i++ {
		f, off, err := drill.Locate(dumps, ref, i)
		if err != nil {
			if i == 0 {
				s.t.Fatal(err)
			}
			return file, offs
		}
		file, offs = f, append(offs, off)
	}
}

func (s *kv) read(ref drill.CellRef) []byte {
	s.t.Helper()
	file, offs := s.locate(ref)
	data, err := os.ReadFile(file)
	if err != nil {
		s.t.Fatal(err)
	}
	out := make([]byte, len(offs))
	for i, o := range offs {
		out[i] = data[o]
	}
	return out
}

// write replaces a cell's logical bytes (the side is the test's own).
func (s *kv) write(ref drill.CellRef, b []byte) {
	s.t.Helper()
	old := s.read(ref)
	for i := range b {
		if b[i] != old[i] {
			s.changed++
		}
	}
	file, offs := s.locate(ref)
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	for i, o := range offs {
		if _, err := f.WriteAt(b[i:i+1], o); err != nil {
			s.t.Fatal(err)
		}
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
	pc, err := verify.Compute(ctx, pd, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := verify.Compute(ctx, cd, checksum.Options{})
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
			out = append(out, fmt.Sprintf("g%d p%d L%d h%d r%d t%d-%d: %s", d.Group, d.Position, d.Layer, d.Head, d.Replica, d.FirstToken, d.LastToken, d.Hint))
			bytes += d.Bytes
		}
	}
	return out, bytes
}

func cell(req string, layer string, head, token int) drill.CellRef {
	return drill.CellRef{Request: req, Group: 0, Layer: layer, Head: head, Token: token}
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
		}, []string{"g0 p2 L1 h0 r0 t33-33: layers 1<->2 swapped", "g0 p2 L2 h0 r0 t33-33: layers 1<->2 swapped"}},
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
		})
	}
}

// TestExplainStaleRead: the consumer's block of req-1 at position 1 holds
// req-0's KV of position 2 (a block released and reused): every layer and
// head of that block says so.
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
	got, _ := detailsOf(res, "req-1")
	if len(got) != 4 {
		t.Fatalf("details %q, want 4", got)
	}
	for _, d := range got {
		if !strings.HasSuffix(d, "holds KV of request req-0") || !strings.Contains(d, "p1 ") {
			t.Errorf("detail %q", d)
		}
	}
	notes := res.Requests[1].Notes
	if want := "group 0 position 1: 4 (layer, head, replica) slices differ, in layers 0-1 and heads 0-1"; len(notes) != 1 || notes[0] != want {
		t.Errorf("notes %q, want [%q]", notes, want)
	}
}

// TestExplainReplica: a diverged copy of a replicated head is reported
// with its replica index, and only that copy.
func TestExplainReplica(t *testing.T) {
	prod := write(t, synth.Config{Preset: "tiny", Seed: 4, Tokens: 7})
	c := write(t, synth.Config{Preset: "tiny", Seed: 4, Tokens: 7, TP: 4, Layout: "nhd", Role: "consumer"})
	ref := drill.CellRef{Request: "req-0", Group: 0, Layer: "model.layers.0.self_attn.attn", Head: 1, Replica: 1, Token: 3}
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

// TestExplainCap: past MaxDetails, differences are counted in a note.
func TestExplainCap(t *testing.T) {
	prod := write(t, llama("producer"))
	c := write(t, llama("consumer"))
	for h := range 8 {
		b := c.read(cell("req-0", layer1, h, 2))
		b[0] ^= 1
		c.write(cell("req-0", layer1, h, 2), b)
	}
	res := explain(t, prod, c, drill.Options{MaxDetails: 3})
	r := res.Requests[0]
	want := []string{
		"group 0 position 0: 8 (layer, head, replica) slices differ, in layers 1 and heads 0-7",
		"5 more differing (layer, head, replica) cells not shown: the cap is 3 details per request",
	}
	if len(r.Details) != 3 || strings.Join(r.Notes, "\n") != strings.Join(want, "\n") {
		t.Errorf("details %d, notes %q", len(r.Details), r.Notes)
	}
	if res := explain(t, prod, c, drill.Options{MaxDetails: -1}); len(res.Requests[0].Details) != 8 {
		t.Errorf("no cap: %d details", len(res.Requests[0].Details))
	}
}
