package drill_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// heatOf returns request id's heat of (group, position), failing the test
// when there is none.
func heatOf(t *testing.T, hs []drill.Heat, group, pos int) *drill.Heat {
	t.Helper()
	for i := range hs {
		if hs[i].Group == group && hs[i].Position == pos {
			return &hs[i]
		}
	}
	t.Fatalf("no heat for group %d position %d among %d", group, pos, len(hs))
	return nil
}

// hot lists the slices of h that are neither 0 nor absent, as "L<layer> h<head> r<replica>=<bytes>".
func hot(h *drill.Heat) []string {
	var out []string
	for l, n := range h.Layers {
		for head := range h.Heads {
			for r := range h.Replicas {
				if b := h.At(l, head, r); b != 0 && b != drill.HeatNone {
					out = append(out, fmt.Sprintf("L%d h%d r%d=%d", n, head, r, b))
				}
			}
		}
	}
	return out
}

// TestHeatOneBit: a flipped bit gives, at its position, a heat of every
// (layer, global head) of the group, across both consumer TP ranks, with
// exactly the flipped cell's one byte; the other positions of the request
// mismatch nowhere and have no heat.
func TestHeatOneBit(t *testing.T) {
	prod := write(t, llama("producer"))
	c := write(t, llama("consumer", func(c *synth.Config) { c.TP, c.Layout = 2, "hnd" }))
	b := c.read(cell("req-1", layer1, 5, 20))
	b[9] ^= 4
	c.write(cell("req-1", layer1, 5, 20), b)
	res := explain(t, prod, c, drill.Options{})
	r := res.Requests[1]
	if len(r.Heat) != 1 || len(res.Requests[0].Heat) != 0 {
		t.Fatalf("heats: %d for req-1, %d for req-0", len(r.Heat), len(res.Requests[0].Heat))
	}
	h := heatOf(t, r.Heat, 0, 1)
	if !slices.Equal(h.Layers, []int{0, 1, 2, 3}) || h.Heads != 8 || h.Replicas != 1 || h.State {
		t.Fatalf("axes: layers %v, %d heads, %d replicas, state %v", h.Layers, h.Heads, h.Replicas, h.State)
	}
	if h.LayerNames[1] != layer1 {
		t.Errorf("layer names %q", h.LayerNames)
	}
	if got := hot(h); !slices.Equal(got, []string{"L1 h5 r0=1"}) {
		t.Errorf("hot slices %q, want the flipped cell's alone", got)
	}
}

// TestHeatPastCap: the details' cap leaves the heat whole: every
// differing slice is counted, with its bytes. The flipped bits of layer
// 1's eight heads fold into one detail and layer 2's four into another
// (other heads), of which the cap of 1 keeps the first.
func TestHeatPastCap(t *testing.T) {
	prod := write(t, llama("producer"))
	c := write(t, llama("consumer"))
	const layer2 = "model.layers.2.self_attn.attn"
	for h := range 8 {
		b := c.read(cell("req-0", layer1, h, 2))
		b[0] ^= 1
		if h%2 == 1 {
			b[1] ^= 1
		}
		c.write(cell("req-0", layer1, h, 2), b)
		if h < 4 {
			b := c.read(cell("req-0", layer2, h, 3))
			b[5] ^= 2
			c.write(cell("req-0", layer2, h, 3), b)
		}
	}
	res := explain(t, prod, c, drill.Options{MaxDetails: 1})
	r := res.Requests[0]
	if len(r.Details) != 1 || !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "1 more details not shown") }) {
		t.Fatalf("details %d, notes %q; want the cap's 1 and a note of the other", len(r.Details), r.Notes)
	}
	want := []string{"L1 h0 r0=1", "L1 h1 r0=2", "L1 h2 r0=1", "L1 h3 r0=2", "L1 h4 r0=1", "L1 h5 r0=2", "L1 h6 r0=1", "L1 h7 r0=2",
		"L2 h0 r0=1", "L2 h1 r0=1", "L2 h2 r0=1", "L2 h3 r0=1"}
	if got := hot(heatOf(t, r.Heat, 0, 0)); !slices.Equal(got, want) {
		t.Errorf("hot slices %q, want %q", got, want)
	}
}

// TestHeatReplica: a diverged copy of a replicated head (TP 4 over 2 KV
// heads) heats that copy alone, on a replica axis of 2.
func TestHeatReplica(t *testing.T) {
	prod := write(t, synth.Config{Preset: "tiny", Seed: 4, Tokens: 7})
	c := write(t, synth.Config{Preset: "tiny", Seed: 4, Tokens: 7, TP: 4, Layout: "nhd", Role: "consumer"})
	ref := dumpindex.CellRef{Request: "req-0", Group: 0, Layer: "model.layers.0.self_attn.attn", Head: 1, Replica: 1, Token: 3}
	b := c.read(ref)
	b[9] ^= 0x10
	c.write(ref, b)
	h := heatOf(t, explain(t, prod, c, drill.Options{}).Requests[0].Heat, 0, 1)
	if h.Replicas != 2 {
		t.Fatalf("replicas %d, want 2", h.Replicas)
	}
	if got := hot(h); !slices.Equal(got, []string{"L0 h1 r1=1"}) {
		t.Errorf("hot slices %q", got)
	}
}

// TestHeatNotDrilled: slices the producer's dumps do not hold (here its
// second TP rank is missing, heads 4-7) are not drilled, never clean.
func TestHeatNotDrilled(t *testing.T) {
	prod := write(t, llama("producer", func(c *synth.Config) { c.TP = 2 }))
	c := write(t, llama("consumer"))
	pd, err := layout.OpenSide(prod.paths[:1])
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(pd)
	cd, err := layout.OpenSide(c.paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(cd)
	reqs := []drill.Request{{ID: "req-0", ProducerID: "req-0", Groups: []drill.Group{{ID: 0, Positions: []int{1}}}}}
	xs, err := drill.Explain(context.Background(), pd, cd, reqs, drill.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := heatOf(t, xs[0].Heat, 0, 1)
	var got []string
	for l := range h.Layers {
		var row strings.Builder
		for head := range h.Heads {
			switch h.At(l, head, 0) {
			case drill.HeatNotDrilled:
				row.WriteByte('?')
			case 0:
				row.WriteByte('.')
			default:
				row.WriteByte('X')
			}
		}
		got = append(got, row.String())
	}
	if want := []string{"....????", "....????", "....????", "....????"}; !slices.Equal(got, want) {
		t.Errorf("heat rows %q, want %q", got, want)
	}
}

// TestHeatState: a state group's heat has a row per state layer and a
// column per state; the flipped copy's state alone is hot.
func TestHeatState(t *testing.T) {
	cfg := synth.Config{Preset: "mamba2-hybrid", Seed: 5, Requests: 2}
	p := write(t, cfg)
	cfg.Role, cfg.TP, cfg.Layout = "consumer", 2, "hnd"
	c := write(t, cfg)
	ref := dumpindex.CellRef{Request: "req-1", Group: 1, Layer: "model.layers.3.mixer", Head: 70, Replica: 1}
	b := c.read(ref)
	b[1] ^= 0x10
	c.write(ref, b)
	r := explain(t, p, c, drill.Options{}).Requests[1]
	h := heatOf(t, r.Heat, 1, 0)
	if !h.State || h.Heads < 2 || h.Replicas != 2 {
		t.Fatalf("state heat: state %v, %d states, %d replicas", h.State, h.Heads, h.Replicas)
	}
	if got := hot(h); !slices.Equal(got, []string{"L3 h0 r1=1"}) {
		t.Errorf("hot slices %q", got)
	}
}

// TestHeatIndexer: a layer's indexer cache takes the head index after its
// attention heads (the layer's factors), so a row holds both and the
// column of a flipped indexer cell is that index.
func TestHeatIndexer(t *testing.T) {
	prod := write(t, synth.Config{Preset: "indexer", Seed: 8})
	c := write(t, synth.Config{Preset: "indexer", Seed: 8, Role: "consumer", TP: 2})
	ref := dumpindex.CellRef{Request: "req-0", Group: 0, Layer: "model.layers.1.self_attn.indexer.k_cache", Head: 4, Token: 9}
	b := c.read(ref)
	b[3] ^= 1
	c.write(ref, b)
	h := heatOf(t, explain(t, prod, c, drill.Options{}).Requests[0].Heat, 0, 0)
	if h.Heads != 5 || h.LayerNames[1] != "model.layers.1.self_attn.attn, model.layers.1.self_attn.indexer.k_cache" {
		t.Fatalf("%d heads, names %q", h.Heads, h.LayerNames)
	}
	if got := hot(h); !slices.Equal(got, []string{"L1 h4 r0=1"}) {
		t.Errorf("hot slices %q", got)
	}
}
