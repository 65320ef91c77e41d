package bench

import (
	"cmp"
	"context"
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

// Work is the checksum work of some plans cut into units of about the same
// size, with the bytes each unit covers as contiguous extents in memory
// order. It is what the baselines (plain read, CRC32C, xxh3) and the
// reference sample run over, so that they read exactly the bytes the
// checksum covers.
type Work struct {
	units []unit
	// Bytes is the number of bytes the checksum covers: every valid
	// token's cells.
	Bytes int64
	// rings are Copy's destinations, one per worker, outside the heap.
	rings [][]byte
}

// unit is a range of rows of one task, in block order.
type unit struct {
	plan  *ckplan.Plan
	cache *layout.LayerView
	rows  []ckplan.Row
	bytes int64
	shape *shape
}

// shape is where a cache's cells lie in one kernel row: for n valid tokens
// (1..KernelTokens), the contiguous extents they cover, relative to the
// row's start, sorted and merged.
type shape struct {
	view    *layout.CellView
	extents [][]extent // by n; nil when no row needs it
}

type extent struct {
	off int64
	len int64
}

// DefaultUnitBytes is the size of a unit of work when none is given: the
// fast engine's default chunk.
const DefaultUnitBytes = 4 << 20

// NewWork cuts the plans' tasks into units of about unitBytes (0 means
// DefaultUnitBytes) and works out their extents. Plans reading device
// memory are not supported.
func NewWork(plans []*ckplan.Plan, unitBytes int64) *Work {
	if unitBytes <= 0 {
		unitBytes = DefaultUnitBytes
	}
	w := &Work{}
	shapes := map[*layout.LayerView]*shape{}
	for _, p := range plans {
		for ti := range p.Tasks {
			t := &p.Tasks[ti]
			v := &t.Cache.Cells
			sh := shapes[t.Cache]
			if sh == nil {
				sh = &shape{view: v, extents: make([][]extent, v.KernelTokens+1)}
				shapes[t.Cache] = sh
			}
			per := int64(v.Heads) * int64(v.CellBytes)
			// Rows in block order, so that the work reads each tensor
			// front to back, as fast as memory allows.
			rows := slices.Clone(t.Rows)
			slices.SortStableFunc(rows, func(a, b ckplan.Row) int { return a.Block - b.Block })
			u := unit{plan: p, cache: t.Cache, shape: sh}
			begin := 0
			for i, r := range rows {
				for kr := 0; kr < v.KernelBlocks; kr++ {
					n := min(v.KernelTokens, r.Valid-kr*v.KernelTokens)
					if n <= 0 {
						break
					}
					if sh.extents[n] == nil {
						sh.extents[n] = extents(v, n)
					}
				}
				u.bytes += int64(r.Valid) * per
				if u.bytes >= unitBytes || i == len(rows)-1 {
					u.rows = rows[begin : i+1]
					w.units = append(w.units, u)
					w.Bytes += u.bytes
					begin = i + 1
					u = unit{plan: p, cache: t.Cache, shape: sh}
				}
			}
		}
	}
	return w
}

// extents returns the bytes the cells of n tokens of one kernel row cover,
// relative to the row, as sorted contiguous extents.
func extents(v *layout.CellView, n int) []extent {
	var es []extent
	for t := range n {
		for h := range v.Heads {
			for _, r := range v.Runs {
				es = append(es, extent{int64(t)*v.TokenStride + int64(h)*v.HeadStride + r.Offset, int64(r.Len)})
			}
		}
	}
	slices.SortFunc(es, func(a, b extent) int { return cmp.Compare(a.off, b.off) })
	out := es[:0]
	for _, e := range es {
		if k := len(out) - 1; k >= 0 && out[k].off+out[k].len == e.off {
			out[k].len += e.len
			continue
		}
		out = append(out, e)
	}
	return slices.Clip(out)
}

// Units returns the number of units.
func (w *Work) Units() int { return len(w.units) }

// Sample returns the work of about bytes bytes taken from units spread
// evenly over w (at least one unit).
func (w *Work) Sample(bytes int64) *Work {
	if bytes >= w.Bytes || len(w.units) == 0 {
		return w
	}
	k := max(int(bytes*int64(len(w.units))/max(w.Bytes, 1)), 1)
	s := &Work{}
	for i := range k {
		u := w.units[i*len(w.units)/k]
		s.units = append(s.units, u)
		s.Bytes += u.bytes
	}
	return s
}

// Plans returns the units as plans, one per unit, for engines (the
// sample's own checksums, to compare engines on it).
func (w *Work) Plans() []*ckplan.Plan {
	ps := make([]*ckplan.Plan, len(w.units))
	for i, u := range w.units {
		ps[i] = &ckplan.Plan{Dump: u.plan.Dump, Outputs: u.plan.Outputs, Tasks: []ckplan.Task{{Cache: u.cache, Rows: u.rows}}}
	}
	return ps
}

// Each runs fn over every extent of the work on threads goroutines (0 means
// GOMAXPROCS), each inside layout.Guard; worker is the goroutine's index in
// 0..threads-1. A fault on mapped memory is returned as an error.
func (w *Work) Each(ctx context.Context, threads int, fn func(worker int, b []byte)) error {
	return w.EachUnit(ctx, threads, func(worker int, u *Unit) {
		u.Extents(func(b []byte) { fn(worker, b) })
	})
}

// Unit is one unit of work as EachUnit hands it out.
type Unit struct{ u *unit }

// Cache returns the unit's cache.
func (u *Unit) Cache() *layout.LayerView { return u.u.cache }

// Rows returns the unit's rows, in block order.
func (u *Unit) Rows() []ckplan.Row { return u.u.rows }

// Extents calls fn with every contiguous extent the unit's rows cover, in
// memory order within each kernel row.
func (u *Unit) Extents(fn func(b []byte)) {
	sh := u.u.shape
	v := sh.view
	data := v.Data
	for _, r := range u.Rows() {
		for kr := 0; kr < v.KernelBlocks; kr++ {
			n := min(v.KernelTokens, r.Valid-kr*v.KernelTokens)
			if n <= 0 {
				break
			}
			base := int64(r.Block*v.KernelBlocks+kr) * v.RowStride
			for _, e := range sh.extents[n] {
				fn(data[base+e.off : base+e.off+e.len])
			}
		}
	}
}

// EachUnit runs fn over every unit on threads goroutines (0 means
// GOMAXPROCS) that take units in turn, each inside layout.Guard.
func (w *Work) EachUnit(ctx context.Context, threads int, fn func(worker int, u *Unit)) error {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	threads = max(min(threads, len(w.units)), 1)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, threads)
	for worker := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(w.units) || ctx.Err() != nil {
					return
				}
				u := &Unit{&w.units[i]}
				err := layout.Guard(u.Cache().Cells.File, func() error {
					fn(worker, u)
					return nil
				})
				if err != nil {
					errs[worker] = err
					next.Store(int64(len(w.units))) // stop the others
					return
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

// lanes holds one accumulator per worker, each on its own cache line.
type lanes [][8]uint64

func newLanes(threads int) lanes {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return make(lanes, threads)
}

func (l lanes) sum() uint64 {
	var s uint64
	for i := range l {
		s += l[i][0]
	}
	return s
}

// Read is the plain read: the uint64 sum of every covered byte, read as
// little-endian 8-byte words where it can, vectorised (ReadSumVec). It is
// the practical limit of any checksum over the same bytes.
func (w *Work) Read(ctx context.Context, threads int) (uint64, error) {
	acc := newLanes(threads)
	err := w.Each(ctx, threads, func(worker int, b []byte) { acc[worker][0] += ReadSumVec(b) })
	return acc.sum(), err
}

// ReadScalar is Read with the scalar Go loop (ReadSum): the same sum, the
// baseline of kvaudit before the vectorised one.
func (w *Work) ReadScalar(ctx context.Context, threads int) (uint64, error) {
	acc := newLanes(threads)
	err := w.Each(ctx, threads, func(worker int, b []byte) { acc[worker][0] += ReadSum(b) })
	return acc.sum(), err
}

// copyRing is the bytes of each worker's destination in Copy.
const copyRing = 32 << 20

// Copy copies every covered extent into a buffer of its worker's
// (memmove, wrapping around a 32 MiB ring, larger than a last-level cache
// and outside the Go heap, kept from one call to the next): what memory
// bandwidth allows, reading the bytes and writing them once. It returns
// the number of bytes copied. It is not safe for concurrent calls.
func (w *Work) Copy(ctx context.Context, threads int) (uint64, error) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	for len(w.rings) < threads {
		w.rings = append(w.rings, offHeap(copyRing))
	}
	rings := w.rings
	at := make([]int, threads)
	acc := newLanes(threads)
	err := w.Each(ctx, threads, func(worker int, b []byte) {
		for len(b) > 0 {
			if at[worker] == copyRing {
				at[worker] = 0
			}
			n := copy(rings[worker][at[worker]:], b)
			at[worker] += n
			b = b[n:]
			acc[worker][0] += uint64(n)
		}
	})
	return acc.sum(), err
}

// castagnoli is the CRC32C table, made the first time a bench needs it
// (making it costs 0.2 ms at start-up, for every command).
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// CRC32C hashes every extent with CRC32C (hash/crc32, Castagnoli) and
// returns the sum of the hashes: the cost of a plain integrity check of the
// same bytes.
func (w *Work) CRC32C(ctx context.Context, threads int) (uint64, error) {
	acc := newLanes(threads)
	table := castagnoli()
	err := w.Each(ctx, threads, func(worker int, b []byte) { acc[worker][0] += uint64(crc32.Update(0, table, b)) })
	return acc.sum(), err
}

// XXH3 hashes every extent with xxh3 (64-bit) and returns the sum of the
// hashes.
func (w *Work) XXH3(ctx context.Context, threads int) (uint64, error) {
	acc := newLanes(threads)
	err := w.Each(ctx, threads, func(worker int, b []byte) { acc[worker][0] += xxh3.Hash(b) })
	return acc.sum(), err
}

// Reference runs checksum.ReferenceBlock over every row of the work and
// returns the sum of the results.
func (w *Work) Reference(ctx context.Context, threads int) (uint64, error) {
	acc := newLanes(threads)
	err := w.EachUnit(ctx, threads, func(worker int, u *Unit) {
		c := u.Cache()
		for _, r := range u.Rows() {
			acc[worker][0] += checksum.ReferenceBlock(c, r)
		}
	})
	return acc.sum(), err
}

// ReadSum returns the sum of b read as little-endian uint64 words, the
// bytes after the last whole word added one by one. It has eight
// independent accumulators so that it runs at the speed of loads.
func ReadSum(b []byte) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for len(b) >= 64 {
		s0 += binary.LittleEndian.Uint64(b[0:])
		s1 += binary.LittleEndian.Uint64(b[8:])
		s2 += binary.LittleEndian.Uint64(b[16:])
		s3 += binary.LittleEndian.Uint64(b[24:])
		s4 += binary.LittleEndian.Uint64(b[32:])
		s5 += binary.LittleEndian.Uint64(b[40:])
		s6 += binary.LittleEndian.Uint64(b[48:])
		s7 += binary.LittleEndian.Uint64(b[56:])
		b = b[64:]
	}
	for len(b) >= 8 {
		s0 += binary.LittleEndian.Uint64(b)
		b = b[8:]
	}
	for _, c := range b {
		s1 += uint64(c)
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}
