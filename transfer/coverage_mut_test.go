package transfer_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/picture"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/transfer"
)

// wantColumns is a picture's columns of a request whose layers' blocks
// end at token end (docs/spec.md: at most MaxColumns columns, each of a
// power of two tokens, the fewest that fit).
func wantColumns(end int) (per, columns int) {
	per = 1
	for per*transfer.MaxColumns < end {
		per *= 2
	}
	return per, (end + per - 1) / per
}

// TestCoverageColumns: a picture's columns hold the fewest tokens (a
// power of two) that draw the request's blocks in MaxColumns columns: at
// exactly MaxColumns tokens one each, past it two, the last column
// partial where the blocks end inside it.
func TestCoverageColumns(t *testing.T) {
	for _, tc := range []struct {
		tokens, block, per, columns int
	}{
		{60, 16, 1, 64},  // blocks end at 64: one token a column
		{100, 16, 2, 56}, // 112: two
		{120, 16, 2, 64}, // 128: two, every column
		{129, 16, 4, 36}, // 144: four
		{200, 16, 4, 52}, // 208
		{250, 16, 4, 64}, // 256
		{257, 16, 8, 34}, // 272
		{63, 16, 1, 64},  // 64
		{65, 16, 2, 40},  // 80
		{30, 16, 1, 32},  // 32
		{1, 16, 1, 16},   // one token, one block
		{130, 2, 4, 33},  // 130: the last column holds two tokens of four
		{127, 2, 2, 64},  // 128
		{131, 2, 4, 33},  // 132
		{258, 2, 8, 33},  // 258: the last column holds two tokens of eight
		{255, 2, 4, 64},  // 256
	} {
		p := synth.Config{Preset: "llama", Layout: "hnd", BlockSize: tc.block, Tokens: tc.tokens, Requests: 1}
		c := p
		c.Role, c.ZeroTails = "consumer", true
		if tc.block == 2 {
			p.Preset, c.Preset = "tiny", "tiny"
		}
		if per, cols := wantColumns((tc.tokens + tc.block - 1) / tc.block * tc.block); per != tc.per || cols != tc.columns {
			t.Fatalf("case %+v: the table says %d/%d", tc, per, cols)
		}
		prod, cons, logs := pull(t, t.TempDir(), geometry{"columns", p, c, nixl.PlannerExact})
		res := audit(t, logs, prod, cons)
		if res.Verdict != transfer.Clean || len(res.Coverage) == 0 {
			t.Fatalf("%d tokens: %s, %d drawn", tc.tokens, res.Summary(), len(res.Coverage))
		}
		for _, cv := range res.Coverage {
			if cv.NumTokens != tc.tokens || cv.Per != tc.per || cv.Columns != tc.columns {
				t.Errorf("%d tokens in blocks of %d: %s drawn %d tokens in %d columns of %d, want %d of %d", tc.tokens, tc.block, cv.Request, cv.NumTokens, cv.Columns, cv.Per, tc.columns, tc.per)
			}
			for _, r := range cv.Rows {
				if len(r.Cells) != tc.columns {
					t.Errorf("%d tokens: layer %d has %d cells, want %d", tc.tokens, r.Layer, len(r.Cells), tc.columns)
					continue
				}
				// A clean pull of whole blocks (of one size on both
				// sides) delivers every slot of every block.
				for k, cell := range r.Cells {
					if want := picture.CellDelivered; cell.State != want {
						t.Errorf("%d tokens: layer %d column %d (tokens %d-%d): state %d, want %d", tc.tokens, r.Layer, k, k*tc.per, (k+1)*tc.per-1, cell.State, want)
					}
				}
			}
		}
	}
}

// TestCoverageCap: an audit draws MaxCoverage requests and counts the
// rest; a request with findings takes the place of one without, and a
// request without findings takes no one's place.
func TestCoverageCap(t *testing.T) {
	p := synth.Config{Preset: "tiny", Layout: "hnd", BlockSize: 2, Tokens: 3, Requests: transfer.MaxCoverage + 2}
	c := p
	c.Role, c.ZeroTails = "consumer", true
	g := geometry{"cap", p, c, nixl.PlannerExact}
	drawnOf := func(res *transfer.Result) map[string]bool {
		t.Helper()
		if len(res.Requests) != transfer.MaxCoverage+2 {
			t.Fatalf("%d requests audited", len(res.Requests))
		}
		if len(res.Coverage) != transfer.MaxCoverage || res.CoverageLeft != 2 {
			t.Errorf("%d drawn, %d left; want %d, 2", len(res.Coverage), res.CoverageLeft, transfer.MaxCoverage)
		}
		drawn := map[string]bool{}
		for _, cv := range res.Coverage {
			if drawn[cv.Request] {
				t.Errorf("%s drawn twice", cv.Request)
			}
			drawn[cv.Request] = true
		}
		return drawn
	}
	prod, cons, logs := pull(t, t.TempDir(), g)
	clean := drawnOf(audit(t, logs, prod, cons))
	var left []string
	for i := range transfer.MaxCoverage + 2 {
		if id := synth.RequestID(i); !clean[id] {
			left = append(left, id)
		}
	}
	// The audit goes through a dump's requests in its order: without
	// findings, the first MaxCoverage are drawn.
	if len(left) != 2 || left[0] != synth.RequestID(transfer.MaxCoverage) || left[1] != synth.RequestID(transfer.MaxCoverage+1) {
		t.Fatalf("not drawn: %v", left)
	}
	// Each request not drawn, its transfers failed, is drawn in the place
	// of one request without findings; the rest are drawn as before.
	for _, faulty := range left {
		prod, cons, logs := pull(t, t.TempDir(), g)
		h, recs := records(t, logs[0])
		failed := 0
		for i := range recs {
			if recs[i].Op == nixl.OpXfer && recs[i].Request == faulty {
				recs[stateOf(recs, i)].State = nixl.Err
				failed++
			}
		}
		if failed == 0 {
			t.Fatalf("no transfer names %s", faulty)
		}
		rewrite(t, logs[0], h, recs)
		res := audit(t, logs, prod, cons)
		drawn := drawnOf(res)
		if !drawn[faulty] {
			t.Errorf("%s, with findings, not drawn", faulty)
		}
		gone := 0
		for id := range clean {
			if !drawn[id] {
				gone++
			}
		}
		if gone != 1 {
			t.Errorf("%s drawn: %d requests drawn without it are not, want 1", faulty, gone)
		}
		for _, cv := range res.Coverage {
			if (cv.Request == faulty) != (cv.Findings > 0) {
				t.Errorf("%s: %d findings drawn", cv.Request, cv.Findings)
			}
		}
	}
}

// TestCoverageFindingsFirst: every request's transfers fail but the
// first's: MaxCoverage+1 requests have findings, so the one without is
// not drawn (those with findings first), and one with findings is left.
func TestCoverageFindingsFirst(t *testing.T) {
	p := synth.Config{Preset: "tiny", Layout: "hnd", BlockSize: 2, Tokens: 3, Requests: transfer.MaxCoverage + 2}
	c := p
	c.Role, c.ZeroTails = "consumer", true
	prod, cons, logs := pull(t, t.TempDir(), geometry{"cap", p, c, nixl.PlannerExact})
	h, recs := records(t, logs[0])
	for i := range recs {
		if recs[i].Op == nixl.OpXfer && recs[i].Request != synth.RequestID(0) {
			recs[stateOf(recs, i)].State = nixl.Err
		}
	}
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	if len(res.Coverage) != transfer.MaxCoverage || res.CoverageLeft != 2 {
		t.Fatalf("%d drawn, %d left", len(res.Coverage), res.CoverageLeft)
	}
	for _, cv := range res.Coverage {
		if cv.Findings == 0 || cv.Request == synth.RequestID(0) {
			t.Errorf("%s drawn with %d findings, while a request with findings is not", cv.Request, cv.Findings)
		}
	}
}

// TestCoverageUntouchedCells: a sliding window's dropped blocks (no
// descriptor could write them) are drawn as no block, naming no
// transfer and no descriptor.
func TestCoverageUntouchedCells(t *testing.T) {
	g := geometry{"swa", synth.Config{Preset: "swa", Tokens: 100}, synth.Config{Preset: "swa", Tokens: 100, Role: "consumer", ZeroTails: true}, nixl.PlannerExact}
	prod, cons, logs := pull(t, t.TempDir(), g)
	res := audit(t, logs, prod, cons)
	none := 0
	for _, cv := range res.Coverage {
		for _, r := range cv.Rows {
			for k, cell := range r.Cells {
				if cell.State != picture.CellNone {
					continue
				}
				none++
				if cell.Transfer != transfer.NoTransfer || cell.Descriptor != -1 || cell.Log != "" || cell.More != 0 {
					t.Errorf("%s layer %d column %d: %+v, want no descriptor", cv.Request, r.Layer, k, cell)
				}
			}
		}
	}
	if none == 0 {
		t.Error("no cell drawn as no block: the test tests nothing")
	}
}

// TestCoverageOfFailedColumns: the first transfer of a pull with a
// prefix hit, its columns of several tokens, ends in ERR: every column
// holding a token of [Local, Pulled) is failed and names a transfer;
// every column wholly before Local is the consumer's own.
func TestCoverageOfFailedColumns(t *testing.T) {
	for _, tc := range []struct{ tokens, prefix int }{{200, 16}, {200, 48}, {130, 32}, {90, 64}} {
		p := synth.Config{Preset: "llama", Layout: "hnd", BlockSize: 16, Tokens: tc.tokens, Requests: 1}
		c := p
		c.Role, c.ZeroTails, c.PrefixTokens = "consumer", true, tc.prefix
		prod, cons, logs := pull(t, t.TempDir(), geometry{"failed", p, c, nixl.PlannerExact})
		h, recs := records(t, logs[0])
		for i := range recs {
			if recs[i].Op == nixl.OpXfer {
				recs[stateOf(recs, i)].State = nixl.Err
			}
		}
		rewrite(t, logs[0], h, recs)
		res := audit(t, logs, prod, cons)
		if len(res.Coverage) != 1 {
			t.Fatalf("%d drawn", len(res.Coverage))
		}
		cv := res.Coverage[0]
		if cv.Local != tc.prefix || cv.Per < 2 {
			t.Fatalf("local %d, per %d", cv.Local, cv.Per)
		}
		for _, r := range cv.Rows {
			for k, cell := range r.Cells {
				lo, hi := k*cv.Per, (k+1)*cv.Per
				switch {
				case lo < cv.Pulled && hi > cv.Local:
					if cell.State != picture.CellFailed || cell.Transfer == transfer.NoTransfer || cell.Bytes[1] <= cell.Bytes[0] {
						t.Errorf("%+v layer %d tokens %d-%d: %+v, want failed", tc, r.Layer, lo, hi-1, cell)
					}
				case hi <= cv.Local:
					if cell.State != picture.CellLocal || cell.Transfer != transfer.NoTransfer {
						t.Errorf("%+v layer %d tokens %d-%d: %+v, want the consumer's own", tc, r.Layer, lo, hi-1, cell)
					}
				}
			}
		}
	}
}

// TestCoverageOfRecomputedTokens: with a lookahead the consumer
// recomputes the tokens past PullTokens; a pull of whole blocks delivers
// some of them, which are drawn recomputed (not required), as are those
// no transfer delivered.
func TestCoverageOfRecomputedTokens(t *testing.T) {
	g := geometries()[0]
	g.p.Tokens, g.c.Tokens = 31, 40
	prod, cons := sides(t, g)
	logs, err := nixl.WritePlan(filepath.Join(t.TempDir(), "nixl"), prod, cons, false, nixl.PlanOptions{Lookahead: 10})
	if err != nil {
		t.Fatal(err)
	}
	res, err := transfer.Audit(context.Background(), logs, prod, cons, transfer.Options{Lookahead: 10})
	if err != nil || res.Verdict != transfer.Clean || len(res.Coverage) == 0 {
		t.Fatalf("%v, %+v", err, res)
	}
	recomputed := 0
	for _, cv := range res.Coverage {
		if cv.Pulled != nixl.PullTokens(40, false, 10) || cv.Per != 1 {
			t.Fatalf("%s: pulled %d, %d tokens a column", cv.Request, cv.Pulled, cv.Per)
		}
		for _, r := range cv.Rows {
			for k, cell := range r.Cells {
				want := picture.CellDelivered
				if k >= cv.Pulled && k < cv.NumTokens {
					want = picture.CellRecomputed
					recomputed++
				}
				if k < cv.NumTokens && cell.State != want {
					t.Errorf("%s layer %d token %d: state %d, want %d", cv.Request, r.Layer, k, cell.State, want)
				}
			}
		}
	}
	if recomputed == 0 {
		t.Error("no token recomputed")
	}
}

// TestCoverageOfSeveralDescriptors: a column of several blocks (each
// delivered by its own descriptor: the consumer's blocks are not
// contiguous) names one descriptor and counts the others in More. 258
// tokens in blocks of 2 are 129 positions; the exact planner's pairs of
// layer L are its K blocks by position, then its V (pair L*258 + P*129
// + p); a column of 8 tokens holds 4 blocks: it names the K pair of its
// first block and 7 more (3 K, 4 V); the last column, tokens 256-257,
// one block: its K pair and 1 more.
func TestCoverageOfSeveralDescriptors(t *testing.T) {
	p := synth.Config{Preset: "tiny", Layout: "hnd", BlockSize: 2, Tokens: 258, Requests: 1}
	c := p
	c.Role, c.ZeroTails = "consumer", true
	prod, cons, logs := pull(t, t.TempDir(), geometry{"several", p, c, nixl.PlannerExact})
	res := audit(t, logs, prod, cons)
	if res.Verdict != transfer.Clean || len(res.Coverage) != 1 {
		t.Fatalf("%s, %d drawn", res.Summary(), len(res.Coverage))
	}
	cv := res.Coverage[0]
	if cv.Per != 8 || len(cv.Rows) != 2 {
		t.Fatalf("%d tokens a column, %d rows", cv.Per, len(cv.Rows))
	}
	for _, r := range cv.Rows {
		if len(r.Cells) != 33 {
			t.Fatalf("layer %d: %d columns, want 33", r.Layer, len(r.Cells))
		}
		for k, cell := range r.Cells {
			desc, more := r.Layer*258+4*k, 7
			if k == 32 {
				more = 1
			}
			if cell.State != picture.CellDelivered || cell.Transfer != 1 || cell.Descriptor != desc || cell.More != more {
				t.Errorf("%s layer %d column %d: %+v, want delivered by pair %d and %d more", cv.Request, r.Layer, k, cell, desc, more)
			}
		}
	}
}

// TestCoverageCellByCell: the picture of req-0's correct pull on
// the llama geometry, cell by cell. Its 40 tokens lie in 3 blocks of 16
// (48 columns of one token); the exact planner's pair of layer L, part P
// (K 0, V 1), position p is L*6 + P*3 + p, one block's part; nhd blocks
// hold a token's 8 heads of 128 values (2048 bytes) together. So every
// cell, up to the last block's end, was delivered by transfer 1's pair of
// its layer's K at its position (the cell's first bytes: 2048 from the
// token's offset in that descriptor), and one more (its V). With pair 0
// dropped, layer 0's first 16 cells lack their K: holes, naming no
// transfer (the V delivered is not the cell's state).
func TestCoverageCellByCell(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, orig := records(t, logs[0])
	x := firstXfer(orig)
	local := prepared(t, orig, orig[x].Local)
	for _, dropped := range []bool{false, true} {
		recs := slices.Clone(orig)
		if dropped {
			recs[x].LocalIDs, recs[x].RemoteIDs = recs[x].LocalIDs[1:], recs[x].RemoteIDs[1:]
		}
		rewrite(t, logs[0], h, recs)
		res := audit(t, logs, prod, cons)
		cv := res.Coverage[0]
		if cv.Request != "req-0" || cv.Per != 1 || len(cv.Rows) != 4 {
			t.Fatalf("picture of %s, %d tokens a column, %d rows", cv.Request, cv.Per, len(cv.Rows))
		}
		for L, r := range cv.Rows {
			if r.Layer != L || len(r.Cells) != 48 {
				t.Fatalf("row %d: layer %d, %d cells", L, r.Layer, len(r.Cells))
			}
			for tok, cell := range r.Cells {
				d := L*6 + tok/16
				a := local[orig[x].LocalIDs[d]].Addr + uint64(tok%16)*2048
				want := picture.Cell{State: picture.CellDelivered, Transfer: orig[x].ID, Descriptor: d, Log: logs[0], Bytes: [2]uint64{a, a + 2048}, More: 1}
				switch {
				case dropped && d == 0:
					want = picture.Cell{State: picture.CellHole, Transfer: transfer.NoTransfer, Descriptor: -1}
				case dropped:
					want.Descriptor-- // the pairs after it move up one
				}
				if cell != want {
					t.Fatalf("dropped %v: layer %d token %d: %+v, want %+v", dropped, L, tok, cell, want)
				}
			}
		}
	}
}

// TestCoverageOfTwoBytesWrittenTwice: req-1's transfer writes its pairs
// 0 and 2 into req-0's blocks at positions 0 and 2 (layer 0's K), which
// req-0's pairs 0 and 2 wrote: req-0's layer 0 is drawn written twice at
// tokens 0-15 and 32-47, and delivered between, at position 1 (whose
// block lies between theirs), as the other layers are.
func TestCoverageOfTwoBytesWrittenTwice(t *testing.T) {
	prod, cons, logs := pull(t, t.TempDir(), geometries()[0])
	h, recs := records(t, logs[0])
	x := firstXfer(recs)
	y := nextXfer(recs, x)
	recs[y].LocalIDs[0], recs[y].LocalIDs[2] = recs[x].LocalIDs[0], recs[x].LocalIDs[2]
	rewrite(t, logs[0], h, recs)
	res := audit(t, logs, prod, cons)
	table := cons[0].Manifest.Request("req-0").BlockTable["0"]
	if !(table[0] < table[1] && table[1] < table[2]) {
		t.Fatalf("req-0's blocks %v: position 1's is not between the others", table)
	}
	cv := res.Coverage[slices.IndexFunc(res.Coverage, func(cv picture.Coverage) bool { return cv.Request == "req-0" })]
	for L, r := range cv.Rows {
		for tok, cell := range r.Cells {
			want := picture.CellDelivered
			if L == 0 && tok/16 != 1 {
				want = picture.CellTwice
			}
			if cell.State != want {
				t.Fatalf("layer %d token %d: state %d, want %d", L, tok, cell.State, want)
			}
		}
	}
}
