package inject

import (
	"errors"
	"fmt"

	"github.com/kvaudit/kvaudit/layout"
)

// faultFormat is the format tag of fault.json.
const faultFormat = "kvaudit-fault/1"

// Detectors: what is expected to catch a fault.
const (
	// DetectChecksum: the faulted request's checksums differ from the
	// producer's (kvaudit diff).
	DetectChecksum = "checksum"
	// DetectCoResident: another request's checksums differ: the fault
	// wrote into a block that request owns (kvaudit diff compares every
	// request of the consumer).
	DetectCoResident = "co-resident"
	// DetectTail: the transferred-or-zeroed audit (kvaudit diff
	// --audit-tail) finds non-zero bytes past the transferred range.
	DetectTail = "tail-audit"
	// DetectStored: the offload tier's tagged stored checksums (kvaudit
	// diff --stored, kvaudit checksum --stored).
	DetectStored = "stored"
	// DetectPayload: the consumer's comparison with a tampered or broken
	// producer payload is a mismatch or unverified, never verified.
	DetectPayload = "payload"
	// DetectTransfers: the transfer audit of the NIXL logs (kvaudit
	// transfers, kvaudit diff --transfers) finds it, at its request,
	// transfer, descriptor, layer and tokens.
	DetectTransfers = "transfers"
	// DetectNone: nothing may report it (a control).
	DetectNone = "none"
)

// Inputs: what a fault corrupts.
const (
	// InputDumps: a copy of the side's dumps (positions are the side's).
	InputDumps = "dumps"
	// InputPayload: the producer's payloads (positions are the producer's).
	InputPayload = "payload"
	// InputLogs: a transfer's NIXL logs, and the consumer's dumps as the
	// transfer leaves them (positions are the consumer's).
	InputLogs = "transfer-log"
)

// Rank is a (pp_rank, tp_rank): layout.Rank.
type Rank = layout.Rank

// Fault is what a fault changed and what should catch it: fault.json.
// Positions are block positions of the side the fault went into (the
// consumer's dumps, or the producer's payload: Input says which); a
// comparison with a side of larger blocks reports every consumer position
// of the larger block (kvaudit campaign accounts for it).
type Fault struct {
	Format      string `json:"format"`
	Kind        Kind   `json:"kind"`
	Seed        uint64 `json:"seed"`
	Input       string `json:"input"`
	Description string `json:"description"`
	// Request is the request the fault went into ("" for none).
	Request string `json:"request"`
	// Rank, Tensor and File are those of the first change (null and ""
	// when nothing changed or for a payload).
	Rank   *Rank  `json:"rank"`
	Tensor string `json:"tensor"`
	File   string `json:"file"`
	// Changes are the byte ranges that differ from the input, exactly,
	// by file (relative to the output directory) and offset.
	Changes []Change `json:"changes"`
	// Affected are the (request, group, position)s whose checksummed KV
	// changed.
	Affected []Place `json:"affected"`
	// Detector is what should catch the fault (Detect*).
	Detector string `json:"detector"`
	Expect   Expect `json:"expect"`
	// Payload describes a payload fault.
	Payload *PayloadChange `json:"payload,omitempty"`
	// Transfer describes a transfer-log fault: the log and the
	// transfer changed.
	Transfer *TransferChange `json:"transfer,omitempty"`
	// Store is a store fault's change (kinds_store.go).
	Store *StoreChange `json:"store,omitempty"`
}

// TransferChange is the change of a transfer-log fault: the log (relative
// to the output directory), its agent, the transfer (its id and line) and
// the indices of its descriptor pairs changed, dropped or added.
type TransferChange struct {
	Log         string `json:"log"`
	Agent       string `json:"agent"`
	Transfer    int    `json:"transfer"`
	Line        int    `json:"line"`
	Descriptors []int  `json:"descriptors"`
}

// Change is a range of bytes that differ from the input.
type Change struct {
	// File is relative to the output directory, slash-separated.
	File string `json:"file"`
	Rank Rank   `json:"rank"`
	// Tensor is the layer whose tensor the bytes belong to, or
	// "manifest" for a manifest's bytes.
	Tensor string `json:"tensor"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// Place is a block position of a request in a group.
type Place struct {
	Request  string `json:"request"`
	Group    int    `json:"group"`
	Position int    `json:"position"`
}

// Expect is what each detector must report. A nil list is not judged (the
// detector may report anything); an empty list means it must report
// nothing.
type Expect struct {
	// Verdict is the overall verdict of `kvaudit diff PRODUCER FAULTED`:
	// verified, mismatch or unverified.
	Verdict string `json:"verdict"`
	// Requests are the loads that must not verify, and how; every other
	// load must verify (as it did before the fault).
	Requests []RequestExpect `json:"requests"`
	// Details are what the drill-down must report for those loads (null:
	// not judged, as for payloads, which have no dumps to drill into).
	Details []DetailExpect `json:"details"`
	// Tail are the findings of the tail audit (null: not judged).
	Tail []AuditPlace `json:"tail"`
	// Stored are the blocks whose stored checksum must fail (null: not
	// judged).
	Stored []AuditPlace `json:"stored"`
	// Transfers are the findings the transfer audit must report (null:
	// not judged); any other it reports must lie at an affected place.
	Transfers []TransferExpect `json:"transfers,omitempty"`
	// Store is what kvaudit scrub must report of a store fault's copy.
	Store []StoreExpect `json:"store,omitempty"`
}

// TransferExpect is one finding the transfer audit must report: its
// invariant, the consumer request, the transfer (its id in the log named
// by its file name), the descriptor pair (-1: none, a gap of the
// request), the layer number and the first and last request token.
type TransferExpect struct {
	Invariant  string `json:"invariant"`
	Request    string `json:"request"`
	Transfer   int    `json:"transfer"`
	Descriptor int    `json:"descriptor"`
	Log        string `json:"log"`
	Layer      int    `json:"layer"`
	Tokens     [2]int `json:"tokens"`
}

// RequestExpect is the expected verdict of one load.
type RequestExpect struct {
	ID string `json:"id"`
	// Verdict is mismatch or unverified.
	Verdict string `json:"verdict"`
	// Reason is, for an unverified load, the load-level reason.
	Reason string        `json:"reason,omitempty"`
	Groups []GroupExpect `json:"groups"`
}

// GroupExpect is the expected mismatch of one group.
type GroupExpect struct {
	ID int `json:"id"`
	// Positions are the faulted side's positions that differ.
	Positions []int `json:"positions"`
	// Checks are the consumer checks (replica copies) that differ; null
	// when the producer's value changed (every check differs).
	Checks []int `json:"checks"`
}

// DetailExpect is one drill-down detail. For a state group, Head is the
// first differing global row of a (state, segment) copy and Position is 0.
type DetailExpect struct {
	Request  string `json:"request"`
	Group    int    `json:"group"`
	Position int    `json:"position"`
	Layer    int    `json:"layer"`
	Head     int    `json:"head"`
	Replica  int    `json:"replica"`
	Hint     string `json:"hint"`
	// Tokens are the first and last differing tokens, when the kind
	// defines them.
	Tokens *[2]int `json:"tokens,omitempty"`
}

// AuditPlace is one finding of an audit: a block of a request on a rank
// (and, for the tail audit, a layer).
type AuditPlace struct {
	Request  string `json:"request"`
	Group    int    `json:"group"`
	Position int    `json:"position"`
	Rank     Rank   `json:"rank"`
	Layer    string `json:"layer,omitempty"`
}

// PayloadChange describes a payload fault: which request's payload, in
// which form, and the byte ranges of its msgpack (after base64 decoding)
// that differ; a truncated payload's base64 text is cut at Length.
type PayloadChange struct {
	Request string `json:"request"`
	Form    string `json:"form"`
	// File holds the payloads (request id -> base64), relative to the
	// output directory.
	File string `json:"file"`
	// Original and Tampered are the base64 texts.
	Original string `json:"original"`
	Tampered string `json:"tampered"`
	// Msgpack are the byte ranges of the decoded original that differ
	// (payload-flip, payload-version) or were replaced
	// (payload-nesting); for payload-truncate, the text is cut at
	// TextLength characters.
	Msgpack    []Change `json:"msgpack,omitempty"`
	TextLength int      `json:"text_length,omitempty"`
}

// OptionError is an option that names nothing of the side, or a value out
// of range. Option is the field's Go name in Options or PrepareOptions
// ("Target.Request", "Target.Group", "Target.Rank", "Bits",
// "ExtraBlocks"); Value is its value as the message shows it.
type OptionError struct {
	Option string
	Value  string
	Msg    string
}

func (e *OptionError) Error() string { return fmt.Sprintf("%s %s: %s", e.Option, e.Value, e.Msg) }

// NotApplicableError says a kind cannot be injected into a side (no
// second request, no replicated head, no stored checksums, ...).
type NotApplicableError struct {
	Kind Kind
	Msg  string
}

func (e *NotApplicableError) Error() string {
	return fmt.Sprintf("fault %s: %s", e.Kind, e.Msg)
}

// isNotApplicable reports whether err is a *NotApplicableError.
func isNotApplicable(err error) bool {
	var na *NotApplicableError
	return errors.As(err, &na)
}
