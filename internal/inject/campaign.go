package inject

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/safeio"
)

// CampaignOptions control a campaign.
type CampaignOptions struct {
	// Trials is the number of trials of each kind (0 means 10).
	Trials int
	Seed   uint64
	// Kinds are the kinds to inject (nil: all).
	Kinds []Kind
	// Pairs are the sides (nil: pairs synthesized from Seed over every
	// preset, with a mix of TP, PP, layouts, formats and block sizes).
	Pairs []Pair
	// Workers run trials in parallel (0: GOMAXPROCS).
	Workers int
	// Dir holds the campaign's scratch files (removed afterwards; "":
	// the system's temporary directory).
	Dir string
	// Progress, when set, is called after each trial with the trials done
	// and the total.
	Progress func(done, total int)
}

// CampaignResult is a campaign's outcome: one row per kind and one clean
// control per pair.
type CampaignResult struct {
	Seed   uint64
	Trials int // per kind
	Kinds  []KindResult
	Pairs  []PairResult
	// Pass is false when a detectable fault was missed or mislocalised,
	// or a control (a clean pair, a past-num-tokens write) was flagged.
	Pass    bool
	Elapsed time.Duration
	// Stopped, when set, says why no trial ran: a pair that does not
	// verify untouched would fail every trial, so the campaign reports
	// its control and stops.
	Stopped string
}

// KindResult sums the trials of one kind.
type KindResult struct {
	Kind     Kind
	Detector string
	Control  bool
	// Trials ran; NotApplicable trials found no pair the kind applies to.
	Trials, NotApplicable int
	// Detected: the expected detector reported the fault. Localised: every
	// judged detector reported exactly what fault.json expects (group,
	// positions, replica checks, drill-down layer/head/hint, audit
	// findings). Missed: a detectable fault nothing reported.
	// FalsePositives: a detector reported what the fault did not touch
	// (for a control: anything).
	Detected, Localised, Missed, FalsePositives int
	// CaughtByVLLM counts the trials vLLM's checksum alone (kvaudit's mix
	// check left out, no tail or stored audit) would have caught: a load
	// the clean comparison verifies is not verified by it. What a
	// connector's production check lets through shows as Trials minus
	// CaughtByVLLM.
	CaughtByVLLM int
	// Pairs are the pairs the kind ran on, with their trial counts.
	Pairs map[string]int
	// Failures are the first failing trials.
	Failures []TrialFailure
	// Example is the block map of the first trial's faulted group.
	Example string
}

// Failed reports whether the kind fails the campaign.
func (k *KindResult) Failed() bool {
	if k.Control {
		return k.FalsePositives > 0
	}
	return k.Missed > 0 || k.Localised < k.Trials || k.FalsePositives > 0
}

// TrialFailure is a trial that did not go as fault.json expects: enough to
// reproduce it with kvaudit inject.
type TrialFailure struct {
	Trial    int
	Pair     string
	Seed     uint64
	Fault    string
	Problems []string
}

// PairResult is a pair's clean control: the untouched sides compared and
// audited.
type PairResult struct {
	Name     string
	Verified bool
	Problems []string
	// Notes say what the pair cannot take (a given consumer whose tails
	// are not zero: no stale-tail trials).
	Notes []string
}

// maxFailures caps the failures kept per kind.
const maxFailures = 8

// Campaign injects Trials faults of each kind into the pairs, checksums,
// compares, drills down and audits each, and judges the outcome against
// the fault's expectations. Trials run in parallel, in-process; each
// writes only the consumer ranks its fault changes and recomputes only
// their records and audits. The pairs' sides are only read. An error is
// a pair that cannot be prepared or read, not a failed trial.
func Campaign(ctx context.Context, opts CampaignOptions) (*CampaignResult, error) {
	start := time.Now()
	opts.fillDefaults()
	if len(opts.Pairs) == 0 {
		return nil, errors.New("campaign: no pair of sides")
	}
	scratch, err := safeio.TempDir(opts.Dir, "kvaudit-campaign-")
	if err != nil {
		return nil, err
	}
	defer safeio.RemoveTemp(scratch)
	states := preparePairs(ctx, opts.Pairs, scratch, opts.Workers)
	defer func() {
		for _, s := range states {
			s.close()
		}
	}()
	res := &CampaignResult{Seed: opts.Seed, Trials: opts.Trials, Pass: true}
	for _, s := range states {
		if s.err != nil {
			return nil, fmt.Errorf("campaign: pair %q: %w", s.name, s.err)
		}
		res.Pairs = append(res.Pairs, s.control)
		if !s.control.Verified {
			res.Pass = false
		}
	}
	if !res.Pass {
		res.Stopped = "a pair does not verify untouched: every trial would fail; compare it with kvaudit diff first"
		res.Elapsed = time.Since(start)
		return res, nil
	}
	outcomes := runTrials(ctx, states, opts, scratch)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for ki, k := range opts.Kinds {
		kr, err := tally(k, outcomes[ki])
		if err != nil {
			return nil, err
		}
		if kr.Failed() {
			res.Pass = false
		}
		res.Kinds = append(res.Kinds, kr)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// fillDefaults gives the zero fields their documented defaults.
func (o *CampaignOptions) fillDefaults() {
	if o.Trials <= 0 {
		o.Trials = 10
	}
	if o.Kinds == nil {
		o.Kinds = Kinds()
	}
	if o.Pairs == nil {
		o.Pairs = defaultPairs(o.Seed)
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
}

// preparePairs prepares the pairs, workers at a time, each in its own
// directory of scratch; a pair that fails holds its error.
func preparePairs(ctx context.Context, pairs []Pair, scratch string, workers int) []*pairState {
	states := make([]*pairState, len(pairs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, workers)
	for i := range pairs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer func() {
				if r := recover(); r != nil {
					states[i] = &pairState{name: pairs[i].Name, err: internalPanic(r)}
				}
			}()
			states[i] = preparePair(ctx, pairs[i], filepath.Join(scratch, fmt.Sprintf("pair-%02d", i)))
		}()
	}
	wg.Wait()
	return states
}

// runTrials runs opts.Trials trials of each kind on opts.Workers workers
// (each with its scratch directory) and returns their outcomes by kind
// and trial. Once ctx is cancelled, the trials left are skipped.
func runTrials(ctx context.Context, states []*pairState, opts CampaignOptions, scratch string) [][]trialOutcome {
	type job struct{ ki, trial int }
	total := len(opts.Kinds) * opts.Trials
	outcomes := make([][]trialOutcome, len(opts.Kinds))
	for ki := range opts.Kinds {
		outcomes[ki] = make([]trialOutcome, opts.Trials)
	}
	jobs := make(chan job)
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if ctx.Err() != nil {
					continue
				}
				dir := filepath.Join(scratch, fmt.Sprintf("w%d", w))
				func() {
					defer func() {
						if r := recover(); r != nil {
							outcomes[j.ki][j.trial] = trialOutcome{err: internalPanic(r)}
						}
					}()
					outcomes[j.ki][j.trial] = runTrial(ctx, states, opts.Kinds[j.ki], j.trial, opts.Seed, dir)
				}()
				n := done.Add(1)
				if opts.Progress != nil {
					opts.Progress(int(n), total)
				}
			}
		}()
	}
	for ki := range opts.Kinds {
		for t := range opts.Trials {
			jobs <- job{ki, t}
		}
	}
	close(jobs)
	wg.Wait()
	return outcomes
}

// tally sums the trials of kind k; an error is a trial that could not
// run (not a failed one).
func tally(k Kind, outcomes []trialOutcome) (KindResult, error) {
	info, _ := InfoOf(k)
	kr := KindResult{Kind: k, Detector: info.Detector, Control: info.Control, Pairs: map[string]int{}}
	for t, o := range outcomes {
		if o.err != nil {
			return kr, fmt.Errorf("campaign: %s trial %d (pair %q, seed %d): %w", k, t, o.pair, o.seed, o.err)
		}
		if o.notApplicable {
			kr.NotApplicable++
			continue
		}
		kr.Trials++
		kr.Pairs[o.pair]++
		if kr.Example == "" {
			kr.Example = o.example
		}
		if o.detected {
			kr.Detected++
		}
		if o.localised {
			kr.Localised++
		}
		if !info.Control && !o.detected {
			kr.Missed++
		}
		if o.falsePositive {
			kr.FalsePositives++
		}
		if o.caughtByVLLM {
			kr.CaughtByVLLM++
		}
		failed := len(o.problems) > 0 || (!info.Control && !o.detected)
		if failed && len(kr.Failures) < maxFailures {
			kr.Failures = append(kr.Failures, TrialFailure{Trial: t, Pair: o.pair, Seed: o.seed, Fault: o.description, Problems: o.problems})
		}
	}
	return kr, nil
}

// internalPanic turns a panic in a campaign goroutine (which would end the
// process with Go's exit code 2, a verdict's) into an internal error that
// kvaudit exits 4 for.
func internalPanic(r any) error {
	return checksum.Recovered("", r)
}
