package inject

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
)

// This file holds a campaign's pairs of sides: the synthesized defaults,
// and each pair prepared once (opened, checksummed, compared and audited
// untouched: its clean control).

// Pair is a producer and a consumer to inject faults into: given sides
// (dump paths), or synthesized ones (the default pairs).
type Pair struct {
	Name string
	// Producer and Consumer are the sides' dumps (or directories holding
	// them), used as they are.
	Producer, Consumer []string
	// Logs are the NIXL logs of the pull from Producer into Consumer
	// (files or directories), for the transfer-log kinds; a synthesized
	// pair gets the logs of a correct pull where one can be planned.
	Logs []string
	// synth, when set, synthesizes both sides and prepares the consumer
	// as a connector that keeps its invariants leaves it: tails zeroed,
	// one block allocated past each request's last token, stored
	// checksums of an offload tier (see PrepareOptions).
	synth *synthPair
}

// synthPair configures a synthesized pair. The consumer's seed is the
// producer's, so both hold the same logical KV.
type synthPair struct {
	Producer, Consumer synth.Config
}

// defaultPairs are the synthesized pairs of a campaign without arguments:
// every preset, TP 1->2 and 2->1 (and 1->4), PP splits, every layout,
// dir/raw/safetensors formats, kernel blocks, a prefix hit, and producer
// and consumer block sizes that differ (16/32, 2/4); the pairs whose pull
// vLLM's NIXL connector makes get the logs of a correct one. Every pair
// has two requests, so faults between requests have a second one.
func defaultPairs(seed uint64) []Pair {
	type sideConfig struct {
		tp, pp   int
		layout   string
		bs, kb   int
		format   string
		conv     string
		prefix   int
		noSplit  bool
		convType string
	}
	mk := func(preset string, tokens int, p, c sideConfig) Pair {
		cfg := func(s sideConfig, role string) synth.Config {
			return synth.Config{Preset: preset, TP: s.tp, PP: s.pp, Layout: s.layout, BlockSize: s.bs, KernelBlockSize: s.kb,
				Tokens: tokens, Requests: 2, Seed: seed, Role: role, Format: s.format, ConvLayout: s.conv,
				ConvDtype: s.convType, PrefixTokens: s.prefix, NoStateSplit: s.noSplit}
		}
		pc, cc := cfg(p, "producer"), cfg(c, "consumer")
		desc := func(s sideConfig) string {
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
		return Pair{Name: fmt.Sprintf("%s %s>%s", preset, desc(p), desc(c)), synth: &synthPair{pc, cc}}
	}
	return []Pair{
		mk("tiny", 7, sideConfig{tp: 1, layout: "flash", bs: 2}, sideConfig{tp: 2, layout: "nhd", bs: 2, format: "dir"}),
		mk("tiny", 7, sideConfig{tp: 1, layout: "hnd", bs: 2}, sideConfig{tp: 4, layout: "packed", bs: 4}),
		mk("llama", 40, sideConfig{tp: 1, layout: "flash", bs: 16}, sideConfig{tp: 2, layout: "hnd", bs: 32}),
		mk("llama", 40, sideConfig{tp: 2, pp: 2, layout: "nhd", bs: 32}, sideConfig{tp: 1, layout: "packed-token-major", bs: 16, format: "raw"}),
		mk("llama", 40, sideConfig{tp: 1, layout: "flash", bs: 16}, sideConfig{tp: 1, layout: "hnd", bs: 16, kb: 8, prefix: 16, format: "dir"}),
		mk("mla", 40, sideConfig{tp: 1, bs: 16}, sideConfig{tp: 2, layout: "packed", bs: 16}),
		mk("mla", 40, sideConfig{tp: 2, pp: 2, bs: 16}, sideConfig{tp: 1, bs: 32, format: "raw"}),
		mk("swa", 72, sideConfig{tp: 2, layout: "flash", bs: 16}, sideConfig{tp: 1, layout: "hnd", bs: 32}),
		mk("swa", 72, sideConfig{tp: 1, layout: "nhd", bs: 32}, sideConfig{tp: 2, pp: 2, layout: "flash", bs: 16}),
		mk("indexer", 40, sideConfig{tp: 2, bs: 16}, sideConfig{tp: 1, layout: "packed", bs: 16}),
		mk("indexer", 40, sideConfig{tp: 1, layout: "hnd", bs: 32}, sideConfig{tp: 2, layout: "nhd", bs: 16, format: "dir"}),
		mk("mamba2-hybrid", 40, sideConfig{tp: 1, bs: 16}, sideConfig{tp: 2, layout: "hnd", bs: 16, conv: "channels-last"}),
		mk("mamba2-hybrid", 40, sideConfig{tp: 2, bs: 32, convType: "float32"}, sideConfig{tp: 1, bs: 16, convType: "float32", format: "raw"}),
		mk("gdn-hybrid", 40, sideConfig{tp: 2, bs: 16, conv: "channels-last"}, sideConfig{tp: 2, pp: 2, layout: "packed", bs: 16}),
		mk("gdn-hybrid", 40, sideConfig{tp: 1, bs: 16, convType: "float32"}, sideConfig{tp: 2, bs: 32, convType: "float32", conv: "channels-last"}),
		mk("mamba1", 40, sideConfig{tp: 1, bs: 16}, sideConfig{tp: 2, bs: 16, conv: "channels-last", format: "dir"}),
		mk("mamba1", 40, sideConfig{tp: 2, bs: 16, noSplit: true}, sideConfig{tp: 2, bs: 16, noSplit: true}),
		// Pulls vLLM's NIXL connector makes, whose logs the transfer-log
		// kinds change: a head split planned as vLLM's connector pairs
		// blocks (nixl.PlannerVLLM); producer blocks of two kernel
		// blocks with a prefix hit, and consumer blocks of two producer
		// blocks with state blocks, paired by token
		// (nixl.PlannerExact: vLLM's own pairing shifts the first by
		// a block, docs/transfers.md).
		planned(mk("llama", 40, sideConfig{tp: 1, layout: "hnd", bs: 16}, sideConfig{tp: 2, layout: "hnd", bs: 16}), nixl.PlannerVLLM),
		planned(mk("llama", 40, sideConfig{tp: 1, layout: "nhd", bs: 32, kb: 16}, sideConfig{tp: 1, layout: "nhd", bs: 16, prefix: 32}), nixl.PlannerExact),
		planned(mk("mamba2-hybrid", 40, sideConfig{tp: 1, layout: "hnd", bs: 16}, sideConfig{tp: 1, layout: "hnd", bs: 32, format: "dir"}), nixl.PlannerExact),
	}
}

// planned sets how a synthesized pair's logs pair blocks.
func planned(p Pair, planner string) Pair {
	p.synth.Consumer.Planner = planner
	return p
}

// pairState is a prepared pair: open sides, cached records, the clean
// comparison and audits.
type pairState struct {
	name       string
	producer   []*layout.Dump
	consumer   []*layout.Dump
	consRecs   []*wire.Record
	prodChecks *side.Checks
	consChecks *side.Checks
	clean      *verify.DiffResult
	// payloadClean is the comparison with the producer's intact payloads.
	payloadClean *verify.DiffResult
	tailClean    bool
	stored       []*verify.StoredRank
	// logs are the pull's NIXL logs (none: no transfer-log trials).
	logs    []string
	control PairResult
	err     error
}

func (s *pairState) close() {
	if s == nil {
		return
	}
	for _, d := range append(s.producer, s.consumer...) {
		d.Close()
	}
}

// trialEngine checksums in a campaign: one thread each, as trials run
// in parallel.
var trialEngine = checksum.Fast{Threads: 1}

// preparePair opens a pair (synthesizing it into dir first, when it is
// synthesized), checksums both sides and runs its clean control; an error
// is kept in the state.
func preparePair(ctx context.Context, p Pair, dir string) *pairState {
	s := &pairState{name: p.Name, control: PairResult{Name: p.Name}}
	prodPaths, consPaths := p.Producer, p.Consumer
	if p.synth != nil {
		var err error
		if prodPaths, consPaths, err = p.synth.write(ctx, dir); err != nil {
			s.err = err
			return s
		}
	}
	if s.err = s.open(ctx, prodPaths, consPaths); s.err != nil {
		return s
	}
	if s.err = s.planLogs(p, dir); s.err == nil {
		s.err = s.runControl(ctx, p.synth != nil)
	}
	return s
}

// write synthesizes the pair into dir and prepares the consumer as a
// connector that keeps its invariants leaves it; it returns the sides'
// dumps.
func (sp *synthPair) write(ctx context.Context, dir string) (producer, consumer []string, err error) {
	if producer, err = synth.WriteContext(ctx, dir, sp.Producer); err != nil {
		return nil, nil, err
	}
	raw, err := synth.WriteContext(ctx, filepath.Join(dir, "raw"), sp.Consumer)
	if err != nil {
		return nil, nil, err
	}
	rawDumps, err := layout.OpenSide(raw)
	if err != nil {
		return nil, nil, err
	}
	defer layout.CloseAll(rawDumps)
	consumer, err = Prepare(ctx, rawDumps, filepath.Join(dir, "consumer"),
		PrepareOptions{ZeroTails: true, ExtraBlocks: 1, Stored: true, Engine: trialEngine})
	return producer, consumer, err
}

// open opens both sides and checksums them.
func (s *pairState) open(ctx context.Context, prodPaths, consPaths []string) error {
	var err error
	if s.producer, err = layout.OpenPaths(prodPaths); err != nil {
		return err
	}
	if s.consumer, err = layout.OpenPaths(consPaths); err != nil {
		return err
	}
	copts := checksum.Options{Engine: trialEngine}
	prodRecs, err := checksum.Records(ctx, s.producer, copts)
	if err != nil {
		return err
	}
	if s.prodChecks, err = side.Merge(prodRecs); err != nil {
		return err
	}
	if s.consRecs, err = checksum.Records(ctx, s.consumer, copts); err != nil {
		return err
	}
	s.consChecks, err = side.Merge(s.consRecs)
	return err
}

// runControl compares and audits the untouched pair: every load must
// verify, against the producer's dumps and its payloads, and the audits
// must find nothing (but the tail audit on a given consumer, whose
// connector may not zero tails, which only rules out the kinds the tail
// audit detects). Trials are judged against these results.
func (s *pairState) runControl(ctx context.Context, synthesized bool) error {
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
	var reqs []*side.RequestChecks
	for _, r := range s.prodChecks.Requests {
		pl, err := side.NewPayload(s.prodChecks, r, wire.FormNested)
		if err != nil {
			continue
		}
		text, err := wire.EncodePayloadBase64(pl)
		if err != nil {
			return err
		}
		rc, _ := side.PayloadRequestBase64(r.ID, text)
		reqs = append(reqs, rc)
	}
	s.payloadClean = verify.Diff(side.ProducerChecks(reqs...), s.consChecks)
	if s.payloadClean.Verdict != verify.Verified {
		c.Problems = append(c.Problems, fmt.Sprintf("compared with the producer's payloads: %s", s.payloadClean.Verdict))
	}
	tail, err := verify.AuditTails(s.consumer, nil)
	if err != nil {
		return err
	}
	s.tailClean = len(tail.Findings) == 0
	if !s.tailClean {
		msg := fmt.Sprintf("tail audit: non-zero bytes past the transferred range in %s (e.g. request %s group %d position %d)",
			tail.Extent(), tail.Findings[0].Request, tail.Findings[0].Group, tail.Findings[0].Position)
		if synthesized {
			c.Problems = append(c.Problems, msg)
		} else {
			c.Notes = append(c.Notes, msg+": the consumer's connector does not zero them; no "+tailKinds()+" trials")
		}
	}
	for _, d := range s.consumer {
		st, err := verify.RankStored(ctx, d, checksum.Options{Engine: trialEngine})
		if err != nil {
			return err
		}
		s.stored = append(s.stored, st)
		for _, b := range st.Mismatches() {
			c.Problems = append(c.Problems, fmt.Sprintf("stored checksum of request %s group %d position %d on rank %d:%d differs", b.Request, b.Group, b.Position, st.PPRank, st.TPRank))
		}
	}
	if err := s.auditLogs(ctx); err != nil {
		return err
	}
	c.Verified = len(c.Problems) == 0
	return nil
}

// planLogs gives the pair its NIXL logs: the given ones, or, for a
// synthesized pair, those of a correct pull where vLLM's connector makes
// one (nixl.Plan).
func (s *pairState) planLogs(p Pair, dir string) error {
	if p.synth == nil {
		if len(p.Logs) > 0 {
			var err error
			s.logs, err = transfer.FindLogs(p.Logs)
			return err
		}
		return nil
	}
	logs, err := nixl.WritePlan(filepath.Join(dir, transferDir), s.producer, s.consumer, false,
		nixl.PlanOptions{Planner: p.synth.Consumer.Planner})
	var np *nixl.NotPlannableError
	if errors.As(err, &np) {
		return nil
	}
	s.logs = logs
	return err
}

// auditLogs audits the untouched pair's logs: a correct pull is clean.
func (s *pairState) auditLogs(ctx context.Context) error {
	if len(s.logs) == 0 {
		return nil
	}
	a, err := transfer.Audit(ctx, s.logs, s.producer, s.consumer, transfer.Options{})
	if err != nil {
		return err
	}
	if a.Verdict != transfer.Clean {
		s.control.Problems = append(s.control.Problems, "the transfer audit of its logs: "+a.Summary())
	}
	return nil
}

// describeVerdict says why a load did not verify.
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

// tailKinds names the kinds the tail audit detects, which a pair whose
// consumer the audit does not find clean cannot take.
func tailKinds() string {
	var names []string
	for _, d := range registry {
		if d.detector == DetectTail {
			names = append(names, string(d.kind))
		}
	}
	return strings.Join(names, " or ")
}
