package kernels

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
)

// What the cpu engine recomputes of each answer of the runner: a sample
// of the output slots of host-resident rows, drawn at random (the runner
// cannot tell which), and every one whose values are all zero (what a
// runner that computes nothing answers, and what makes a corrupted
// consumer "verify" against a producer that is all zeros too). The rows
// of a slot that lie in device memory (cuda_ipc), which only the runner
// can read, are summed into an output slot of their own (splitDevice), so
// that the host-resident rows of every slot can be recomputed, whatever
// other layers the slot has.
const (
	// DefaultSampleMin and DefaultSampleFraction size the default sample
	// of a request: DefaultSampleMin slots, or one in
	// DefaultSampleFraction of its host slots when that is more, so that
	// a single wrong slot is caught with probability at least
	// 1/DefaultSampleFraction (every slot, of a request of at most
	// DefaultSampleMin slots). RunnerOptions.Check sets another size.
	DefaultSampleMin      = 64
	DefaultSampleFraction = 8
)

// CheckAll is the RunnerOptions.Check that recomputes every host slot.
const CheckAll = -1

// sampleSize is the slots of hosts host slots to recompute under check
// (RunnerOptions.Check): all of them for CheckAll, check itself when
// positive, the default otherwise.
func sampleSize(check, hosts int) int {
	switch {
	case check == CheckAll:
		return hosts
	case check > 0:
		return min(check, hosts)
	}
	return min(hosts, max(DefaultSampleMin, (hosts+DefaultSampleFraction-1)/DefaultSampleFraction))
}

// sampleName is RunnerOptions.Check as EngineCheck.Sample says it.
func sampleName(check int) string {
	switch {
	case check == CheckAll:
		return "all"
	case check > 0:
		return strconv.Itoa(check)
	}
	return "default"
}

// splitDevice returns the plan the runner is sent for p: p's rows, those
// in device memory moved to output slots past p.Outputs, one per slot
// they add to (dev[i] is the slot of p that slot p.Outputs+i adds to).
// Every slot below p.Outputs then sums host-resident rows only.
func splitDevice(p *ckplan.Plan) (q *ckplan.Plan, dev []int) {
	c := *p
	c.Tasks = make([]ckplan.Task, len(p.Tasks))
	moved := map[int]int{}
	for i, t := range p.Tasks {
		c.Tasks[i] = t
		if t.Cache.Cells.Device == nil {
			continue
		}
		rows := make([]ckplan.Row, len(t.Rows))
		for j, row := range t.Rows {
			d, ok := moved[row.Out]
			if !ok {
				d = len(dev)
				moved[row.Out] = d
				dev = append(dev, row.Out)
			}
			row.Out = p.Outputs + d
			rows[j] = row
		}
		c.Tasks[i].Rows = rows
	}
	c.Outputs = p.Outputs + len(dev)
	return &c, dev
}

// checkResults recomputes a sample of the host slots (below hosts) of an
// answer got to plan q (splitDevice's) with the cpu engine
// (checksum.Fast) and compares every value the runner gave for them; got
// holds the runner's values, len(got)/q.Outputs of them per slot, slot
// k's at k, q.Outputs+k, ... (so a second checksum in the answer is
// checked as the first). A difference is an *checksum.InternalError
// naming the runner: its results cannot be trusted. It adds what it
// checked to r's EngineCheck.
func (r *Runner) checkResults(ctx context.Context, q *ckplan.Plan, got []uint64, hosts int) error {
	n := q.Outputs
	if n == 0 || len(got)%n != 0 {
		return nil
	}
	// The host slots some row adds to: the ones that can be recomputed.
	filled := make([]bool, n)
	for _, t := range q.Tasks {
		if t.Cache.Cells.Device == nil {
			for _, row := range t.Rows {
				filled[row.Out] = true
			}
		}
	}
	var cand []int
	for k := range hosts {
		if filled[k] {
			cand = append(cand, k)
		}
	}
	// Every all-zero slot, and a random sample of the others.
	pick := make([]bool, n)
	for _, k := range cand {
		pick[k] = true
	}
	for i, v := range got {
		if v != 0 {
			pick[i%n] = false
		}
	}
	want := sampleSize(r.check, len(cand))
	for _, i := range rand.Perm(len(cand))[:want] {
		pick[cand[i]] = true
	}
	checked := 0
	for _, k := range cand {
		if pick[k] {
			checked++
		}
	}
	r.noteCheck(len(cand), checked, want, n-hosts)
	c := *q
	c.Slopes, c.Mix, c.Progress, c.Tasks = false, false, nil, nil
	for _, t := range q.Tasks {
		if t.Cache.Cells.Device != nil {
			continue
		}
		var rows []ckplan.Row
		for _, row := range t.Rows {
			if pick[row.Out] {
				rows = append(rows, row)
			}
		}
		if len(rows) > 0 {
			c.Tasks = append(c.Tasks, ckplan.Task{Cache: t.Cache, Rows: rows})
		}
	}
	if len(c.Tasks) == 0 {
		return nil
	}
	recomputed := make([]uint64, len(got))
	if err := (checksum.Fast{}).Run(ctx, &c, recomputed); err != nil {
		return fmt.Errorf("cuda engine: checking %s's results with the cpu engine: %w", r.path, err)
	}
	for i, v := range got {
		if k := i % n; pick[k] && v != recomputed[i] {
			return checksum.Internalf("cuda engine: %s answered %#x for %s of %q, the cpu engine computes %#x: the runner's results cannot be trusted (use --engine cpu, and reinstall or report the runner)",
				r.path, v, slotName(q, k), q.Dump.Path, recomputed[i])
		}
	}
	return nil
}

// noteCheck adds one request's check to r's EngineCheck: hosts host
// slots, checked of them recomputed, sampled of them drawn at random,
// device parts unchecked.
func (r *Runner) noteCheck(hosts, checked, sampled, device int) {
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	c := &r.checked
	if c.Requests == 0 {
		c.CatchProbability = 1
	}
	c.Requests++
	c.HostSlots += hosts
	c.Checked += checked
	c.DeviceSlots += device
	if hosts > 0 {
		c.CatchProbability = min(c.CatchProbability, float64(sampled)/float64(hosts))
	}
}

// Checked implements checksum.CheckedEngine: what the cpu engine
// recomputed of the runner's answers so far.
func (r *Runner) Checked() checksum.EngineCheck {
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	c := r.checked
	c.Engine, c.Sample, c.Trusted = r.Name(), sampleName(r.check), r.trust
	if c.Requests == 0 {
		c.CatchProbability = 1
	}
	return c
}

// slotName names output slot k of p by the first row adding to it.
func slotName(p *ckplan.Plan, k int) string {
	for _, t := range p.Tasks {
		for _, row := range t.Rows {
			if row.Out == k {
				return fmt.Sprintf("output %d (block %d from token %d, layer %q)", k, row.Block, row.FirstToken, t.Cache.Layer.Name)
			}
		}
	}
	return fmt.Sprintf("output %d", k)
}
