package transfer_test

import (
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/picture"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
)

// TestCoverageOfCorrectPulls: in every geometry's correct pull, every
// request of every consumer rank is drawn, every layer's cells of the
// tokens the pull delivers are delivered (a state layer's one cell too),
// those of the prefix hit are the consumer's own, and no cell is in a
// fault's state.
func TestCoverageOfCorrectPulls(t *testing.T) {
	for _, g := range geometries() {
		t.Run(g.name, func(t *testing.T) {
			prod, cons, logs := pull(t, t.TempDir(), g)
			res := audit(t, logs, prod, cons)
			if len(res.Coverage) != len(res.Requests) {
				t.Fatalf("%d requests drawn, %d audited", len(res.Coverage), len(res.Requests))
			}
			for _, c := range res.Coverage {
				attention := false // a model of state layers alone draws no token
				for _, r := range c.Rows {
					attention = attention || !r.State
				}
				if len(c.Rows) == 0 || c.Columns > transfer.MaxColumns || (attention && c.Columns*c.Per < c.NumTokens) {
					t.Fatalf("%s on %s: %d rows, %d columns of %d tokens for %d tokens", c.Request, c.Rank, len(c.Rows), c.Columns, c.Per, c.NumTokens)
				}
				for i, r := range c.Rows {
					if i > 0 && (r.Group < c.Rows[i-1].Group || (r.Group == c.Rows[i-1].Group && r.Layer <= c.Rows[i-1].Layer)) {
						t.Errorf("%s: row %d (group %d layer %d) after group %d layer %d", c.Request, i, r.Group, r.Layer, c.Rows[i-1].Group, c.Rows[i-1].Layer)
					}
					for k, cell := range r.Cells {
						lo, hi := k*c.Per, (k+1)*c.Per
						want := picture.CellState(255)
						switch {
						case r.State:
							want = picture.CellDelivered
						case hi <= c.Local:
							want = picture.CellLocal
						case lo >= c.Local && hi <= c.Pulled:
							want = picture.CellDelivered
						}
						if cell.State > picture.CellDelivered || (want != 255 && cell.State != want) {
							t.Errorf("%s on %s layer %d tokens %d-%d: state %d, want %d", c.Request, c.Rank, r.Layer, lo, hi-1, cell.State, want)
						}
						if cell.State == picture.CellDelivered && (cell.Transfer == transfer.NoTransfer || cell.Descriptor < 0 || cell.Bytes[1] <= cell.Bytes[0]) {
							t.Errorf("%s layer %d tokens %d-%d: delivered by %d/%d bytes %x", c.Request, r.Layer, lo, hi-1, cell.Transfer, cell.Descriptor, cell.Bytes)
						}
					}
				}
			}
		})
	}
}

// TestCoverageOfFaults: each way a log goes wrong (TestEachInvariant's)
// draws its state in the requests it concerns.
func TestCoverageOfFaults(t *testing.T) {
	// want: per way, per request, a state some cell must be in.
	wants := map[string]map[string]picture.CellState{
		"descriptor dropped":                {"req-0": picture.CellHole},
		"remote ids of the next position":   {"req-0": picture.CellMisaligned},
		"remote ids of another request":     {"req-0": picture.CellForeign},
		"local id of another request":       {"req-0": picture.CellHole, "req-1": picture.CellTwice},
		"ERR":                               {"req-0": picture.CellFailed},
		"remote ids shifted past the block": {"req-0": picture.CellForeign},
		"lengths differ":                    {"req-0": picture.CellHole},
	}
	g := geometries()[0]
	for _, e := range logEdits {
		t.Run(e.name, func(t *testing.T) {
			want := wants[e.name]
			if want == nil {
				t.Fatalf("no state expected of %q", e.name)
			}
			res, _, _ := auditEdited(t, g, e)
			seen := map[string]map[picture.CellState]int{}
			for _, c := range res.Coverage {
				if seen[c.Request] == nil {
					seen[c.Request] = map[picture.CellState]int{}
				}
				for _, r := range c.Rows {
					for _, cell := range r.Cells {
						seen[c.Request][cell.State]++
					}
				}
			}
			for req, st := range want {
				if seen[req][st] == 0 {
					t.Errorf("%s: no cell in state %d (states %v)", req, st, seen[req])
				}
			}
			// The other request is drawn as a correct pull leaves it.
			for req, states := range seen {
				if _, faulty := want[req]; faulty {
					continue
				}
				for st := range states {
					if st > picture.CellDelivered {
						t.Errorf("%s: %d cell(s) in state %d, a fault's", req, states[st], st)
					}
				}
			}
			if st := picture.CellFailed; e.name == "ERR" {
				// Every pulled cell of req-0 (the transfer that failed).
				for _, c := range res.Coverage {
					for _, r := range c.Rows {
						for k, cell := range r.Cells {
							if c.Request == "req-0" && k*c.Per < c.Pulled && cell.State != st {
								t.Errorf("req-0 layer %d column %d: state %d, want failed", r.Layer, k, cell.State)
							}
						}
					}
				}
			}
		})
	}
}

// TestCoverageOfEmptyLog: a consumer rank whose log holds no transfer
// (its address map never read) has its requests accounted for and none
// drawn.
func TestCoverageOfEmptyLog(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, _ := records(t, logs[0])
	rewrite(t, logs[0], h, nil)
	res := audit(t, logs, prod, cons)
	if res.Verdict != transfer.Violated || len(res.Coverage) != 0 {
		t.Fatalf("%s, %d requests drawn", res.Summary(), len(res.Coverage))
	}
}

// TestCoverageOfSlidingWindow: a sliding window group's layers hold no
// block of the tokens before its window (drawn as no block), those past
// it delivered; the full attention group's layers hold every token.
func TestCoverageOfSlidingWindow(t *testing.T) {
	g := geometry{"swa", synth.Config{Preset: "swa", Tokens: 100}, synth.Config{Preset: "swa", Tokens: 100, Role: "consumer", ZeroTails: true}, nixl.PlannerExact}
	prod, cons, logs := pull(t, t.TempDir(), g)
	res := audit(t, logs, prod, cons)
	if res.Verdict != transfer.Clean || len(res.Coverage) == 0 {
		t.Fatalf("%s, %d drawn", res.Summary(), len(res.Coverage))
	}
	window := map[int]int{} // group -> the first token its span holds
	for _, grp := range cons[0].Manifest.Groups {
		if grp.Kind == layout.KindSlidingWindow {
			keep := (grp.SlidingWindow+grp.BlockSize-1)/grp.BlockSize + 1 // blockspan.Of's blocks kept
			blocks := (100 + grp.BlockSize - 1) / grp.BlockSize
			window[grp.ID] = max(0, blocks-keep) * grp.BlockSize
		}
	}
	if len(window) == 0 {
		t.Fatal("the swa preset has no sliding window group")
	}
	none := 0
	for _, c := range res.Coverage {
		for _, r := range c.Rows {
			for k, cell := range r.Cells {
				lo, hi := k*c.Per, (k+1)*c.Per
				want := picture.CellDelivered
				if first, ok := window[r.Group]; ok && hi <= first {
					want = picture.CellNone
					none++
				}
				if hi <= c.Pulled && cell.State != want {
					t.Errorf("%s group %d layer %d tokens %d-%d: state %d, want %d", c.Request, r.Group, r.Layer, lo, hi-1, cell.State, want)
				}
			}
		}
	}
	if none == 0 {
		t.Error("no token lies before the window: the test tests nothing")
	}
}

// TestCoverageOfStaleSlots: slots past the request's last token that no
// transfer delivers and that are not zero (a consumer that did not zero
// them) are drawn not zeroed, where the zeroed findings are; zeroed
// ones, zeroed.
func TestCoverageOfStaleSlots(t *testing.T) {
	for _, zero := range []bool{true, false} {
		c := synth.Config{Preset: "llama", Layout: "hnd", BlockSize: 32, Role: "consumer", ZeroTails: zero}
		g := geometry{"stale", synth.Config{Preset: "llama", Layout: "hnd", BlockSize: 16}, c, nixl.PlannerExact}
		prod, cons, logs := pull(t, t.TempDir(), g)
		res := audit(t, logs, prod, cons)
		findings := map[string][2]int{} // request -> the zeroed findings' tokens
		for _, f := range res.Findings {
			if f.Invariant != transfer.Zeroed {
				t.Fatalf("zero %v: %s", zero, f.Message)
			}
			findings[f.Request] = [2]int{f.Tokens[0], f.Tokens[1]}
		}
		if zero != (len(findings) == 0) {
			t.Fatalf("zero %v: %d requests with zeroed findings", zero, len(findings))
		}
		stale := 0
		for _, cv := range res.Coverage {
			for _, r := range cv.Rows {
				for k, cell := range r.Cells {
					lo := k * cv.Per
					if lo < cv.NumTokens {
						continue
					}
					// Slots the producer's blocks (of 16) hold are
					// delivered; the rest zero or stale.
					want := picture.CellZeroed
					switch {
					case lo < (cv.NumTokens+15)/16*16:
						want = picture.CellDelivered
					case !zero:
						want = picture.CellNotZeroed
						if f, ok := findings[cv.Request]; !ok || lo < f[0] || lo > f[1] {
							t.Errorf("%s token %d: stale, but no zeroed finding there (%v)", cv.Request, lo, f)
						}
						stale++
					}
					if cell.State != want {
						t.Errorf("zero %v: %s layer %d slot %d: state %d, want %d", zero, cv.Request, r.Layer, lo, cell.State, want)
					}
				}
			}
		}
		if !zero && stale == 0 {
			t.Error("no stale slot drawn")
		}
	}
}
