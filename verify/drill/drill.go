// Package drill explains the mismatches a verdict found: when both sides
// of a comparison are dumps, it compares the logical cells (one token of
// one global KV head of one layer) of every mismatching block position, so
// the two sides may differ in layout, TP, PP and block size, and says
// which layers, heads, replicas and tokens differ, where (rank, file,
// block id, byte offset) and what the difference looks like (a flipped
// bit, zeroed cells, swapped heads, another block's or another request's
// KV, ...). It reads dumps and knows nothing of verdicts: package verify
// decides them and hands it the mismatches.
package drill

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
)

// DefaultMaxDetails is the cap on details per request when
// Options.MaxDetails is 0.
const DefaultMaxDetails = 32

// FlipBits is the most differing bits a detail is called "N bits
// flipped" with; more are "random bytes" unless another hint fits.
const FlipBits = 16

// Options control Explain.
type Options struct {
	// MaxDetails caps the details of one request (0: DefaultMaxDetails,
	// negative: no cap). The cap never hides a mismatching position:
	// each keeps its first detail, and only the details past the cap
	// beyond those are counted in a note.
	MaxDetails int
	// Threads is the number of goroutines comparing cells; 0 means
	// GOMAXPROCS.
	Threads int
}

// Request is a consumer request whose groups mismatch, as a verdict found
// it: ProducerID is the producer request it was compared with.
type Request struct {
	ID, ProducerID string
	Groups         []Group
}

// Group is a mismatching KV cache group of a request and its mismatching
// consumer block positions.
type Group struct {
	ID        int
	Positions []int
}

// Explanation is what the drill-down found for one Request: the cells that
// differ, and notes on what it left out (caps, unreadable data); Heat,
// one per drilled (group, position), counts the differing bytes of every
// slice, past the details' cap too.
type Explanation struct {
	Details []Detail
	Notes   []string
	Heat    []Heat
}

// Detail is one row of the drill-down: the (layer, head) slices of one
// consumer block position, on one rank and replica copy, whose cells
// differ from the producer's for one cause. Slices that share a cause
// (the same hint; for flipped bits, any number of them) are folded into
// one detail: it covers every (layer, head) of Layers x Heads, and no
// other.
type Detail struct {
	Group    int
	Position int
	// Layer is the first layer number, LastLayer the last and Layers all
	// of them; LayerName is the consumer's cache name of the first.
	Layer     int
	LayerName string
	LastLayer int
	Layers    []int
	// Head is the first global head, LastHead the last and Heads all of
	// them (for a state group: the first and last differing global rows,
	// and Heads nil).
	Head     int
	LastHead int
	Heads    []int
	// Slices counts the (layer, head) slices (for a state group, the
	// consumer views of a (state, segment)) folded into the detail.
	Slices int
	// Replica is the consumer copy (replica index) that differs.
	Replica int
	// FirstToken and LastToken are the request token positions of the
	// first and last differing cells.
	FirstToken, LastToken int
	// Bytes and Bits count the differing bytes and bits.
	Bytes, Bits int
	// Hint says what the difference looks like: "1 bit flipped",
	// "zeroed", "heads 1<->2 swapped", "holds the block of position 3",
	// "holds KV of request req-4", "random bytes", ...
	Hint string
	// TPRank and PPRank are the consumer rank, File the file holding its
	// cells, Block the consumer block id at Position and Offset the byte
	// offset in File of the detail's first differing byte.
	TPRank, PPRank int
	File           string
	Block          int
	Offset         int64
	// State is set for a state group (docs/spec.md §6): Head and LastHead
	// are then the first and last differing global rows, StateIndex the
	// state (in the layer's states) they belong to, and there are no
	// tokens.
	State      bool
	StateIndex int
}

// flipBitsOf returns the number of bits of a hint of flipped bits ("1 bit
// flipped", "N bits flipped"), and false for any other hint.
func flipBitsOf(hint string) (int, bool) {
	n, rest, ok := strings.Cut(hint, " ")
	if !ok || (rest != "bit flipped" && rest != "bits flipped") {
		return 0, false
	}
	bits, err := strconv.Atoi(n)
	if err != nil || bits < 0 || strconv.Itoa(bits) != n {
		return 0, false
	}
	return bits, true
}

// bitsHint says that n bits are flipped.
func bitsHint(n int) string {
	if n == 1 {
		return "1 bit flipped"
	}
	return fmt.Sprintf("%d bits flipped", n)
}

// FoldHint returns the hint of a detail that folds slices with these
// hints: flipped bits add up ("1 bit flipped" twice is "2 bits
// flipped"), any other hint folds only with itself. It returns "" for
// hints that do not fold together (or none).
func FoldHint(hints ...string) string {
	if len(hints) == 0 {
		return ""
	}
	bits, flips := 0, 0
	for _, h := range hints {
		if n, ok := flipBitsOf(h); ok {
			bits += n
			flips++
		} else if h != hints[0] {
			return ""
		}
	}
	switch flips {
	case 0:
		return hints[0]
	case len(hints):
		return bitsHint(bits)
	}
	return ""
}

// Explain returns, for each request of reqs, the cells of its mismatching
// consumer block positions that differ from the producer's (explanation i
// is reqs[i]'s), folded into details (see Detail). It compares the cells
// of those positions in place, on Options.Threads goroutines: every
// consumer cache, global head and replica copy against the producer's
// cells of the same layer (matched by name) and head, token by token. To
// classify a difference it looks the first differing cell up among the
// cells at the same offset of every block position of both sides (an
// index built once per offset needed) and compares the candidates'
// cells, so its work is a pass over the mismatching positions plus, at
// most, a read of the cells at each offset needed. It reads always
// inside layout.Guard and never writes to a dump. Groups whose data is
// not in mapped files (device memory) get a note instead. State groups
// are compared row by row (docs/spec.md §6). It returns an error only for
// a fault while reading mapped data or a cancelled ctx.
func Explain(ctx context.Context, producer, consumer []*layout.Dump, reqs []Request, opts Options) ([]Explanation, error) {
	e := &explainer{ctx: ctx, p: newSide(producer, true), c: newSide(consumer, false), threads: opts.Threads}
	if e.threads <= 0 {
		e.threads = runtime.GOMAXPROCS(0)
	}
	max := opts.MaxDetails
	if max == 0 {
		max = DefaultMaxDetails
	}
	e.reqs = make([]*reqState, len(reqs))
	for i := range reqs {
		e.reqs[i] = &reqState{req: &reqs[i]}
		e.reqs[i].budget.Store(searchBudget)
	}
	if err := e.run(); err != nil {
		return nil, err
	}
	out := make([]Explanation, len(reqs))
	if err := e.parallel(len(reqs), func(_ *worker, i int) { out[i] = e.reqs[i].explanation(max, e) }); err != nil {
		return nil, err
	}
	return out, nil
}
