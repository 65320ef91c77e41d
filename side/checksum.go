package side

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

// Progress, when set in an entry point's options, is called before a
// side's dumps are checksummed (side "consumer" or "producer" for
// verify.Compare, "side" for Checksum and Records; the requests
// checksummed) and returns the function the engines call with the cell
// bytes done (checksum.Options.Progress) and the one that ends the
// display.
type Progress func(side string, dumps []*layout.Dump, requests []string) (add func(int64), done func())

// Start calls p, if set and there are dumps to checksum; else it returns
// no add and a done that does nothing.
func (p Progress) Start(side string, dumps []*layout.Dump, requests []string) (add func(int64), done func()) {
	if p == nil || len(dumps) == 0 {
		return nil, func() {}
	}
	return p(side, dumps, requests)
}

// Checksums are one side's checks: its ranks checksummed and merged into
// whole-model checks (docs/spec.md §7).
type Checksums struct {
	// Checks are the merged checks, restricted to the requests asked for
	// (in their order). Checks.Complete is false for partial sums
	// (ChecksumOptions.Partial).
	Checks *Checks
	// Records are the per-rank records merged: those computed from the
	// side's dumps, then the side's record files.
	Records []*wire.Record
	// Repeated are the blocks a request's table gives at several
	// positions (RepeatedBlocks; records carry no block tables): an
	// audit finding, see Failed.
	Repeated []RepeatedBlock
}

// Failed returns an error saying what the side's audit found, a block
// given at two positions of one request (Repeated), and nil when it found
// nothing.
func (c *Checksums) Failed() error {
	if len(c.Repeated) == 0 {
		return nil
	}
	return &RepeatedBlocksError{Blocks: c.Repeated}
}

// RepeatedBlocksError is a side whose block tables give a block at two
// positions of one request (an audit finding, not bad input).
type RepeatedBlocksError struct {
	Blocks []RepeatedBlock
}

func (e *RepeatedBlocksError) Error() string { return repeatedSummary(e.Blocks) }

// ChecksumOptions control Checksum.
type ChecksumOptions struct {
	// Engine evaluates the checksum definition; nil means checksum.Fast{}.
	Engine checksum.Engine
	// Requests restricts the work to these request ids, kept in their
	// order (all when empty); an id the side lacks is an error.
	Requests []string
	// Partial lets Checksum merge a subset of the side's ranks into
	// partial sums (every request unverified) instead of refusing it.
	Partial bool
	// BlockValues computes the block-numbered values too
	// (checksum.Options.BlockValues).
	BlockValues bool
	Progress    Progress
}

// RecordsOptions control Records.
type RecordsOptions struct {
	// Engine evaluates the checksum definition; nil means checksum.Fast{}.
	Engine checksum.Engine
	// Requests restricts the work to these request ids (all when empty).
	Requests []string
	Progress Progress
}

// IncompleteError is a side given with fewer ranks than its deployment
// has, to a Checksum that does not allow partial sums
// (ChecksumOptions.Partial).
type IncompleteError struct {
	// Got is the number of ranks given; TPSize and PPSize are the
	// deployment's.
	Got, TPSize, PPSize int
	// Missing names the ranks not given (at most 8, then "...").
	Missing []string
}

// Ranks says which ranks were given: "1 of 2 ranks (tp 2 x pp 1)".
func (e *IncompleteError) Ranks() string {
	return fmt.Sprintf("%d of %d ranks (tp %d x pp %d)", e.Got, e.TPSize*e.PPSize, e.TPSize, e.PPSize)
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("got %s: give every rank of the side, or allow partial sums (ChecksumOptions.Partial)", e.Ranks())
}

// nothingChecksummedError says why no request of a side has a checksummed
// group: every group skipped (a state group of unknown shape, ...), or no
// request at all. A side of which nothing could be checksummed is never a
// silent success.
type nothingChecksummedError struct {
	Reasons []string
}

func (e *nothingChecksummedError) Error() string {
	return "nothing checksummed: " + strings.Join(e.Reasons, "; ")
}

// Checksum checksums a side given by paths (dumps, directories holding
// dumps and/or records, record files) for the requests of opts.Requests
// (all when empty): it opens the side, checksums its dumps with
// opts.Engine, merges them with its records into whole-model checks and
// keeps the requests asked for. Every rank of the side must be given
// (else an *IncompleteError) unless opts.Partial allows partial sums;
// opts.BlockValues also computes the block-numbered values. The result
// may hold nothing checksummed: Checksums.Unchecked says so, after the
// caller has shown what there is.
func Checksum(ctx context.Context, in Input, opts ChecksumOptions) (*Checksums, error) {
	recs, rep, err := records(ctx, in, RecordsOptions{Engine: opts.Engine, Requests: opts.Requests, Progress: opts.Progress}, opts.BlockValues)
	if err != nil {
		return nil, err
	}
	c, err := Merge(recs)
	if err != nil {
		return nil, err
	}
	if !c.Complete && !opts.Partial {
		return nil, &IncompleteError{Got: len(recs), TPSize: c.TPSize, PPSize: c.PPSize, Missing: c.Missing}
	}
	if len(opts.Requests) > 0 {
		if err := c.Select(opts.Requests); err != nil {
			return nil, err
		}
	}
	return &Checksums{Checks: c, Records: recs, Repeated: rep}, nil
}

// Records checksums a side given by paths into one record per rank, not
// merged: each rank's partial sums, for wire.MarshalRecord and a
// Checksum (or Merge) elsewhere. Any subset of the side's ranks
// will do. Records carry both numberings (docs/spec.md §8).
func Records(ctx context.Context, in Input, opts RecordsOptions) ([]*wire.Record, error) {
	recs, _, err := records(ctx, in, opts, true)
	return recs, err
}

// records opens a side and returns its records (its dumps checksummed,
// then its record files) and the repeated blocks of its dumps' tables.
func records(ctx context.Context, in Input, opts RecordsOptions, blockValues bool) ([]*wire.Record, []RepeatedBlock, error) {
	side, err := Open(in)
	if err != nil {
		return nil, nil, err
	}
	defer side.Close()
	add, done := opts.Progress.Start("side", side.Dumps, opts.Requests)
	recs, err := side.AllRecords(ctx, checksum.Options{Engine: opts.Engine, Requests: opts.Requests, BlockValues: blockValues, Progress: add})
	done()
	if err != nil {
		return nil, nil, err
	}
	return recs, RepeatedBlocks("", side.Dumps, opts.Requests), nil
}

// Unchecked returns a *nothingChecksummedError when no request of the
// side has a checksummed group, with the reasons (the side holds no
// request, each skipped group and why), and nil otherwise.
func (c *Checksums) Unchecked() error {
	for _, r := range c.Checks.Requests {
		if len(r.Groups) > 0 {
			return nil
		}
	}
	var why []string
	if len(c.Checks.Requests) == 0 {
		why = append(why, "the side holds no request")
	}
	ids := make([]int, 0, len(c.Checks.Skipped))
	for id := range c.Checks.Skipped {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		why = append(why, fmt.Sprintf("group %d skipped: %s", id, c.Checks.Skipped[id]))
	}
	if len(why) == 0 {
		why = append(why, "no request has a block in a checksummed group")
	}
	return &nothingChecksummedError{Reasons: why}
}
