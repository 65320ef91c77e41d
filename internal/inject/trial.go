package inject

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
	"github.com/kvaudit/kvaudit/wire"
)

// This file holds a campaign's trials: one fault injected into a pair
// and what the detectors report of it.

// trialSeed derives a trial's seed from the campaign's, the kind and the
// trial's number, so a trial is the same whatever other kinds run.
func trialSeed(seed uint64, k Kind, trial int) uint64 {
	x := seed ^ kindSeed(k) ^ uint64(trial+1)
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
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
	// caughtByVLLM: vLLM's checksum alone (kvaudit's mix check left out,
	// no audit) would not have verified a load the clean comparison
	// verifies.
	caughtByVLLM bool
	problems     []string
	example      string
	err          error
}

// runTrial injects one fault and judges what the detectors report.
func runTrial(ctx context.Context, states []*pairState, k Kind, trial int, campaignSeed uint64, dir string) trialOutcome {
	info, _ := InfoOf(k)
	seed := trialSeed(campaignSeed, k, trial)
	if info.Input == InputStore {
		return storeTrial(ctx, k, trial, seed, dir) // a store of its own
	}
	// Kinds start on different pairs; trials rotate through them.
	first := registryIndex(k) + 1
	for attempt := range len(states) {
		s := states[(first+trial+attempt)%len(states)]
		if info.Detector == DetectTail && !s.tailClean {
			continue // the tail audit already reports the pair's consumer
		}
		if info.Input == InputLogs && len(s.logs) == 0 {
			continue // no log of the pair's transfer
		}
		o := trialOutcome{pair: s.name, seed: seed}
		var err error
		if info.Input == InputPayload {
			err = s.payloadTrial(k, seed, &o)
		} else {
			err = s.dumpTrial(ctx, k, seed, dir, &o)
		}
		if isNotApplicable(err) {
			continue
		}
		o.err = err
		return o
	}
	return trialOutcome{notApplicable: true, seed: seed}
}

func (s *pairState) payloadTrial(k Kind, seed uint64, o *trialOutcome) error {
	payloads, f, err := tamperPayload(s.prodChecks, Options{Kind: k, Seed: seed, Positions: s.allowProducer, PayloadForm: wire.FormNested})
	if err != nil {
		return err
	}
	var reqs []*side.RequestChecks
	for _, r := range s.prodChecks.Requests {
		text, ok := payloads[r.ID]
		if !ok {
			continue
		}
		rc, _ := side.PayloadRequestBase64(r.ID, text) // a tampered payload may not decode: that is the point
		reqs = append(reqs, rc)
	}
	res := verify.Diff(side.ProducerChecks(reqs...), s.consChecks)
	o.description = f.Description
	s.judge(f, res, s.payloadClean, nil, nil, nil, o)
	return nil
}

func (s *pairState) dumpTrial(ctx context.Context, k Kind, seed uint64, dir string, o *trialOutcome) error {
	defer os.RemoveAll(dir)
	opts := Options{Kind: k, Seed: seed, Positions: s.allowConsumer, ChangedOnly: true}
	if lookup(k).plan.input() == InputLogs {
		opts.Transfers, opts.Producer = s.logs, s.producer
	}
	f, err := Inject(ctx, s.consumer, dir, opts)
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
	cons, err := side.Merge(recs)
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
	var transfers []transfer.Finding
	if f.Input == InputLogs {
		logs, err := transfer.FindLogs([]string{filepath.Join(dir, transferDir)})
		if err != nil {
			return err
		}
		a, err := transfer.Audit(ctx, logs, s.producer, dumps, transfer.Options{MaxFindings: -1})
		if err != nil {
			return err
		}
		transfers = a.Findings
	}
	s.judge(f, res, s.clean, tail.Findings, stored, transfers, o)
	return nil
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

// groupVerdict returns res's verdict of group g of request id, or nil.
func groupVerdict(res *verify.DiffResult, id string, g int) *verify.GroupVerdict {
	if rv := requestVerdict(res, id); rv != nil {
		for _, gv := range rv.Groups {
			if gv.ID == g {
				return gv
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
