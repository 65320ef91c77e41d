package inject

import (
	"slices"

	"github.com/kvaudit/kvaudit/internal/dumpindex"
	"github.com/kvaudit/kvaudit/layout"
)

// ranks are the dumps a dump fault is planned on, indexed by rank: their
// requests, groups, caches and blocks, with what planning needs of them.
type ranks struct {
	*dumpindex.Index
	ids []string // request ids, the first rank's first
}

func newRanks(dumps []*layout.Dump) *ranks {
	r := &ranks{Index: dumpindex.New(dumps)}
	r.ids = r.RequestIDs()
	return r
}

// rankOf is the (pp, tp) rank of dump di.
func (r *ranks) rankOf(di int) Rank {
	pp, tp := r.Dumps[di].Rank()
	return Rank{PP: pp, TP: tp}
}

// cache is one distinct cache of a group on one rank.
type cache = dumpindex.RankCache

// maxReplicas is the number of checks of a group on the ranks.
func (r *ranks) maxReplicas(group int) int {
	n := 1
	for _, c := range r.Caches(group) {
		n = max(n, c.View.Replicas)
	}
	return n
}

// checks returns the checks that differ when the sums under keys change:
// check k sums key (R, k mod R) for every replica count R.
func (r *ranks) checks(group int, keys []layout.ReplicaKey) []int {
	out := []int{}
	for k := range r.maxReplicas(group) {
		if slices.ContainsFunc(keys, func(key layout.ReplicaKey) bool { return k%key.Replicas == key.Index }) {
			out = append(out, k)
		}
	}
	return out
}
