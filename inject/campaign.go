package inject

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/layout/synth"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
	"github.com/kvaudit/kvaudit/wire"
)

// Pair is a producer and a consumer to inject faults into: given sides
// (dump paths) or, with Synth set, synthesized ones.
type Pair struct {
	Name string
	// Producer and Consumer are the sides' dumps (or directories holding
	// them), used as they are.
	Producer, Consumer []string
	// Synth, when set, synthesizes both sides and prepares the consumer
	// as a connector that keeps its invariants leaves it: tails zeroed,
	// one block allocated past each request's last token, stored
	// checksums of an offload tier (see PrepareOptions).
	Synth *SynthPair
}

// SynthPair configures a synthesized pair. The consumer's seed is the
// producer's, so both hold the same logical KV.
type SynthPair struct {
	Producer, Consumer synth.Config
}

// DefaultPairs are the synthesized pairs of a campaign without arguments:
// every preset, TP 1->2 and 2->1 (and 1->4), PP splits, every layout,
// dir/raw/safetensors formats, kernel blocks, a prefix hit, and producer
// and consumer block sizes that differ (16/32, 2/4). Every pair has two
// requests, so faults between requests have a second one.
func DefaultPairs(seed uint64) []Pair {
	type side struct {
		tp, pp   int
		layout   string
		bs, kb   int
		format   string
		conv     string
		prefix   int
		noSplit  bool
		convType string
	}
	mk := func(preset string, tokens int, p, c side) Pair {
		cfg := func(s side, role string) synth.Config {
			return synth.Config{Preset: preset, TP: s.tp, PP: s.pp, Layout: s.layout, BlockSize: s.bs, KernelBlockSize: s.kb,
				Tokens: tokens, Requests: 2, Seed: seed, Role: role, Format: s.format, ConvLayout: s.conv,
				ConvDtype: s.convType, PrefixTokens: s.prefix, NoStateSplit: s.noSplit}
		}
		pc, cc := cfg(p, "producer"), cfg(c, "consumer")
		desc := func(s side) string {
			d := fmt.Sprintf("tp%d", s.tp)
			if s.pp > 1 {
				d += fmt.Sprintf("pp%d", s.pp)
			}
			if s.layout != "" {
				d += "-" + s.layout
			}
			if s.bs != 0 {
				d += fmt.Sprintf("-bs%d", s.bs)
			}
			return d
		}
		return Pair{Name: fmt.Sprintf("%s %s>%s", preset, desc(p), desc(c)), Synth: &SynthPair{pc, cc}}
	}
	return []Pair{
		mk("tiny", 7, side{tp: 1, layout: "flash", bs: 2}, side{tp: 2, layout: "nhd", bs: 2, format: "dir"}),
		mk("tiny", 7, side{tp: 1, layout: "hnd", bs: 2}, side{tp: 4, layout: "packed", bs: 4}),
		mk("llama", 40, side{tp: 1, layout: "flash", bs: 16}, side{tp: 2, layout: "hnd", bs: 32}),
		mk("llama", 40, side{tp: 2, pp: 2, layout: "nhd", bs: 32}, side{tp: 1, layout: "packed-token-major", bs: 16, format: "raw"}),
		mk("llama", 40, side{tp: 1, layout: "flash", bs: 16}, side{tp: 1, layout: "hnd", bs: 16, kb: 8, prefix: 16, format: "dir"}),
		mk("mla", 40, side{tp: 1, bs: 16}, side{tp: 2, layout: "packed", bs: 16}),
		mk("mla", 40, side{tp: 2, pp: 2, bs: 16}, side{tp: 1, bs: 32, format: "raw"}),
		mk("swa", 72, side{tp: 2, layout: "flash", bs: 16}, side{tp: 1, layout: "hnd", bs: 32}),
		mk("swa", 72, side{tp: 1, layout: "nhd", bs: 32}, side{tp: 2, pp: 2, layout: "flash", bs: 16}),
		mk("indexer", 40, side{tp: 2, bs: 16}, side{tp: 1, layout: "packed", bs: 16}),
		mk("indexer", 40, side{tp: 1, layout: "hnd", bs: 32}, side{tp: 2, layout: "nhd", bs: 16, format: "dir"}),
		mk("mamba2-hybrid", 40, side{tp: 1, bs: 16}, side{tp: 2, layout: "hnd", bs: 16, conv: "channels-last"}),
		mk("mamba2-hybrid", 40, side{tp: 2, bs: 32, convType: "float32"}, side{tp: 1, bs: 16, convType: "float32", format: "raw"}),
		mk("gdn-hybrid", 40, side{tp: 2, bs: 16, conv: "channels-last"}, side{tp: 2, pp: 2, layout: "packed", bs: 16}),
		mk("gdn-hybrid", 40, side{tp: 1, bs: 16, convType: "float32"}, side{tp: 2, bs: 32, convType: "float32", conv: "channels-last"}),
		mk("mamba1", 40, side{tp: 1, bs: 16}, side{tp: 2, bs: 16, conv: "channels-last", format: "dir"}),
		mk("mamba1", 40, side{tp: 2, bs: 16, noSplit: true}, side{tp: 2, bs: 16, noSplit: true}),
	}
}

// CampaignOptions control a campaign.
type CampaignOptions struct {
	// Trials is the number of trials of each kind (0 means 10).
	Trials int
	Seed   uint64
	// Kinds are the kinds to inject (nil: all).
	Kinds []Kind
	// Pairs are the sides (nil: DefaultPairs(Seed)).
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
	if opts.Trials <= 0 {
		opts.Trials = 10
	}
	kinds := opts.Kinds
	if kinds == nil {
		kinds = Kinds()
	}
	pairs := opts.Pairs
	if pairs == nil {
		pairs = DefaultPairs(opts.Seed)
	}
	if len(pairs) == 0 {
		return nil, errors.New("campaign: no pair of sides")
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	scratch, err := safeio.TempDir(opts.Dir, "kvaudit-campaign-")
	if err != nil {
		return nil, err
	}
	defer safeio.RemoveTemp(scratch)

	states := make([]*pairState, len(pairs))
	{
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
	}
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

	type job struct{ ki, trial int }
	total := len(kinds) * opts.Trials
	outcomes := make([][]trialOutcome, len(kinds))
	for ki := range kinds {
		outcomes[ki] = make([]trialOutcome, opts.Trials)
	}
	jobs := make(chan job)
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
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
					outcomes[j.ki][j.trial] = runTrial(ctx, states, kinds[j.ki], j.trial, opts.Seed, dir)
				}()
				n := done.Add(1)
				if opts.Progress != nil {
					opts.Progress(int(n), total)
				}
			}
		}()
	}
	for ki := range kinds {
		for t := range opts.Trials {
			jobs <- job{ki, t}
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for ki, k := range kinds {
		info, _ := InfoOf(k)
		kr := KindResult{Kind: k, Detector: info.Detector, Control: info.Control, Pairs: map[string]int{}}
		for t, o := range outcomes[ki] {
			if o.err != nil {
				return nil, fmt.Errorf("campaign: %s trial %d (pair %q, seed %d): %w", k, t, o.pair, o.seed, o.err)
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
			failed := len(o.problems) > 0 || (!info.Control && !o.detected)
			if failed && len(kr.Failures) < maxFailures {
				kr.Failures = append(kr.Failures, TrialFailure{Trial: t, Pair: o.pair, Seed: o.seed, Fault: o.description, Problems: o.problems})
			}
		}
		if kr.Failed() {
			res.Pass = false
		}
		res.Kinds = append(res.Kinds, kr)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// trialSeed derives a trial's seed from the campaign's, the kind and the
// trial's number, so a trial is the same whatever other kinds run.
// internalPanic turns a panic in a campaign goroutine (which would end the
// process with Go's exit code 2, a verdict's) into an internal error that
// kvaudit exits 4 for.
func internalPanic(r any) error {
	return checksum.Recovered("", r)
}

func trialSeed(seed uint64, k Kind, trial int) uint64 {
	x := seed ^ kindSeed(k) ^ uint64(trial+1)
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// pairState is a prepared pair: open sides, cached records, the clean
// comparison and audits.
type pairState struct {
	name       string
	producer   []*layout.Dump
	consumer   []*layout.Dump
	consRecs   []*wire.Record
	prodChecks *verify.Checks
	consChecks *verify.Checks
	clean      *verify.DiffResult
	// payloadClean is the comparison with the producer's intact payloads.
	payloadClean *verify.DiffResult
	tailClean    bool
	stored       []*verify.StoredRank
	control      PairResult
	err          error
}

func (s *pairState) close() {
	if s == nil {
		return
	}
	for _, d := range append(s.producer, s.consumer...) {
		d.Close()
	}
}

var trialEngine = checksum.Fast{Threads: 1}

func preparePair(ctx context.Context, p Pair, dir string) *pairState {
	s := &pairState{name: p.Name, control: PairResult{Name: p.Name}}
	fail := func(err error) *pairState {
		s.err = err
		return s
	}
	prodPaths, consPaths := p.Producer, p.Consumer
	if p.Synth != nil {
		var err error
		if prodPaths, err = synth.WriteContext(ctx, dir, p.Synth.Producer); err != nil {
			return fail(err)
		}
		raw, err := synth.WriteContext(ctx, filepath.Join(dir, "raw"), p.Synth.Consumer)
		if err != nil {
			return fail(err)
		}
		rawDumps, err := layout.OpenSide(raw)
		if err != nil {
			return fail(err)
		}
		consPaths, err = Prepare(ctx, rawDumps, filepath.Join(dir, "consumer"),
			PrepareOptions{ZeroTails: true, ExtraBlocks: 1, Stored: true, Engine: trialEngine})
		for _, d := range rawDumps {
			d.Close()
		}
		if err != nil {
			return fail(err)
		}
	}
	var err error
	if s.producer, err = layout.OpenPaths(prodPaths); err != nil {
		return fail(err)
	}
	if s.consumer, err = layout.OpenPaths(consPaths); err != nil {
		return fail(err)
	}
	copts := checksum.Options{Engine: trialEngine}
	prodRecs, err := checksum.Records(ctx, s.producer, copts)
	if err != nil {
		return fail(err)
	}
	if s.prodChecks, err = verify.Merge(prodRecs); err != nil {
		return fail(err)
	}
	if s.consRecs, err = checksum.Records(ctx, s.consumer, copts); err != nil {
		return fail(err)
	}
	if s.consChecks, err = verify.Merge(s.consRecs); err != nil {
		return fail(err)
	}
	c := &s.control
	if !s.prodChecks.Complete || !s.consChecks.Complete {
		c.Problems = append(c.Problems, "a side lacks some ranks")
	}
	s.clean = verify.Diff(s.prodChecks, s.consChecks)
	for _, rv := range s.clean.Requests {
		if rv.Verdict != verify.Verified {
			c.Problems = append(c.Problems, fmt.Sprintf("request %s: %s %s", rv.ID, rv.Verdict, describeVerdict(rv)))
		}
	}
	var reqs []*verify.RequestChecks
	for _, r := range s.prodChecks.Requests {
		pl, err := verify.NewPayload(s.prodChecks, r, wire.FormNested)
		if err != nil {
			continue
		}
		text, err := wire.EncodePayloadBase64(pl)
		if err != nil {
			return fail(err)
		}
		rc, _ := verify.PayloadRequestBase64(r.ID, text)
		reqs = append(reqs, rc)
	}
	s.payloadClean = verify.Diff(verify.ProducerChecks(reqs...), s.consChecks)
	if s.payloadClean.Verdict != verify.Verified {
		c.Problems = append(c.Problems, fmt.Sprintf("compared with the producer's payloads: %s", s.payloadClean.Verdict))
	}
	tail, err := verify.AuditTails(s.consumer, nil)
	if err != nil {
		return fail(err)
	}
	s.tailClean = len(tail.Findings) == 0
	if !s.tailClean {
		msg := fmt.Sprintf("tail audit: %d block(s) hold non-zero bytes past the transferred range (e.g. request %s group %d position %d)",
			len(tail.Findings), tail.Findings[0].Request, tail.Findings[0].Group, tail.Findings[0].Position)
		if p.Synth != nil {
			c.Problems = append(c.Problems, msg)
		} else {
			c.Notes = append(c.Notes, msg+": the consumer's connector does not zero them; no stale-tail trials")
		}
	}
	for _, d := range s.consumer {
		st, err := verify.RankStored(ctx, d, copts)
		if err != nil {
			return fail(err)
		}
		s.stored = append(s.stored, st)
		for _, b := range st.Mismatches() {
			c.Problems = append(c.Problems, fmt.Sprintf("stored checksum of request %s group %d position %d on rank %d:%d differs", b.Request, b.Group, b.Position, st.PPRank, st.TPRank))
		}
	}
	c.Verified = len(c.Problems) == 0
	return s
}

func describeVerdict(rv *verify.RequestVerdict) string {
	var parts []string
	parts = append(parts, rv.Reasons...)
	for _, g := range rv.Groups {
		if g.Verdict != verify.Verified && g.Verdict != verify.LeftOut {
			parts = append(parts, fmt.Sprintf("group %d %s %s%v", g.ID, g.Verdict, g.Reason, g.Positions))
		}
	}
	return strings.Join(parts, "; ")
}

// trialOutcome is one trial's judgement.
type trialOutcome struct {
	pair          string
	seed          uint64
	description   string
	notApplicable bool
	detected      bool
	localised     bool
	falsePositive bool
	problems      []string
	example       string
	err           error
}

// allowConsumer allows the consumer positions the clean comparison covers.
func (s *pairState) allowConsumer(id string, g, pos int) bool {
	gv := groupVerdict(s.clean, id, g)
	return gv != nil && pos < len(gv.Map) && gv.Map[pos] == verify.PosVerified
}

// allowProducer allows the producer positions whose block the clean
// comparison covers on the consumer.
func (s *pairState) allowProducer(id string, g, pos int) bool {
	for _, rv := range s.clean.Requests {
		if rv.ProducerID != id {
			continue
		}
		gv := groupVerdict(s.clean, rv.ID, g)
		if gv == nil {
			continue
		}
		for _, x := range expandPositions(gv, []int{pos}, InputPayload) {
			if gv.Map[x] == verify.PosVerified {
				return true
			}
		}
	}
	return false
}

func groupVerdict(res *verify.DiffResult, id string, g int) *verify.GroupVerdict {
	for _, rv := range res.Requests {
		if rv.ID == id {
			for _, gv := range rv.Groups {
				if gv.ID == g {
					return gv
				}
			}
		}
	}
	return nil
}

// expandPositions maps positions of the faulted side (the consumer's for
// dumps, the producer's for a payload) to the consumer positions a
// comparison reports: every compared consumer position of the larger
// block (unit) holding them.
func expandPositions(gv *verify.GroupVerdict, positions []int, input string) []int {
	var out []int
	add := func(x int) {
		if x >= 0 && x < len(gv.Map) && gv.Map[x] == verify.PosVerified && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	cs, ps := gv.BlockSize, gv.ProducerBlockSize
	if ps == 0 {
		ps = cs
	}
	if gv.Kind == layout.KindMamba || cs == 0 {
		for _, p := range positions {
			add(p)
		}
		sort.Ints(out)
		return out
	}
	L := max(cs, ps)
	in := cs
	if input == InputPayload {
		in = ps
	}
	for _, p := range positions {
		u := p / (L / in)
		for x := u * (L / cs); x < (u+1)*(L/cs); x++ {
			add(x)
		}
	}
	sort.Ints(out)
	return out
}

// runTrial injects one fault and judges what the detectors report.
func runTrial(ctx context.Context, states []*pairState, k Kind, trial int, campaignSeed uint64, dir string) trialOutcome {
	info, _ := InfoOf(k)
	seed := trialSeed(campaignSeed, k, trial)
	// Kinds start on different pairs; trials rotate through them.
	first := slices.IndexFunc(Infos, func(in Info) bool { return in.Kind == k }) + 1
	for attempt := range len(states) {
		s := states[(first+trial+attempt)%len(states)]
		if k == StaleTail && !s.tailClean {
			continue
		}
		o := trialOutcome{pair: s.name, seed: seed}
		var err error
		if info.Input == InputPayload {
			err = s.payloadTrial(k, seed, &o)
		} else {
			err = s.dumpTrial(ctx, k, seed, dir, &o)
		}
		if IsNotApplicable(err) {
			continue
		}
		o.err = err
		return o
	}
	return trialOutcome{notApplicable: true, seed: seed}
}

func (s *pairState) payloadTrial(k Kind, seed uint64, o *trialOutcome) error {
	payloads, f, err := TamperPayload(s.prodChecks, Options{Kind: k, Seed: seed, Allow: s.allowProducer, PayloadForm: wire.FormNested})
	if err != nil {
		return err
	}
	var reqs []*verify.RequestChecks
	for _, r := range s.prodChecks.Requests {
		text, ok := payloads[r.ID]
		if !ok {
			continue
		}
		rc, _ := verify.PayloadRequestBase64(r.ID, text) // a tampered payload may not decode: that is the point
		reqs = append(reqs, rc)
	}
	res := verify.Diff(verify.ProducerChecks(reqs...), s.consChecks)
	o.description = f.Description
	s.judge(f, res, s.payloadClean, nil, nil, o)
	return nil
}

func (s *pairState) dumpTrial(ctx context.Context, k Kind, seed uint64, dir string, o *trialOutcome) error {
	defer os.RemoveAll(dir)
	f, err := Inject(ctx, s.consumer, dir, Options{Kind: k, Seed: seed, Allow: s.allowConsumer, ChangedOnly: true})
	if err != nil {
		return err
	}
	o.description = f.Description
	changed := map[Rank]bool{}
	for _, c := range f.Changes {
		changed[c.Rank] = true
	}
	dumps := slices.Clone(s.consumer)
	recs := slices.Clone(s.consRecs)
	stored := slices.Clone(s.stored)
	var opened []*layout.Dump
	defer func() { layout.CloseAll(opened) }() // a closure: opened grows below
	for i, d := range s.consumer {
		pp, tp := d.Rank()
		if !changed[Rank{PP: pp, TP: tp}] {
			continue
		}
		nd, err := layout.Open(filepath.Join(dir, filepath.Base(d.Path)))
		if err != nil {
			return err
		}
		opened = append(opened, nd)
		dumps[i] = nd
		if recs[i], err = checksum.RankRecord(ctx, nd, checksum.Options{Engine: trialEngine}); err != nil {
			return err
		}
		if stored[i], err = verify.RankStored(ctx, nd, checksum.Options{Engine: trialEngine}); err != nil {
			return err
		}
	}
	cons, err := verify.Merge(recs)
	if err != nil {
		return err
	}
	res := verify.Diff(s.prodChecks, cons)
	if res.Verdict == verify.Mismatch {
		if err := verify.Explain(ctx, s.producer, dumps, res, drill.Options{MaxDetails: -1}); err != nil {
			return err
		}
	}
	tail, err := verify.AuditTails(opened, nil) // the unchanged ranks audited clean
	if err != nil {
		return err
	}
	s.judge(f, res, s.clean, tail.Findings, stored, o)
	return nil
}
