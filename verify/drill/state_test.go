package drill_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// TestExplainStateRows: a Mamba2 producer at TP 1 and a consumer at TP 2
// whose last rank's copy of B (one group, so B is replicated) has one
// flipped bit: the load mismatches in the state group at position 0, in
// the check of that copy only, and the drill-down names the state, the
// rows and the copy.
func TestExplainStateRows(t *testing.T) {
	for _, conv := range synth.ConvLayouts {
		t.Run(conv, func(t *testing.T) {
			cfg := synth.Config{Preset: "mamba2-hybrid", Seed: 5, ConvLayout: conv, Requests: 2}
			p := write(t, cfg)
			cfg.Role, cfg.TP, cfg.Layout = "consumer", 2, "hnd"
			c := write(t, cfg)
			// Global rows of the conv state: x 0-63, B 64-79, C 80-95.
			ref := dumpindex.CellRef{Request: "req-1", Group: 1, Layer: "model.layers.3.mixer", Head: 70, Replica: 1}
			b := c.read(ref)
			b[1] ^= 0x10
			c.write(ref, b)

			res := explain(t, p, c, drill.Options{})
			if res.Verdict != verify.Mismatch {
				t.Fatalf("verdict %s", res.Verdict)
			}
			r := res.Requests[1]
			var g *verify.GroupVerdict
			for _, x := range r.Groups {
				if x.ID == 1 {
					g = x
				} else if x.Verdict != verify.Verified {
					t.Errorf("attention group %d: %s", x.ID, x.Verdict)
				}
			}
			if g == nil || g.Verdict != verify.Mismatch || !slices.Equal(g.Positions, []int{0}) || !slices.Equal(g.Checks, []int{1}) {
				t.Fatalf("state group: %+v", g)
			}
			if res.Requests[0].Verdict != verify.Verified {
				t.Errorf("the other request: %s", res.Requests[0].Verdict)
			}
			if len(r.Details) != 1 {
				t.Fatalf("details %+v", r.Details)
			}
			d := r.Details[0]
			got := fmt.Sprintf("state=%v idx=%d L%d rows %d-%d replica %d bytes %d: %s", d.State, d.StateIndex, d.Layer, d.Head, d.LastHead, d.Replica, d.Bytes, d.Hint)
			want := "state=true idx=0 L3 rows 70-70 replica 1 bytes 1: 1 bit flipped"
			if got != want {
				t.Errorf("detail %q, want %q", got, want)
			}
		})
	}
}

// TestExplainStaleState: a consumer's state block holding another
// request's state is named as such.
func TestExplainStaleState(t *testing.T) {
	cfg := synth.Config{Preset: "gdn-hybrid", Seed: 6, TP: 2, Requests: 2}
	p := write(t, cfg)
	cfg.Role = "consumer"
	c := write(t, cfg)
	// Copy request 0's rows 0-31 (rank 0's share of Q) into request 1.
	for row := range 32 {
		src := dumpindex.CellRef{Request: "req-0", Group: 1, Layer: "model.layers.1.mixer", Head: row}
		dst := src
		dst.Request = "req-1"
		c.write(dst, c.read(src))
	}
	res := explain(t, p, c, drill.Options{})
	r := res.Requests[1]
	if r.Verdict != verify.Mismatch || len(r.Details) != 1 {
		t.Fatalf("%s %+v", r.Verdict, r.Details)
	}
	if d := r.Details[0]; d.Hint != "holds the state of request req-0" || d.Head != 0 || d.LastHead != 31 {
		t.Errorf("detail %+v", d)
	}
}
