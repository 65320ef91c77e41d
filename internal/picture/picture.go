// Package picture holds the types of the per-token picture of a transfer
// audit (transfer.Result.Coverage): what each consumer request's transfers
// delivered, per layer and token column, as the HTML report draws it.
// transfer draws the pictures; internal/report renders them.
package picture

import "github.com/kvaudit/kvaudit/layout"

// CellState is what a consumer's token (or run of tokens) of one layer
// holds after the logs' transfers, as the audit judges it (Coverage).
// States are ordered by weight: a cell of several tokens, layers' parts
// or descriptors shows the heaviest.
type CellState uint8

const (
	// CellNone: the layer holds no block of these tokens (a sliding
	// window's dropped blocks, tokens past the layer's blocks), or, for
	// a request no transfer served, a slot past its last token (not
	// checked).
	CellNone CellState = iota
	// CellZeroed: a slot of the last block past the request's last
	// token, which nothing delivered and which is zero, as vLLM leaves it.
	CellZeroed
	// CellLocal: tokens the consumer computed itself (a prefix hit):
	// not pulled, not required.
	CellLocal
	// CellRecomputed: tokens the consumer recomputes (a lookahead, a
	// hybrid's last token; PullTokens): not required (a pull of whole
	// blocks may deliver them too).
	CellRecomputed
	// CellDelivered: delivered by a transfer that reached DONE.
	CellDelivered
	// CellLate: delivered by a READ posted after the producer's lease on
	// its request lapsed (lease).
	CellLate
	// CellIntruded: written by a descriptor that wrote outside the
	// blocks its request loads (confined, the consumer's side): another
	// request's transfer, or one into the request's prefix hit.
	CellIntruded
	// CellTwice: written by transfers from different sources
	// (written-twice).
	CellTwice
	// CellMisaligned: delivered from producer bytes that hold other KV
	// of the request (other tokens, layer, heads: aligned).
	CellMisaligned
	// CellForeign: delivered from another request's block, or a block
	// no producer request holds (confined, the producer's side; aligned).
	CellForeign
	// CellNotZeroed: not delivered, and not zero (zeroed).
	CellNotZeroed
	// CellHole: a token the pull had to deliver that no transfer
	// delivered (covered).
	CellHole
	// CellFailed: to be delivered by a transfer that ended in ERR, or
	// never ended (failed; the bytes count as not delivered).
	CellFailed
)

// Cell is one layer's tokens of a Coverage column.
type Cell struct {
	State CellState
	// Transfer and Descriptor name the descriptor that delivered the
	// cell's first bytes of its state (that was to, for a failed cell;
	// that wrote them, for another fault); transfer.NoTransfer and -1 when none
	// did. Log is the transfer's log.
	Transfer, Descriptor int
	Log                  string
	// Bytes are that descriptor's bytes in the cell, as consumer
	// addresses [lo, hi).
	Bytes [2]uint64
	// More counts the other descriptors that wrote bytes of the cell
	// (at least).
	More int
}

// CoverageRow is a layer of a request's picture.
type CoverageRow struct {
	Group     int
	Layer     int
	LayerName string
	// State: a state (Mamba) layer, whose one cell is the request's
	// state.
	State bool
	Cells []Cell
}

// Coverage is what a consumer request's transfers delivered into one
// consumer rank: per layer (Rows), per token column (tokens
// [c*Per, (c+1)*Per) in column c).
type Coverage struct {
	Request string
	Rank    layout.Rank
	// NumTokens, Local and Pulled: the request's tokens, its prefix hit
	// (num_local_computed_tokens) and its first token not pulled
	// (PullTokens).
	NumTokens, Local, Pulled int
	// Served: some audited transfer served the request.
	Served bool
	// Findings counts the request's findings on the rank.
	Findings int
	// Per is the tokens a column holds, Columns the columns: up to the
	// end of the request's last block.
	Per, Columns int
	Rows         []CoverageRow
}
