package kernels

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/kvaudit/kvaudit/checksum"
)

// What the cpu engine recomputes of each answer of the runner: at least
// checkMinSlots output slots, or one in checkFraction of them, drawn at
// random (the runner cannot tell which), and every slot whose values are
// all zero (what a runner that computes nothing answers, and what makes a
// corrupted consumer "verify" against a producer that is all zeros too).
const (
	checkMinSlots = 32
	checkFraction = 64
)

// checkResults recomputes a sample of the output slots of an answer got
// to plan p with the cpu engine (checksum.Fast) and compares every value
// the runner gave for them; got holds the runner's values, len(got)/
// p.Outputs of them per slot, slot k's at k, p.Outputs+k, ... (so a second
// checksum in the answer is checked as the first). Rows in device memory
// (cuda_ipc), which only the runner can read, are not recomputed, nor are
// the slots they add to. A difference is an *checksum.InternalError naming
// the runner: its results cannot be trusted.
func (r *Runner) checkResults(ctx context.Context, p *checksum.Plan, got []uint64) error {
	n := p.Outputs
	if n == 0 || len(got)%n != 0 {
		return nil
	}
	// Every all-zero slot, and a random sample of the others.
	pick := make([]bool, n)
	for k := range pick {
		pick[k] = true
	}
	for i, v := range got {
		if v != 0 {
			pick[i%n] = false
		}
	}
	if want := max(checkMinSlots, n/checkFraction); want >= n {
		for k := range pick {
			pick[k] = true
		}
	} else {
		for _, k := range rand.Perm(n)[:want] {
			pick[k] = true
		}
	}
	// A slot is recomputed only when every row adding to it is on the host.
	for _, t := range p.Tasks {
		if t.Cache.Cells.Device == nil {
			continue
		}
		for _, row := range t.Rows {
			pick[row.Out] = false
		}
	}
	q := *p
	q.Slopes, q.Mix, q.Progress, q.Tasks = false, false, nil, nil
	for _, t := range p.Tasks {
		var rows []checksum.Row
		for _, row := range t.Rows {
			if pick[row.Out] {
				rows = append(rows, row)
			}
		}
		if len(rows) > 0 {
			q.Tasks = append(q.Tasks, checksum.Task{Cache: t.Cache, Rows: rows})
		}
	}
	if len(q.Tasks) == 0 {
		return nil
	}
	want := make([]uint64, len(got))
	if err := (checksum.Fast{}).Run(ctx, &q, want); err != nil {
		return fmt.Errorf("cuda engine: checking %s's results with the cpu engine: %w", r.path, err)
	}
	for i, v := range got {
		if k := i % n; pick[k] && v != want[i] {
			return checksum.Internalf("cuda engine: %s answered %#x for %s of %q, the cpu engine computes %#x: the runner's results cannot be trusted (use --engine cpu, and reinstall or report the runner)",
				r.path, v, slotName(p, k), p.Dump.Path, want[i])
		}
	}
	return nil
}

// slotName names output slot k of p by the first row adding to it.
func slotName(p *checksum.Plan, k int) string {
	for _, t := range p.Tasks {
		for _, row := range t.Rows {
			if row.Out == k {
				return fmt.Sprintf("output %d (block %d from token %d, layer %q)", k, row.Block, row.FirstToken, t.Cache.Layer.Name)
			}
		}
	}
	return fmt.Sprintf("output %d", k)
}
