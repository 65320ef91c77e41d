package checksum

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

// Fast is the CPU engine. It cuts the plan into chunks of (cache, rows in
// block order) sized to the data, checksums them on Threads goroutines, and
// within a block walks the cache tensor in memory order, adding each
// contiguous run of bytes into per-head accumulators with the
// addition-only A/B sums of docs/spec.md §1 (several independent lanes).
// It gives the kernel no hint on how it reads the mapped files: with
// MADV_SEQUENTIAL on every task's range (as it did) a warm TP 8 Llama side
// took 3.6 times the page faults and twice the system time, and a cold
// one 1.2-1.4 times as long (Linux 6.18, ext4). Its allocations depend on
// the plan's size, never on the number of blocks done, and its results
// are bit-identical to Reference.
type Fast struct {
	// Threads is the number of goroutines; 0 means GOMAXPROCS.
	Threads int
	// ChunkBytes is the cell bytes of one unit of work handed to a
	// goroutine; 0 sizes chunks to the plan (between 256 KiB and 4 MiB,
	// at least 8 per thread when the plan is large enough).
	ChunkBytes int64
}

// Name returns "cpu".
func (Fast) Name() string { return "cpu" }

// Slopes returns true: Fast fills ckplan.Plan.Slopes from the sums it forms
// anyway (the slope is P times the weighted plain sum X of block).
func (Fast) Slopes() bool { return true }

// Mixes returns true: Fast fills ckplan.Plan.Mix in the same pass (the mix check
// of docs/spec.md §14, fused with the A/B sums in the SIMD kernel).
func (Fast) Mixes() bool { return true }

const (
	minChunk = 256 << 10
	maxChunk = 4 << 20
)

// chunk is a unit of work: rows order[begin:end] of one task.
type chunk struct {
	task       int32
	begin, end int32
	bytes      int64
}

// job is one task prepared for the walk: its rows in block order and how
// to walk its tensor.
type job struct {
	task  *ckplan.Task
	order []int32 // row indices sorted by block id
	walk  *walk
	// plan is the task's plan and pi its index among runPlans' plans
	// (and their outputs).
	plan *ckplan.Plan
	pi   int
}

// Run implements Engine.
func (f Fast) Run(ctx context.Context, p *ckplan.Plan, out []uint64) error {
	return f.runPlans(ctx, []*ckplan.Plan{p}, [][]uint64{out})
}

// runPlans runs several plans (the ranks of a side) as one piece of work:
// out[i] is plans[i]'s output. The threads take chunks of any plan, so
// that no thread waits at the end of one rank while another finishes it.
func (f Fast) runPlans(ctx context.Context, plans []*ckplan.Plan, outs [][]uint64) error {
	for _, p := range plans {
		if err := deviceCheck("cpu", p); err != nil {
			return err
		}
	}
	threads := f.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	n := 0
	for _, p := range plans {
		n += len(p.Tasks)
	}
	jobs := make([]job, 0, n)
	var total int64
	maxHeads := 0
	for pi, p := range plans {
		for i := range p.Tasks {
			t := &p.Tasks[i]
			var order []int32
			if i > 0 && sameBlocks(t.Rows, p.Tasks[i-1].Rows) {
				order = jobs[len(jobs)-1].order // the caches of a group share their rows' blocks
			} else {
				order = blockOrder(t.Rows)
			}
			jobs = append(jobs, job{task: t, order: order, walk: newWalk(t.Cache, p.MixKey), plan: p, pi: pi})
			total += int64(len(t.Rows)) * jobs[len(jobs)-1].walk.rowBytes
			maxHeads = max(maxHeads, t.Cache.Cells.Heads)
		}
	}
	size := f.ChunkBytes
	if size <= 0 {
		size = min(max(total/int64(threads*8), minChunk), maxChunk)
	}
	cs := chunks(jobs, size)
	if len(cs) == 0 {
		return ctx.Err()
	}
	threads = min(threads, len(cs))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, threads)
	for w := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				// A panic here would end the process with Go's exit
				// status 2, which means "unverified": make it an
				// internal error the caller reports as such.
				if r := recover(); r != nil {
					errs[w] = Recovered("checksum worker", r)
					next.Store(int64(len(cs)))
				}
			}()
			s := newScratch(maxHeads)
			// The worker's sums, plan by plan (made when the worker first
			// takes a chunk of the plan), added to the plan's output once
			// it is done: no atomic add per row (a state block's row is a
			// few hundred bytes).
			locals := make([][]uint64, len(plans))
			defer func() {
				for pi, local := range locals {
					out := outs[pi]
					for i, v := range local {
						if v != 0 {
							atomic.AddUint64(&out[i], v)
						}
					}
				}
			}()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cs) || ctx.Err() != nil {
					return
				}
				c := &cs[i]
				j := &jobs[c.task]
				local := locals[j.pi]
				if local == nil {
					local = make([]uint64, len(outs[j.pi]))
					locals[j.pi] = local
				}
				err := layout.Guard(j.task.Cache.Cells.File, func() error {
					s.chunk(j, c, local, j.plan)
					return nil
				})
				if err != nil {
					errs[w] = err
					next.Store(int64(len(cs))) // stop the others
					return
				}
				if j.plan.Progress != nil {
					j.plan.Progress(c.bytes)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// blockOrder returns the indices of rows sorted by block id (stable), so
// that a chunk reads the tensor front to back.
func blockOrder(rows []ckplan.Row) []int32 {
	order := make([]int32, len(rows))
	for i := range order {
		order[i] = int32(i)
	}
	if slices.IsSortedFunc(rows, func(a, b ckplan.Row) int { return a.Block - b.Block }) {
		return order
	}
	slices.SortStableFunc(order, func(a, b int32) int { return rows[a].Block - rows[b].Block })
	return order
}

// sameBlocks says whether two tasks' rows name the same blocks in the same
// order (then they share one block order).
func sameBlocks(a, b []ckplan.Row) bool {
	return sameRows(a, b) || slices.EqualFunc(a, b, func(x, y ckplan.Row) bool { return x.Block == y.Block })
}

// sameRows says whether two tasks share one Rows slice (NewPlan gives the
// caches of a group with one replica key the same rows).
func sameRows(a, b []ckplan.Row) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}

// chunks cuts every job's ordered rows into ranges of about size bytes.
// It allocates once, whatever the number of chunks.
func chunks(jobs []job, size int64) []chunk {
	each := func(emit func(chunk)) {
		for ti := range jobs {
			j := &jobs[ti]
			c := chunk{task: int32(ti)}
			for i, ri := range j.order {
				c.bytes += int64(j.task.Rows[ri].Valid) * j.walk.tokenBytes
				if c.bytes >= size || i == len(j.order)-1 {
					c.end = int32(i + 1)
					emit(c)
					c = chunk{task: int32(ti), begin: int32(i + 1)}
				}
			}
		}
	}
	n := 0
	each(func(chunk) { n++ })
	cs := make([]chunk, 0, n)
	each(func(c chunk) { cs = append(cs, c) })
	return cs
}
