package transfer

import (
	"fmt"
	"strings"

	"github.com/kvaudit/kvaudit/internal/picture"
	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/kvaudit/kvaudit/layout"
)

// ResultFormat is the schema of the audit's JSON (docs/schemas).
const ResultFormat = "kvaudit-transfers/1"

// Verdicts of an audit.
const (
	// Clean: every invariant holds for every transfer and request the
	// logs name.
	Clean = "clean"
	// Violated: some invariant does not hold (Findings).
	Violated = "violated"
	// Unresolved: nothing was violated, but some of the log could not be
	// resolved to the dumps (Unresolved says why).
	Unresolved = "unresolved"
)

// Invariants, as findings name them (docs/spec.md §13).
const (
	// Confined: a byte a transfer wrote lies outside the blocks its
	// request loads, or a byte it read outside the producer request's
	// blocks.
	Confined = "confined"
	// Aligned: a descriptor pair's lengths differ, or its two sides
	// hold other KV (layer, K/V, heads, tokens).
	Aligned = "aligned"
	// Covered: a loaded token of a layer and head the consumer rank
	// holds (a state row) was delivered by no transfer that reached DONE.
	Covered = "covered"
	// Zeroed: a byte of a request's loaded blocks that no transfer
	// delivered is not zero.
	Zeroed = "zeroed"
	// Twice: a byte written by transfers from different sources.
	Twice = "written-twice"
	// Failed: a transfer that ended in ERR, for a request the consumer
	// loaded anyway.
	Failed = "failed"
	// Lease: a READ posted after the producer's lease on its request
	// lapsed (the producer may have released and reused the blocks).
	Lease = "lease"
)

// Invariants lists the invariants in the order of the spec.
var Invariants = []string{Confined, Aligned, Covered, Zeroed, Twice, Failed, Lease}

// Result is an audit's outcome: one json-tagged value that every
// renderer (table, JSON, markdown, JUnit, HTML) reads.
type Result struct {
	Format  string `json:"format"`
	Verdict string `json:"verdict"`
	// Logs are the logs read, in the order given.
	Logs []LogSummary `json:"logs"`
	// Requests are the consumer requests the logs' transfers serve, per
	// consumer rank.
	Requests []RequestSummary `json:"requests"`
	Findings []Finding        `json:"findings"`
	// Unresolved says what of the logs could not be resolved to the
	// dumps (an agent no dump names, a dump without addresses, a list
	// the recorder did not know): the audit is then incomplete.
	Unresolved []string `json:"unresolved"`
	Notes      []string `json:"notes"`
	// Pairing says what about the logs and dumps given looks like a
	// mistake rather than a transfer fault: one dump given as both
	// sides, the sides swapped, logs that belong to neither dump.
	Pairing []string `json:"pairing"`
	// Coverage draws, per consumer request and rank, what its transfers
	// delivered, per layer and token (at most MaxCoverage requests, those
	// with findings first; CoverageLeft more not drawn). Not in the JSON.
	Coverage     []picture.Coverage `json:"-"`
	CoverageLeft int                `json:"-"`
}

// LogSummary is what one log held.
type LogSummary struct {
	File   string      `json:"file"`
	Agent  string      `json:"agent"`
	Rank   layout.Rank `json:"rank"`
	Side   string      `json:"side"` // consumer, producer, or "" (no dump)
	Lists  int         `json:"lists"`
	Xfers  int         `json:"transfers"`
	Pairs  int         `json:"descriptors"`
	Done   int         `json:"done"`
	Failed int         `json:"failed"`
}

// RequestSummary is one consumer request's transfers on one rank.
type RequestSummary struct {
	ID         string      `json:"id"`
	ProducerID string      `json:"producer_id"`
	Rank       layout.Rank `json:"rank"`
	Transfers  []int       `json:"transfers"`
	Pairs      int         `json:"descriptors"`
	Bytes      uint64      `json:"bytes"`
	// Findings counts the request's findings by invariant.
	Findings map[string]int `json:"findings"`
}

// Finding is one violated invariant, named at its request, transfer,
// descriptor, layer and tokens.
type Finding struct {
	Invariant string `json:"invariant"`
	// Request is the consumer request; Transfer its transfer's id in the
	// log (NoTransfer, -1: none, a finding of the request as a whole:
	// transfers are numbered from 0) and Descriptor
	// the pair's index in the transfer (-1: none).
	Request    string      `json:"request"`
	Transfer   int         `json:"transfer"`
	Descriptor int         `json:"descriptor"`
	Log        string      `json:"log,omitempty"`
	Line       int         `json:"line,omitempty"`
	Rank       layout.Rank `json:"rank"`
	// Group, Position and Block place the finding in the consumer
	// request (-1 when it lies in none of its blocks).
	Group    int `json:"group"`
	Position int `json:"position"`
	Block    int `json:"block"`
	// Layer and LayerName are the layer; Part "K", "V", "K+V" or "" (a
	// latent vector, a state); Heads the first and last global head (a
	// state's rows), Tokens the first and last request token.
	Layer     int    `json:"layer"`
	LayerName string `json:"layer_name"`
	Part      string `json:"part"`
	Heads     [2]int `json:"heads"`
	Tokens    [2]int `json:"tokens"`
	// Bytes are the bytes concerned.
	Bytes uint64 `json:"bytes"`
	// Side is "local" or "remote" for a confined finding (the log's own
	// memory, or the peer's).
	Side string `json:"side,omitempty"`
	// Owner is whose block the bytes lie in when they lie outside the
	// request's loaded blocks.
	Owner *Owner `json:"owner,omitempty"`
	// Source is the producer block read (a confined remote finding, an
	// aligned one, the stale source of a mismatch).
	Source *Source `json:"source,omitempty"`
	// Other is the other transfer that wrote the same bytes (written
	// twice).
	Other   *Ref   `json:"other,omitempty"`
	Message string `json:"message"`
}

// NoTransfer is a finding's Transfer when no transfer is known.
const NoTransfer = -1

// Owner is a block of a side: the request (and position) holding it, or
// none ("" request: no request's block).
type Owner struct {
	Request  string `json:"request"`
	Position int    `json:"position"`
	Block    int    `json:"block"`
}

// Source is a block of the producer a descriptor read.
type Source struct {
	Agent string      `json:"agent"`
	Rank  layout.Rank `json:"rank"`
	Block int         `json:"block"`
	// Request and Position: who holds the block in the producer's dump
	// ("" request: nobody, a released block).
	Request  string `json:"request"`
	Position int    `json:"position"`
	// Expected is the producer request the transfer should have read.
	Expected string `json:"expected"`
}

// Ref names a transfer's descriptor.
type Ref struct {
	Log        string `json:"log"`
	Transfer   int    `json:"transfer"`
	Descriptor int    `json:"descriptor"`
}

// Failed reports whether an invariant is violated.
func (r *Result) Violated() bool { return len(r.Findings) > 0 }

// Summary is one line on the audit: clean, or what was found.
func (r *Result) Summary() string {
	switch r.Verdict {
	case Violated:
		counts := map[string]int{}
		for _, f := range r.Findings {
			counts[f.Invariant]++
		}
		var parts []string
		for _, inv := range Invariants {
			if n := counts[inv]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", inv, n))
			}
		}
		return fmt.Sprintf("transfers: %d finding(s) (%s): %s", len(r.Findings), strings.Join(parts, ", "), r.Findings[0].Message)
	case Unresolved:
		return "transfers: unresolved: " + termtext.Some(r.Unresolved, "; ")
	}
	return "transfers: clean"
}

// At returns the findings of a consumer request at a group's block
// position, for a comparison's mismatch there to name its cause.
func (r *Result) At(request string, group, position int) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Request == request && f.Group == group && f.Position == position {
			out = append(out, f)
		}
	}
	return out
}

// partName names a cell byte range's part.
func partName(parts, partBytes int, b [2]int) string {
	if parts == 1 {
		return ""
	}
	switch {
	case b[1] <= partBytes:
		return "K"
	case b[0] >= partBytes:
		return "V"
	}
	return "K+V"
}
