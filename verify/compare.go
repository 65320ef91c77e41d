package verify

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/kvaudit/kvaudit/side"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// Step, when set in an entry point's options, is told of a long step
// that reports no bytes (the drill-down, the audits) and returns the
// function that ends it.
type Step func(what string) (done func())

// start calls s, if set.
func (s Step) start(what string) (done func()) {
	if s == nil {
		return func() {}
	}
	return s(what)
}

// CompareOptions control Compare.
type CompareOptions struct {
	// Engine evaluates the checksum definition; nil means checksum.Fast{}.
	Engine checksum.Engine
	// Requests restricts the comparison to these consumer request ids
	// (all when empty); it also names the request a bare payload is for.
	Requests []string
	// NoDrill skips the drill-down of mismatches; MaxDetails caps its
	// details per request (0: drill.DefaultMaxDetails, negative: no cap).
	NoDrill    bool
	MaxDetails int
	// AuditTail runs the tail audit on the consumer's dumps; Stored checks
	// its blocks against the stored checksums in its manifests.
	AuditTail, Stored bool
	// Strict makes any loaded block that was not compared unverified
	// (diffOptions.Strict).
	Strict bool
	// Transfers are NIXL logs (files or directories, transfer.FindLogs)
	// of the transfer the comparison checks: their audit runs beside it
	// (Audits.Transfers), and each mismatch an audit finding explains gets
	// its cause (RequestVerdict.Causes). Both sides must be dumps.
	Transfers []string
	// MixKey is the run key of the mix check when both sides are dumps
	// (docs/spec.md §14): nil draws one at random for the comparison, so
	// that no precomputed pattern cancels in it. A side of records or
	// payloads, which carry the published key's mix check, makes the
	// comparison use the published key (checksum.PublishedMixKey); any
	// other key is then an ErrMixKeySides.
	MixKey *uint64
	// RequireMix makes a group compared by vLLM's checksum alone
	// unverified (diffOptions.RequireMix).
	RequireMix bool
	Progress   side.Progress
	Step       Step
}

// DeviceUncheckedSummary says why a comparison is unverified when only
// the runner read some of its rows (DiffResult.DeviceUnchecked).
func DeviceUncheckedSummary(c *checksum.EngineCheck) string {
	return fmt.Sprintf("%d output slot part(s) sum rows in device memory (cuda_ipc) that only the %s runner read, which the cpu engine cannot recompute (--trust-runner accepts them)", c.DeviceSlots, c.Engine)
}

// ErrMixKeySides is a mix key other than the published one asked of a
// comparison a side of which is records or a payload.
var ErrMixKeySides = errors.New("a mix key other than the published one needs both sides as dumps: records and payloads carry the mix check under the published key")

// mixKey chooses the comparison's run key (CompareOptions.MixKey).
func mixKey(pside, cside *side.Source, opts CompareOptions) (key uint64, source string, err error) {
	if !checksum.EngineMixes(engineOf(checksum.Options{Engine: opts.Engine})) {
		return checksum.PublishedMixKey, "", nil
	}
	both := pside.DumpsOnly() && cside.DumpsOnly()
	switch {
	case opts.MixKey != nil && *opts.MixKey == checksum.PublishedMixKey:
		return checksum.PublishedMixKey, MixKeyGiven, nil
	case opts.MixKey != nil && !both:
		return 0, "", ErrMixKeySides
	case opts.MixKey != nil:
		return *opts.MixKey, MixKeyGiven, nil
	case !both:
		return checksum.PublishedMixKey, MixKeyPublished, nil
	}
	var b [8]byte
	for key == checksum.PublishedMixKey {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, "", fmt.Errorf("drawing the mix check's run key: %w", err)
		}
		key = binary.LittleEndian.Uint64(b[:])
	}
	return key, MixKeyRun, nil
}

// markNoMix says, on every group of checks computed from dumps by an
// engine without the mix check, why they lack it.
func markNoMix(c *side.Checks, s *side.Source, e checksum.Engine) {
	e = engineOf(checksum.Options{Engine: e})
	if len(s.Dumps) == 0 || checksum.EngineMixes(e) {
		return
	}
	for _, r := range c.Requests {
		for _, g := range r.Groups {
			if g.ChecksMix == nil {
				g.NoMix = "the " + e.Name() + " engine computes no mix check yet (internal/kernels/README.md)"
			}
		}
	}
}

// Result is what a comparison found.
type Result struct {
	// Diff holds the verdicts per request and group, with the drill-down's
	// details; nil for CheckStored.
	Diff *DiffResult
	// Audits are the consumer audits that ran; nil when none did.
	Audits *Audits
	// Producer and Consumer say what the sides were (Compare fills them).
	Producer, Consumer side.SideInfo
}

// Verdict combines the comparison's verdict with the audits': a mismatch
// when a block differs or an audit finds something, unverified when a
// load or the stored checksums could not be verified, else verified.
func (r *Result) Verdict() Verdict {
	v := Verified
	if r.Diff != nil {
		v = r.Diff.Verdict
		if v == Verified && r.Diff.DeviceUnchecked() {
			v = Unverified
		}
	}
	if a := r.Audits; a != nil {
		if a.failed() {
			return Mismatch
		}
		if v == Verified && a.Stored != nil && StoredVerdict(a.Stored) == Unverified {
			v = Unverified
		}
		if v == Verified && a.Transfers != nil && a.Transfers.Verdict == transfer.Unresolved {
			v = Unverified
		}
	}
	return v
}

// Summary says in one line why the result is not verified, starting
// with its verdict (Verdict), as every verdict line does: "mismatch: " and
// the requests that mismatch and the audits' findings, or "unverified: "
// and what is unverified. It is "" when the result is verified. Request
// ids are escaped (control characters, bidi marks: internal/termtext), so
// a crafted id cannot rewrite the line on a terminal.
func (r *Result) Summary() string {
	verdict := r.Verdict()
	var ids []string
	if r.Diff != nil {
		for _, rv := range r.Diff.Requests {
			if rv.Verdict == r.Diff.Verdict {
				ids = append(ids, termtext.Escape(rv.ID))
			}
		}
	}
	var msgs []string
	switch verdict {
	case Mismatch:
		if r.Diff != nil && r.Diff.Verdict == Mismatch {
			msgs = append(msgs, termtext.Requests(ids))
		}
		if a := r.Audits; a != nil {
			if a.Tail != nil && len(a.Tail.Findings) > 0 {
				x := a.Tail.Findings[0]
				msgs = append(msgs, fmt.Sprintf("tail audit: non-zero bytes past the transferred range in %s (request %s group %d position %d, ...)", a.Tail.Extent(), termtext.Escape(x.Request), x.Group, x.Position))
			}
			if a.Stored != nil && StoredVerdict(a.Stored) == Mismatch {
				msgs = append(msgs, "stored checksums: some block differs from the checksum stored with it")
			}
			if len(a.Repeated) > 0 {
				msgs = append(msgs, (&side.RepeatedBlocksError{Blocks: a.Repeated}).Error())
			}
			if a.Transfers != nil && a.Transfers.Violated() {
				msgs = append(msgs, a.Transfers.Summary())
			}
			if a.SGLang.Mismatched() {
				msgs = append(msgs, a.SGLang.summary())
			}
		}
	case Unverified:
		switch {
		case r.Diff != nil && r.Diff.Verdict == Unverified && len(ids) == 0:
			msgs = append(msgs, "the consumer holds no request")
		case r.Diff != nil && r.Diff.Verdict == Unverified:
			msgs = append(msgs, termtext.Requests(ids))
		case r.Diff != nil && r.Diff.DeviceUnchecked():
			msgs = append(msgs, DeviceUncheckedSummary(r.Diff.EngineCheck))
		case r.Audits != nil && r.Audits.Transfers != nil && r.Audits.Transfers.Verdict == transfer.Unresolved:
			msgs = append(msgs, r.Audits.Transfers.Summary())
		default:
			msgs = append(msgs, "stored checksums: no request lists stored_checksums for a full block")
		}
	default:
		return ""
	}
	return string(verdict) + ": " + strings.Join(msgs, "; ")
}

// BarePayloadError is a producer given as one request's payload while the
// consumer holds several requests: Options.Requests must name the one it
// is for.
type BarePayloadError struct {
	Producer string
	Requests int
}

func (e *BarePayloadError) Error() string {
	return fmt.Sprintf("the producer %s is one request's payload and the consumer holds %d requests: name the consumer request it is for", e.Producer, e.Requests)
}

// ErrAuditRecords is an audit asked of a consumer given as records: the
// audits read the consumer's dumps.
var ErrAuditRecords = errors.New("the tail audit, the stored-checksum check and the transfer audit read the consumer's dumps: give dumps, not records")

// Compare answers whether the consumer holds what the producer sent. It
// opens both sides (see Input), checksums their dumps, merges the ranks,
// pairs the requests (by id, by a consumer request's producer_id, or a
// bare payload with the consumer's only or named request), applies the
// verdict rules, drills every mismatch down to layers, heads and tokens
// when both sides are dumps, and runs the audits opts asks for. The
// consumer must be dumps or records; the producer may also be what it
// sent (a payload).
func Compare(ctx context.Context, producer, consumer side.Input, opts CompareOptions) (*Result, error) {
	cside, err := side.Open(consumer)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer cside.Close()
	if cside.IsPayload() {
		if len(cside.Notes()) > 0 {
			// Not even a payload (/etc/passwd): say what it is not.
			return nil, fmt.Errorf("consumer %s is neither a dump nor a record: the consumer must be dumps or records (a .safetensors file, a directory with manifest.json or of dumps, a record file)", cside.Name())
		}
		return nil, fmt.Errorf("consumer %s is a payload: the consumer must be dumps or records (a payload is what a producer sends)", cside.Name())
	}
	if (opts.AuditTail || opts.Stored || len(opts.Transfers) > 0) && !cside.DumpsOnly() {
		return nil, ErrAuditRecords
	}
	pside, err := side.Open(producer)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	defer pside.Close()

	key, keySource, err := mixKey(pside, cside, opts)
	if err != nil {
		return nil, err
	}
	// A flat payload (vLLM's published form) is compared block-numbered:
	// the consumer's values in both numberings, from one pass where the
	// engine can (docs/spec.md §1).
	add, done := opts.Progress.Start("consumer", cside.Dumps, opts.Requests)
	crecs, err := cside.AllRecords(ctx, checksum.Options{Engine: opts.Engine, Requests: opts.Requests, BlockValues: pside.Flat(), Progress: add, MixKey: key})
	done()
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	cons, err := side.Merge(crecs)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	if len(opts.Requests) > 0 {
		if err := cons.Select(opts.Requests); err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
	}
	markNoMix(cons, cside, opts.Engine)
	pairing := map[string][]string{} // what pairing did, by consumer request id
	if err := pairByParams(cside, cons, pairing); err != nil {
		return nil, err
	}
	prod, err := producerChecks(ctx, pside, cons, opts, pairing, key)
	if err != nil {
		return nil, err
	}

	res := &Result{Diff: diffWith(prod, cons, diffOptions{Strict: opts.Strict, RequireMix: opts.RequireMix}), Producer: pside.Info(), Consumer: cside.Info()}
	res.Diff.MixKey, res.Diff.MixKeySource = key, keySource
	if ce, ok := opts.Engine.(checksum.CheckedEngine); ok {
		c := ce.Checked()
		res.Diff.EngineCheck = &c
	}
	for _, rv := range res.Diff.Requests {
		rv.Hints = append(rv.Hints, pairing[rv.ID]...)
	}
	notePairing(res.Diff, prod, cons, pside, cside)
	refineFlatHints(res.Diff, prod, cside.Dumps)
	for _, rv := range res.Diff.Requests {
		note, ok := pside.Notes()[rv.ProducerID]
		if !ok && pside.Bare() != nil {
			note, ok = pside.Notes()[""]
		}
		if ok {
			rv.Notes = append(rv.Notes, "the producer's payload: "+note)
		}
	}
	if !opts.NoDrill && res.Diff.Verdict == Mismatch && pside.DumpsOnly() && cside.DumpsOnly() {
		done := opts.Step.start("drilling the mismatches down to layers, heads and tokens")
		err := Explain(ctx, pside.Dumps, cside.Dumps, res.Diff, drill.Options{MaxDetails: opts.MaxDetails})
		done()
		if err != nil {
			return nil, err
		}
	}
	if opts.AuditTail || opts.Stored {
		done := opts.Step.start("auditing the consumer's dumps")
		res.Audits, err = audit(ctx, cside, opts.Engine, opts.Requests, opts.AuditTail, opts.Stored)
		done()
		if err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
	}
	if rep := append(side.RepeatedBlocks("producer", pside.Dumps, pairIDs(cons)), side.RepeatedBlocks("consumer", cside.Dumps, opts.Requests)...); len(rep) > 0 {
		if res.Audits == nil {
			res.Audits = &Audits{}
		}
		res.Audits.Repeated = rep
	}
	if len(opts.Transfers) > 0 {
		if !pside.DumpsOnly() {
			return nil, ErrTransfersDumps
		}
		done := opts.Step.start("auditing the transfers")
		err := auditTransfers(ctx, res, opts.Transfers, pside.Dumps, cside.Dumps, opts.Requests)
		done()
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

// producerChecks resolves the producer's checks for the consumer's
// requests: a bare payload takes the consumer's only request's pairing
// id, payloads pair by id, dumps and records are checksummed for the
// requests the consumer pairs with.
func producerChecks(ctx context.Context, pside *side.Source, cons *side.Checks, opts CompareOptions, pairing map[string][]string, key uint64) (*side.Checks, error) {
	switch {
	case pside.Bare() != nil:
		r := pairBare(pside, cons)
		switch {
		case r == nil && len(cons.Requests) != 1:
			return nil, &BarePayloadError{Producer: pside.Name(), Requests: len(cons.Requests)}
		case r == nil:
			r = cons.Requests[0]
			if pside.RemoteID() != "" && pside.RemoteID() != r.PairID() && pside.RemoteID() != r.ID {
				pairing[r.ID] = append(pairing[r.ID], fmt.Sprintf("the producer's kv_transfer_params name remote_request_id %s, but this load pairs as %s: were they sent for it?", termtext.Escape(pside.RemoteID()), termtext.Escape(r.PairID())))
			}
		case len(cons.Requests) > 1:
			// The one request the payload is for, as --request names it.
			if err := cons.Select([]string{r.ID}); err != nil {
				return nil, err
			}
			pairing[r.ID] = append(pairing[r.ID], fmt.Sprintf("paired with the producer's kv_transfer_params by their remote_request_id %s; the consumer's other requests are not compared", termtext.Escape(pside.RemoteID())))
		}
		pside.Bare().ID = r.PairID()
		return side.ProducerChecks(pside.Bare()), nil
	case pside.IsPayload():
		return side.ProducerChecks(pside.ByID()...), nil
	}
	ids := pairIDs(cons)
	add, done := opts.Progress.Start("producer", pside.Dumps, ids)
	precs, err := pside.AllRecords(ctx, checksum.Options{Engine: opts.Engine, Requests: ids, Progress: add, MixKey: key})
	done()
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	prod, err := side.Merge(precs)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	markNoMix(prod, pside, opts.Engine)
	return prod, nil
}

// pairIDs returns the producer request ids the consumer's requests pair
// with, each once.
func pairIDs(cons *side.Checks) []string {
	var ids []string
	for _, r := range cons.Requests {
		if !slices.Contains(ids, r.PairID()) {
			ids = append(ids, r.PairID())
		}
	}
	return ids
}

// Explain drills the mismatches of res down to the cells that differ
// (package drill), comparing the producer's dumps with the consumer's, and
// adds what it finds to each mismatching request's Details and Notes. It
// fails only for a fault while reading mapped data or a cancelled ctx.
func Explain(ctx context.Context, producer, consumer []*layout.Dump, res *DiffResult, opts drill.Options) error {
	var reqs []drill.Request
	var rvs []*RequestVerdict
	for _, rv := range res.Requests {
		if rv.Verdict != Mismatch {
			continue
		}
		r := drill.Request{ID: rv.ID, ProducerID: rv.ProducerID}
		for _, g := range rv.Groups {
			if g.Verdict == Mismatch {
				r.Groups = append(r.Groups, drill.Group{ID: g.ID, Positions: g.Positions})
			}
		}
		reqs, rvs = append(reqs, r), append(rvs, rv)
	}
	xs, err := drill.Explain(ctx, producer, consumer, reqs, opts)
	if err != nil {
		return err
	}
	for i, x := range xs {
		rvs[i].Details = append(rvs[i].Details, x.Details...)
		rvs[i].Notes = append(rvs[i].Notes, x.Notes...)
		rvs[i].Heat = append(rvs[i].Heat, x.Heat...)
	}
	return nil
}
