package verify

import (
	"context"
	"errors"
	"github.com/kvaudit/kvaudit/side"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
)

// Audits are the consumer audits run beside a comparison; a nil field was
// not run.
type Audits struct {
	// Tail is the transferred-or-zeroed audit.
	Tail *TailAudit
	// Stored are each consumer rank's stored checksums.
	Stored []*StoredRank
	// Repeated are the blocks a request's table gives at several
	// positions, on either side (RepeatedBlocks): checked on every
	// comparison of dumps, without a flag; nil when there are none.
	Repeated []side.RepeatedBlock
	// Transfers is the audit of the transfer's NIXL logs.
	Transfers *transfer.Result
	// SGLang is SGLang's own check of SGLang dumps (CompareSGLang).
	SGLang *SGLangAudit
}

// failed reports whether an audit found something: a non-zero byte past
// the transferred range, a stored checksum that differs, a block given
// at two positions of one request, or a violated transfer invariant.
func (a *Audits) failed() bool {
	if a.Tail != nil && len(a.Tail.Findings) > 0 {
		return true
	}
	if len(a.Repeated) > 0 {
		return true
	}
	if a.Transfers != nil && a.Transfers.Violated() {
		return true
	}
	if a.SGLang.Mismatched() {
		return true
	}
	return a.Stored != nil && StoredVerdict(a.Stored) == Mismatch
}

// StoredVerdict is verified when every stored checksum matches, mismatch
// when one differs, unverified when the manifests list none.
func StoredVerdict(ranks []*StoredRank) Verdict {
	checked := 0
	for _, r := range ranks {
		if len(r.Mismatches()) > 0 {
			return Mismatch
		}
		checked += r.Checked()
	}
	if checked == 0 {
		return Unverified
	}
	return Verified
}

// ErrStoredRecords is a stored-checksum check asked of records: it reads
// the blocks and their block hashes.
var ErrStoredRecords = errors.New("the stored-checksum check reads dumps (the blocks and their block hashes), not records")

// CheckStored recomputes each full block's stored checksum (rank-local,
// so any subset of ranks will do) and, where the manifests list stored
// checksums, compares them: Result.Audits.Stored holds every rank's
// values, Result.Verdict says whether they match (unverified when the
// manifests list none). Options.Requests restricts the requests.
// StoredOptions control CheckStored.
type StoredOptions struct {
	// Engine evaluates the checksum definition; nil means checksum.Fast{}.
	Engine checksum.Engine
	// Requests restricts the requests (all when empty).
	Requests []string
	Step     Step
}

func CheckStored(ctx context.Context, consumer side.Input, opts StoredOptions) (*Result, error) {
	cside, err := side.Open(consumer)
	if err != nil {
		return nil, err
	}
	defer cside.Close()
	if !cside.DumpsOnly() {
		return nil, ErrStoredRecords
	}
	done := opts.Step.start("computing the stored checksums")
	a, err := audit(ctx, cside, opts.Engine, opts.Requests, false, true)
	done()
	if err != nil {
		return nil, err
	}
	return &Result{Audits: a}, nil
}

// audit runs the audits asked for on a side's dumps: the tail audit,
// the stored checksums, for the requests given (all when empty).
func audit(ctx context.Context, cside *side.Source, engine checksum.Engine, requests []string, tail, stored bool) (*Audits, error) {
	a := &Audits{}
	if tail {
		t, err := AuditTails(cside.Dumps, requests)
		if err != nil {
			return nil, err
		}
		a.Tail = t
	}
	if stored {
		a.Stored = []*StoredRank{}
		for _, d := range cside.Dumps {
			s, err := RankStored(ctx, d, checksum.Options{Engine: engine, Requests: requests})
			if err != nil {
				return nil, err
			}
			a.Stored = append(a.Stored, s)
		}
	}
	return a, nil
}

// ErrTransfersDumps is a transfer audit asked of a producer that is not
// dumps: the logs' descriptors resolve to both sides' cells.
var ErrTransfersDumps = errors.New("the transfer audit resolves the logs to both sides' dumps: give the producer's dumps, not records or payloads")

// Cause is what explains a mismatch: a transfer audit's finding at the
// consumer request's group and block position.
type Cause struct {
	Group      int    `json:"group"`
	Position   int    `json:"position"`
	Invariant  string `json:"invariant"`
	Transfer   int    `json:"transfer"`
	Descriptor int    `json:"descriptor"`
	Log        string `json:"log,omitempty"`
	Message    string `json:"message"`
}

// auditTransfers audits the logs beside a comparison and gives each
// mismatching position the findings at it as its causes.
func auditTransfers(ctx context.Context, res *Result, logs []string, producer, consumer []*layout.Dump, requests []string) error {
	files, err := transfer.FindLogs(logs)
	if err != nil {
		return err
	}
	t, err := transfer.Audit(ctx, files, producer, consumer, transfer.Options{Requests: requests})
	if err != nil {
		return err
	}
	if res.Audits == nil {
		res.Audits = &Audits{}
	}
	res.Audits.Transfers = t
	for _, rv := range res.Diff.Requests {
		for _, g := range rv.Groups {
			if g.Verdict != Mismatch {
				continue
			}
			for _, p := range g.Positions {
				for _, f := range t.At(rv.ID, g.ID, p) {
					rv.Causes = append(rv.Causes, Cause{Group: g.ID, Position: p, Invariant: f.Invariant, Transfer: f.Transfer,
						Descriptor: f.Descriptor, Log: f.Log, Message: f.Message})
				}
			}
		}
	}
	return nil
}
