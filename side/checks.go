package side

import (
	"fmt"
	"slices"

	"github.com/kvaudit/kvaudit/layout"
)

// Checks are one side's whole-model checks: every rank's record summed.
type Checks struct {
	TPSize, PPSize int
	// Complete is false when fewer than TPSize*PPSize ranks reported.
	Complete bool
	// Missing names the ranks that did not report ("tp 1 of 2"; with
	// "pp N of M" when PPSize > 1).
	Missing []string
	// Groups describes the side's groups (fingerprints summed over PP
	// stages), by id.
	Groups []GroupInfo
	// Skipped maps a group id to the reason a rank gave for skipping it.
	Skipped  map[int]string
	Requests []*RequestChecks
}

// GroupInfo is a group of a whole side.
type GroupInfo struct {
	ID              int
	Kind            string
	BlockSize       int
	Fingerprint     uint64
	FingerprintFlat uint64
	SplitLess       bool
}

// RequestChecks are one request's checks on one side.
type RequestChecks struct {
	ID                     string
	ProducerID             string
	NumTokens              int
	NumLocalComputedTokens int
	// TPSize is the side's TP size (a payload carries the producer's).
	TPSize int
	Groups []*GroupChecks
	// Unverified holds load-level reasons (ReasonNotEveryWorker, ...).
	Unverified []string
	// Notes say what decoding a payload let pass as vLLM's consumer does
	// (docs/spec.md §8); a verdict repeats them.
	Notes []string
}

// Group returns the request's checks of group id, or nil.
func (r *RequestChecks) Group(id int) *GroupChecks {
	for _, g := range r.Groups {
		if g.ID == id {
			return g
		}
	}
	return nil
}

// GroupChecks are a request's checks of one group: Checks[k][i] is check k
// at block position Start+i (docs/spec.md §2). Check 0 is what a producer
// sends.
type GroupChecks struct {
	ID              int
	Kind            string
	BlockSize       int
	Start           int
	Fingerprint     uint64
	FingerprintFlat uint64
	// HasFlat is false when the flat fingerprint is unknown (a nested
	// payload carries only the nested one).
	HasFlat bool
	Checks  [][]uint64
	// ChecksBlock are Checks in block numbering (docs/spec.md §1), nil
	// when some rank did not give them (a record without values_block).
	// A flat payload is compared with them.
	ChecksBlock [][]uint64
	// ChecksMix are kvaudit's mix check (docs/spec.md §14) beside Checks,
	// check by check and position by position; nil when some rank did not
	// give it (records of the cuda engine or of an older kvaudit) or the
	// producer sent vLLM's values only (a flat payload, a nested one
	// without the sixth element). Both sides' are compared when both have
	// them.
	ChecksMix [][]uint64
	// Keys are the replica keys summed, (replicas, index).
	Keys [][2]int
	// MissingReplica is set when some check lacks a replica key's sum.
	MissingReplica bool
	// FromPayload marks checks decoded from a payload, which carries
	// neither the group's kind nor whether it is a split-less state group.
	FromPayload bool
	// BadFingerprint marks a payload fingerprint that equals no
	// fingerprint (sent as a negative integer).
	BadFingerprint bool
	// FlatOnly marks checks decoded from a flat payload: only
	// FingerprintFlat is known and BlockSize is 0 (not carried), so a
	// consumer compares fingerprints with the block size (docs/spec.md §9).
	FlatOnly bool
	// SplitLess marks a state group checksummed without a TP split (docs/spec.md
	// §6): comparable only between equal TP sizes, left out of a
	// verdict across TP sizes.
	SplitLess bool
	// NoMix says why ChecksMix is nil when the cause is known (the engine
	// that computed the checks has no mix check), "" otherwise.
	NoMix string
}

// Positions returns the number of block positions checked.
func (g *GroupChecks) Positions() int {
	if len(g.Checks) == 0 {
		return 0
	}
	return len(g.Checks[0])
}

// Select keeps only the requests with the given ids, in the order given.
// An id the side does not hold is an error.
func (c *Checks) Select(ids []string) error {
	var kept []*RequestChecks
	for _, id := range ids {
		i := slices.IndexFunc(c.Requests, func(r *RequestChecks) bool { return r.ID == id })
		if i < 0 {
			return fmt.Errorf("request %q is not in the given dumps or records", id)
		}
		if !slices.Contains(kept, c.Requests[i]) {
			kept = append(kept, c.Requests[i])
		}
	}
	c.Requests = kept
	return nil
}

// PairID returns the producer request id a consumer request pairs with
// (layout.Request.PairID: its producer_id, else its id).
func (r *RequestChecks) PairID() string {
	return layout.Request{ID: r.ID, ProducerID: r.ProducerID}.PairID()
}

// Request returns c's first request with the id, or nil (also for a nil c).
func (c *Checks) Request(id string) *RequestChecks {
	if c == nil {
		return nil
	}
	for _, r := range c.Requests {
		if r.ID == id {
			return r
		}
	}
	return nil
}
