package side

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

// mergeError is a set of records that do not belong together.
type mergeError struct{ Msg string }

func (e *mergeError) Error() string { return "merging records: " + e.Msg }

// Merge sums the records of one side's ranks into whole-model checks. The
// records must come from one deployment (equal tp_size and pp_size, no rank
// twice, agreeing on groups and on each request's tokens and blocks). With
// fewer than tp_size*pp_size records every request is unverified
// (ReasonNotEveryWorker). The checks may share memory with the records'
// values (a check that only one rank's one replica key makes up is that
// record's Values.Flat, never copied): neither is changed afterwards.
func Merge(records []*wire.Record) (*Checks, error) {
	if len(records) == 0 {
		return nil, &mergeError{"no records"}
	}
	recs := slices.Clone(records)
	slices.SortFunc(recs, func(a, b *wire.Record) int {
		return cmp.Or(cmp.Compare(a.PPRank, b.PPRank), cmp.Compare(a.TPRank, b.TPRank))
	})
	c := &Checks{TPSize: recs[0].TPSize, PPSize: recs[0].PPSize, Skipped: map[int]string{}}
	for i, r := range recs {
		if r.TPSize != c.TPSize || r.PPSize != c.PPSize {
			return nil, &mergeError{fmt.Sprintf("%q is tp_size %d x pp_size %d, %q is %d x %d", r.Source, r.TPSize, r.PPSize, recs[0].Source, c.TPSize, c.PPSize)}
		}
		if i > 0 && recs[i-1].PPRank == r.PPRank && recs[i-1].TPRank == r.TPRank {
			return nil, &mergeError{fmt.Sprintf("rank pp %d tp %d reported twice (%q and %q)", r.PPRank, r.TPRank, recs[i-1].Source, r.Source)}
		}
	}
	c.Complete = len(recs) == c.TPSize*c.PPSize
	if !c.Complete {
		c.Missing = missingRanks(recs, c.TPSize, c.PPSize)
	}
	info, err := mergeGroups(recs, c)
	if err != nil {
		return nil, err
	}
	if err := mergeRequests(recs, c, info); err != nil {
		return nil, err
	}
	return c, nil
}

// missingRanks names the ranks of a tp x pp deployment that no record
// is of: at most 8, then "...".
func missingRanks(recs []*wire.Record, tp, pp int) []string {
	have := map[[2]int]bool{}
	for _, r := range recs {
		have[[2]int{r.PPRank, r.TPRank}] = true
	}
	var missing []string
	for p := range pp {
		for t := range tp {
			if have[[2]int{p, t}] {
				continue
			}
			if len(missing) == 8 {
				return append(missing, "...")
			}
			name := fmt.Sprintf("tp %d of %d", t, tp)
			if pp > 1 {
				name += fmt.Sprintf(", pp %d of %d", p, pp)
			}
			missing = append(missing, name)
		}
	}
	return missing
}

// mergeGroups fills c's groups, their fingerprints summed over PP stages
// (one TP rank per stage), and the groups some rank skipped; the records
// must agree on each group's kind and block size.
func mergeGroups(recs []*wire.Record, c *Checks) (map[int]*GroupInfo, error) {
	info := map[int]*GroupInfo{}
	stageDone := map[[2]int]bool{} // (pp stage, group) counted
	for _, r := range recs {
		for _, g := range r.Groups {
			gi := info[g.ID]
			if gi == nil {
				gi = &GroupInfo{ID: g.ID, Kind: g.Kind, BlockSize: g.BlockSize}
				info[g.ID] = gi
			}
			// A PP stage holding none of the group's layers cannot say
			// whether its states are split: the stages that hold them do.
			gi.SplitLess = gi.SplitLess || g.SplitLess
			if gi.Kind != g.Kind || gi.BlockSize != g.BlockSize {
				return nil, &mergeError{fmt.Sprintf("group %d is %s with block size %d in %q, %s with %d elsewhere", g.ID, g.Kind, g.BlockSize, r.Source, gi.Kind, gi.BlockSize)}
			}
			if !stageDone[[2]int{r.PPRank, g.ID}] {
				stageDone[[2]int{r.PPRank, g.ID}] = true
				gi.Fingerprint += uint64(g.Fingerprint)
				gi.FingerprintFlat += uint64(g.FingerprintFlat)
			}
		}
		for k, reason := range r.SkippedGroups {
			id, _ := strconv.Atoi(k) // validated
			if _, ok := c.Skipped[id]; !ok {
				c.Skipped[id] = reason
			}
		}
	}
	for _, gi := range info {
		c.Groups = append(c.Groups, *gi)
	}
	slices.SortFunc(c.Groups, func(a, b GroupInfo) int { return cmp.Compare(a.ID, b.ID) })
	return info, nil
}

// mergeRequests sums each request's values over the ranks into c's
// requests, in the order the lowest rank lists them. The records must
// agree on each request's tokens and on the positions of each group.
func mergeRequests(recs []*wire.Record, c *Checks, info map[int]*GroupInfo) error {
	type partial struct {
		rc      *RequestChecks
		ranks   int
		groups  map[int]*groupSum
		ordered []int
	}
	reqs := map[string]*partial{}
	var order []string
	for _, r := range recs {
		for _, rr := range r.Requests {
			p := reqs[rr.ID]
			if p == nil {
				p = &partial{rc: &RequestChecks{
					ID: rr.ID, ProducerID: rr.ProducerID, NumTokens: rr.NumTokens,
					NumLocalComputedTokens: rr.NumLocalComputedTokens, TPSize: c.TPSize,
				}, groups: map[int]*groupSum{}}
				reqs[rr.ID] = p
				order = append(order, rr.ID)
			}
			if p.rc.NumTokens != rr.NumTokens || p.rc.NumLocalComputedTokens != rr.NumLocalComputedTokens {
				return &mergeError{fmt.Sprintf("request %q: %q says %d tokens (%d local), other ranks %d (%d)", rr.ID, r.Source, rr.NumTokens, rr.NumLocalComputedTokens, p.rc.NumTokens, p.rc.NumLocalComputedTokens)}
			}
			p.ranks++
			for _, g := range rr.Groups {
				if _, skipped := c.Skipped[g.ID]; skipped {
					continue
				}
				s := p.groups[g.ID]
				if s == nil {
					s = &groupSum{start: g.Start, n: g.Values.Len(), sums: map[[2]int][]uint64{}, borrowed: map[[2]int]bool{}}
					p.groups[g.ID] = s
					p.ordered = append(p.ordered, g.ID)
				}
				if s.start != g.Start || s.n != g.Values.Len() {
					return &mergeError{fmt.Sprintf("request %q group %d: %q checksums positions %d..%d, other ranks %d..%d", rr.ID, g.ID, r.Source, g.Start, g.Start+g.Values.Len()-1, s.start, s.start+s.n-1)}
				}
				s.add(g)
			}
		}
	}
	for _, id := range order {
		p := reqs[id]
		if p.ranks < c.TPSize*c.PPSize {
			p.rc.Unverified = append(p.rc.Unverified, ReasonNotEveryWorker)
		}
		slices.Sort(p.ordered)
		for _, gid := range p.ordered {
			gi := info[gid]
			gc := p.groups[gid].checks()
			gc.ID, gc.Kind, gc.BlockSize = gid, gi.Kind, gi.BlockSize
			gc.Fingerprint, gc.FingerprintFlat, gc.HasFlat = gi.Fingerprint, gi.FingerprintFlat, true
			gc.SplitLess = gi.SplitLess
			p.rc.Groups = append(p.rc.Groups, gc)
		}
		c.Requests = append(c.Requests, p.rc)
	}
	return nil
}

// groupSum accumulates one request group's values per replica key.
type groupSum struct {
	start, n int
	sums     map[[2]int][]uint64
	// block sums ValuesBlock alike, and mix the mix check (Mix); each is
	// nil once a rank did not give it (noBlock, noMix).
	block, mix     map[[2]int][]uint64
	noBlock, noMix bool
	// borrowed, borrowedBlock and borrowedMix are the sums of sums, block
	// and mix that are still one record's own values, copied before
	// another rank adds to them.
	borrowed, borrowedBlock, borrowedMix map[[2]int]bool
}

func (s *groupSum) add(g wire.RecordRequestGroup) {
	optional := func(sums *map[[2]int][]uint64, borrowed *map[[2]int]bool, none *bool, have bool) {
		if !have {
			*none, *sums, *borrowed = true, nil, nil
		} else if !*none && *sums == nil {
			*sums, *borrowed = map[[2]int][]uint64{}, map[[2]int]bool{}
		}
	}
	optional(&s.block, &s.borrowedBlock, &s.noBlock, !g.ValuesBlock.IsZero())
	optional(&s.mix, &s.borrowedMix, &s.noMix, !g.Mix.IsZero())
	for k, key := range g.ReplicaKeys {
		addColumn(s.sums, s.borrowed, s.n, key, g.Values, k)
		if s.block != nil {
			addColumn(s.block, s.borrowedBlock, s.n, key, g.ValuesBlock, k)
		}
		if s.mix != nil {
			addColumn(s.mix, s.borrowedMix, s.n, key, g.Mix, k)
		}
	}
}

// addColumn adds column k of vals (one row per block position) to the n
// sums under key. The first values under a key, when there is one replica
// key per position, are kept as they are (their Flat, marked borrowed),
// not copied: a record of millions of positions is not held twice. A
// borrowed sum is copied before anything is added to it.
func addColumn(sums map[[2]int][]uint64, borrowed map[[2]int]bool, n int, key [2]int, vals wire.Values, k int) {
	v := sums[key]
	switch {
	case v == nil && vals.Keys() == 1:
		sums[key], borrowed[key] = vals.Flat(), true
		return
	case v == nil:
		v = make([]uint64, n)
		sums[key] = v
	case borrowed[key]:
		v = slices.Clone(v)
		sums[key] = v
		delete(borrowed, key)
	}
	flat, keys := vals.Flat(), vals.Keys()
	for i := range v {
		v[i] += flat[i*keys+k]
	}
}

// checks forms check k = sum over replica counts R of the sum under key
// (R, k mod R), for k below the largest R (docs/spec.md §2).
func (s *groupSum) checks() *GroupChecks {
	gc := &GroupChecks{Start: s.start}
	counts := map[int]bool{}
	maxR := 1
	for key := range s.sums {
		counts[key[0]] = true
		maxR = max(maxR, key[0])
		gc.Keys = append(gc.Keys, key)
	}
	slices.SortFunc(gc.Keys, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	form := func(sums map[[2]int][]uint64) [][]uint64 {
		checks := make([][]uint64, maxR)
		if len(counts) == 1 && len(sums) == maxR {
			// One replica count R and all its keys (R, 0..R-1): check k
			// is the sum under (R, k) as it is.
			for k := range maxR {
				checks[k] = sums[[2]int{maxR, k}]
			}
			return checks
		}
		for k := range maxR {
			check := make([]uint64, s.n)
			for R := range counts {
				v, ok := sums[[2]int{R, k % R}]
				if !ok {
					gc.MissingReplica = true
					continue
				}
				for i := range check {
					check[i] += v[i]
				}
			}
			checks[k] = check
		}
		return checks
	}
	gc.Checks = form(s.sums)
	if s.block != nil {
		gc.ChecksBlock = form(s.block)
	}
	if s.mix != nil {
		gc.ChecksMix = form(s.mix)
	}
	return gc
}

// Compute checksums opened dumps of one side (its ranks, or some of them)
// with opts and merges them into whole-model checks (Merge), keeping the
// requests of opts.Requests, in their order, when set.
func Compute(ctx context.Context, dumps []*layout.Dump, opts checksum.Options) (*Checks, error) {
	recs, err := checksum.Records(ctx, dumps, opts)
	if err != nil {
		return nil, err
	}
	c, err := Merge(recs)
	if err != nil {
		return nil, err
	}
	if len(opts.Requests) > 0 {
		if err := c.Select(opts.Requests); err != nil {
			return nil, err
		}
	}
	return c, nil
}
