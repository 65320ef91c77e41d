package inject

import (
	"slices"

	"github.com/kvaudit/kvaudit/layout"
)

// Replica faults: the TP ranks' copies of a replicated head (or of a
// Mamba2 B/C row) no longer agree.

// ReplicaDiverge flips bits of one replica copy other than the first.
const ReplicaDiverge Kind = "replica-diverge"

var replicaDiverge = kindDef{
	kind:        ReplicaDiverge,
	models:      "one TP rank's copy of a replicated head (or Mamba2 B/C row) differs",
	detector:    DetectChecksum,
	everyReader: true,
	plan:        dumpPlan((*planner).replicaDiverge),
}

// laterReplica accepts the caches of a replicated head or row other than
// its first copy.
func laterReplica(c cache) bool { return c.View.Replicas > 1 && c.View.ReplicaIndex >= 1 }

// replicaDiverge flips bits of a later copy of a replicated head or state
// row. It picks the group first, so hybrids exercise attention heads and
// state rows alike.
func (p *planner) replicaDiverge() error {
	var groups []int
	for _, gid := range p.ranks.GroupIDs() {
		if len(p.filterCaches(gid, laterReplica)) > 0 && (p.opts.Target.Group == nil || *p.opts.Target.Group == gid) {
			groups = append(groups, gid)
		}
	}
	if len(groups) == 0 {
		return p.na("the side holds no replicated head or state row (replicas > 1) to diverge")
	}
	slices.Sort(groups)
	var pls []place
	state := false
	for _, perm := range p.rng.Perm(len(groups)) {
		gid := groups[perm]
		isState := p.ranks.Group(gid).Kind == layout.KindMamba
		pls = p.places(isState, true, func(pl place) bool { return pl.g.ID == gid })
		if len(pls) > 0 {
			state = isState
			break
		}
	}
	return p.flipCell(pls, state, laterReplica)
}
