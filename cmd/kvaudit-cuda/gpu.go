//go:build cuda

package main

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kvaudit/kvaudit/internal/buildinfo"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/layout"
)

// gpu is the CUDA engine: kernels.Device on one GPU. All its methods run on
// the OS thread that created it (main locks it), which holds its context.
type gpu struct {
	dev   cu.Device
	ctx   cu.CUContext
	index int
	hello kernels.Hello
	mod   cu.Module
	fns   map[string]cu.Function

	// Two slots, each a pinned staging buffer, a device buffer of the same
	// size, a stream, and an event recorded once the slot's copy to the
	// device is done: batch n fills slot n%2 while the other slot's copy
	// and kernel run.
	streams   [2]cu.Stream
	copied    [2]cu.Event
	pinned    [2][]byte
	dbuf      [2]cu.DevicePtr
	slotBytes int64
	next      int

	// mode forces a load variant (tests).
	mode kernels.Mode
	// ipc holds the device tensors opened, by IPC handle (base64).
	ipc map[string]mapping
}

// mapping is an opened device allocation.
type mapping struct {
	ptr  cu.DevicePtr
	size int64
	own  bool // opened with ipcOpen (closed by close)
}

// tableAlign aligns the row table and data in a slot.
const tableAlign = 256

// newGPU takes device index's primary context (current on this thread) and
// loads the kernels, which the driver compiles for the device.
func newGPU(index int, slotBytes int64) (*gpu, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuDeviceGetCount: %w", err)
	}
	if index < 0 || index >= n {
		return nil, fmt.Errorf("device %d: this machine has %d CUDA devices", index, n)
	}
	g := &gpu{index: index, slotBytes: slotBytes, fns: map[string]cu.Function{}, ipc: map[string]mapping{}}
	if g.dev, err = cu.GetDevice(index); err != nil {
		return nil, fmt.Errorf("device %d: %w", index, err)
	}
	if g.ctx, err = g.dev.RetainPrimaryCtx(); err != nil {
		return nil, fmt.Errorf("device %d: primary context: %w", index, err)
	}
	if err := cu.SetCurrentContext(g.ctx); err != nil {
		return nil, fmt.Errorf("device %d: %w", index, err)
	}
	name, _ := g.dev.Name()
	major, minor, _ := g.dev.ComputeCapability()
	sms, _ := g.dev.Attribute(cu.MultiprocessorCount)
	mem, _ := g.dev.TotalMem()
	g.hello = kernels.Hello{
		Runner: "kvaudit-cuda", Version: buildinfo.Version(), Device: name, DeviceIndex: index,
		ComputeCapability: fmt.Sprintf("%d.%d", major, minor), Multiprocessors: sms,
		MemoryBytes: mem, DriverVersion: cu.Version(),
	}
	if g.mod, err = cu.LoadData(kernels.PTX); err != nil {
		return nil, fmt.Errorf("loading the kernels (PTX ISA 7.8 needs a CUDA driver of release 520 or newer): %w: %s", err, jitLog(kernels.PTX))
	}
	for _, name := range append([]string{kernels.EntryFill, kernels.EntryReadSum}, kernels.Entries...) {
		if g.fns[name], err = g.mod.Function(name); err != nil {
			return nil, fmt.Errorf("kernel %s: %w", name, err)
		}
	}
	for i := range g.streams {
		if g.streams[i], err = cu.MakeStream(cu.NonBlocking); err != nil {
			return nil, fmt.Errorf("stream: %w", err)
		}
		if g.copied[i], err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return nil, fmt.Errorf("event: %w", err)
		}
	}
	return g, nil
}

// Hello implements kernels.Device.
func (g *gpu) Hello() kernels.Hello { return g.hello }

// Name returns "cuda".
func (g *gpu) Name() string { return "cuda" }

// close releases what the gpu holds.
func (g *gpu) close() {
	cu.Synchronize()
	for i := range g.streams {
		memFreeHost(g.pinned[i])
		if g.dbuf[i] != 0 {
			cu.MemFree(g.dbuf[i])
		}
		g.streams[i].Destroy()
		cu.DestroyEvent(&g.copied[i])
	}
	for _, m := range g.ipc {
		if m.own {
			ipcClose(m.ptr)
		}
	}
	g.mod.Unload()
	g.dev.ReleasePrimaryCtx()
}

// ensureSlots makes both slots hold at least n bytes.
func (g *gpu) ensureSlots(n int64) error {
	n = max(n, g.slotBytes)
	for i := range g.pinned {
		if int64(len(g.pinned[i])) >= n {
			continue
		}
		if err := g.copied[i].Synchronize(); err != nil {
			return err
		}
		if err := g.streams[i].Synchronize(); err != nil {
			return fmt.Errorf("stream %d: %w", i, err)
		}
		memFreeHost(g.pinned[i])
		g.pinned[i] = nil
		if g.dbuf[i] != 0 {
			cu.MemFree(g.dbuf[i])
			g.dbuf[i] = 0
		}
		var err error
		if g.pinned[i], err = memAllocHost(n); err != nil {
			return fmt.Errorf("%d bytes of pinned host memory: %w", n, err)
		}
		if g.dbuf[i], err = cu.MemAlloc(n); err != nil {
			return fmt.Errorf("%d bytes of device memory: %w", n, err)
		}
	}
	return nil
}

// deviceTensor returns the device address of byte 0 of a cuda_ipc tensor,
// opening its allocation once, and checks that the tensor lies inside it.
func (g *gpu) deviceTensor(layer string, t *layout.DeviceTensor) (uint64, error) {
	m, ok := g.ipc[t.IPCHandle]
	if !ok {
		h, err := base64.StdEncoding.DecodeString(t.IPCHandle)
		if err != nil {
			return 0, fmt.Errorf("layer %q: cuda_ipc is not base64: %w", layer, err)
		}
		ptr, err := ipcOpen(h)
		if err != nil {
			return 0, fmt.Errorf("layer %q: %w (the exporting process must be alive, on this machine, and its handle must come from another process)", layer, err)
		}
		size, base, err := ptr.AddressRange()
		if err != nil {
			ipcClose(ptr)
			return 0, fmt.Errorf("layer %q: %w", layer, err)
		}
		m = mapping{ptr: ptr, size: size - int64(ptr-base), own: true}
		g.ipc[t.IPCHandle] = m
	}
	end, err := extent(t)
	if err != nil {
		return 0, fmt.Errorf("layer %q: %w", layer, err)
	}
	if t.Offset < 0 || t.Offset > m.size || end > m.size-t.Offset {
		return 0, fmt.Errorf("layer %q: a tensor of shape %v and strides %v (bytes) at offset %d needs %d bytes, the shared allocation holds %d", layer, t.Shape, t.Strides, t.Offset, end, m.size)
	}
	return uint64(m.ptr) + uint64(t.Offset), nil
}

// extent returns one past the last byte a strided tensor touches.
func extent(t *layout.DeviceTensor) (int64, error) {
	if len(t.Strides) != len(t.Shape) {
		return 0, fmt.Errorf("%d strides for %d dimensions", len(t.Strides), len(t.Shape))
	}
	end := int64(max(t.Dtype.Bits/8, 1))
	for i, n := range t.Shape {
		if n == 0 {
			return 0, nil
		}
		if t.Strides[i] < 0 || (t.Strides[i] > 0 && n-1 > (1<<62)/t.Strides[i]) {
			return 0, fmt.Errorf("stride %d of dimension %d overflows", t.Strides[i], i)
		}
		end += (n - 1) * t.Strides[i]
		if end > 1<<62 {
			return 0, errors.New("the tensor's extent overflows")
		}
	}
	return end, nil
}

// upload copies host values to a new device allocation.
func upload[T any](vals []T) (cu.DevicePtr, error) {
	n := int64(len(vals)) * int64(unsafe.Sizeof(*new(T)))
	p, err := cu.MemAlloc(max(n, 8))
	if err != nil {
		return 0, fmt.Errorf("cuMemAlloc(%d): %w", n, err)
	}
	if n > 0 {
		if err := cu.MemcpyHtoD(p, unsafe.Pointer(&vals[0]), n); err != nil {
			cu.MemFree(p)
			return 0, fmt.Errorf("cuMemcpyHtoD: %w", err)
		}
	}
	return p, nil
}

// launch starts the checksum kernel of k over nrows rows.
func (g *gpu) launch(k *kernels.Kernel, stream cu.Stream, data, rows cu.DevicePtr, nrows int, out, factors, offsets cu.DevicePtr) error {
	vals := []uint64{uint64(data), uint64(rows), uint64(nrows), uint64(out), uint64(factors), uint64(offsets)}
	for _, a := range k.Args() {
		vals = append(vals, uint64(a))
	}
	params := make([]unsafe.Pointer, len(vals))
	for i := range vals {
		params[i] = unsafe.Pointer(&vals[i])
	}
	grid := k.Grid(nrows)
	if grid == 0 {
		return nil
	}
	if err := g.fns[k.Entry()].Launch(int(grid), 1, 1, int(k.Threads), 1, 1, 0, stream, params); err != nil {
		return fmt.Errorf("launching %s (%d blocks of %d threads): %w", k.Entry(), grid, k.Threads, err)
	}
	return nil
}

// slotLayout places a batch in a slot: its row table, the job's factors
// and offsets, then (staged) its rows' bytes, each at a multiple of
// tableAlign. Everything a launch reads but device tensors travels in the
// slot's one copy, ordered on the slot's stream.
type slotLayout struct{ factors, offsets, data, end int64 }

func layoutSlot(job *kernels.Job, nrows int) slotLayout {
	var l slotLayout
	l.factors = roundUp(int64(nrows)*kernels.RowWords*8, tableAlign)
	l.offsets = l.factors + roundUp(int64(len(job.Factors))*8, tableAlign)
	l.data = l.offsets + roundUp(int64(len(job.Offsets))*8, tableAlign)
	l.end = l.data
	if !job.InPlace {
		l.end += int64(nrows) * job.RowBytes()
	}
	return l
}

// Run implements checksum.Engine: staged copies of the needed spans of
// mapped dumps, double-buffered on two streams, and device tensors read
// in place; every kernel adds to one output array on the device.
func (g *gpu) Run(ctx context.Context, p *ckplan.Plan, out []uint64) (err error) {
	if p.Outputs == 0 {
		return nil
	}
	dOut, err := cu.MemAlloc(int64(p.Outputs) * 8)
	if err != nil {
		return fmt.Errorf("cuMemAlloc(%d outputs): %w", p.Outputs, err)
	}
	defer func() {
		if serr := cu.Synchronize(); serr != nil && err == nil {
			err = fmt.Errorf("cuda: %w", serr)
		}
		cu.MemFree(dOut)
	}()
	// The memset runs on the legacy stream, which the slots' non-blocking
	// streams do not wait for: finish it first.
	if err := cu.MemsetD8(dOut, 0, int64(p.Outputs)*8); err != nil {
		return fmt.Errorf("cuMemsetD8: %w", err)
	}
	if err := cu.Synchronize(); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	for _, t := range p.Tasks {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := t.Cache
		opts := kernels.JobOptions{Mode: g.mode}
		var base uint64
		if dt := c.Cells.Device; dt != nil {
			if base, err = g.deviceTensor(c.Layer.Name, dt); err != nil {
				return err
			}
			opts.InPlace, opts.Base = true, base
		}
		job, err := kernels.NewJob(c, t.Rows, opts)
		if err != nil {
			return err
		}
		batches := job.Batches(g.slotBytes/8*7, int(g.slotBytes/8/(kernels.RowWords*8)))
		for _, b := range batches {
			rows := t.Rows[b[0]:b[1]]
			l := layoutSlot(job, len(rows))
			if err := g.ensureSlots(l.end); err != nil {
				return err
			}
			s := g.next
			g.next ^= 1
			if err := g.copied[s].Synchronize(); err != nil { // the slot's last copy is done
				return fmt.Errorf("cuda: %w", err)
			}
			if err := g.fill(job, rows, g.pinned[s][:l.end], l); err != nil {
				return err
			}
			if err := cu.MemcpyHtoDAsync(g.dbuf[s], unsafe.Pointer(&g.pinned[s][0]), l.end, g.streams[s]); err != nil {
				return fmt.Errorf("cuMemcpyHtoDAsync(%d bytes): %w", l.end, err)
			}
			if err := g.copied[s].Record(g.streams[s]); err != nil {
				return fmt.Errorf("cuEventRecord: %w", err)
			}
			d := g.dbuf[s]
			data := d + cu.DevicePtr(l.data)
			if job.InPlace {
				data = cu.DevicePtr(base)
			}
			if err := g.launch(&job.Kernel, g.streams[s], data, d, len(rows), dOut, d+cu.DevicePtr(l.factors), d+cu.DevicePtr(l.offsets)); err != nil {
				return err
			}
			if p.Progress != nil {
				p.Progress(job.ReadBytes(rows))
			}
		}
	}
	for i := range g.streams {
		if err := g.streams[i].Synchronize(); err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
	}
	res := make([]uint64, p.Outputs)
	if err := cu.MemcpyDtoH(unsafe.Pointer(&res[0]), dOut, int64(p.Outputs)*8); err != nil {
		return fmt.Errorf("cuMemcpyDtoH: %w", err)
	}
	for i, v := range res {
		out[i] += v
	}
	return nil
}

func roundUp(n, a int64) int64 { return (n + a - 1) / a * a }

// fill writes a batch into a pinned slot as layoutSlot places it: the row
// table, the factors and offsets and, for staged data, the rows' bytes,
// these with several goroutines at once (none calls CUDA).
func (g *gpu) fill(job *kernels.Job, rows []ckplan.Row, slot []byte, l slotLayout) error {
	table := make([]int64, len(rows)*kernels.RowWords)
	job.RowTable(table, rows)
	for i, v := range table {
		binary.LittleEndian.PutUint64(slot[i*8:], uint64(v))
	}
	for i, v := range job.Factors {
		binary.LittleEndian.PutUint64(slot[l.factors+int64(i)*8:], v)
	}
	for i, v := range job.Offsets {
		binary.LittleEndian.PutUint64(slot[l.offsets+int64(i)*8:], uint64(v))
	}
	if job.InPlace {
		return nil
	}
	data := slot[l.data:]
	workers := min(runtime.GOMAXPROCS(0), 8, len(rows))
	per := (len(rows) + workers - 1) / workers
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*per, min((w+1)*per, len(rows))
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = layout.Guard(job.Cache.Cells.File, func() error {
				return job.Fill(data[int64(lo)*job.RowBytes():], rows[lo:hi])
			})
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Bench implements kernels.Device: the kernel, a plain read and a copy of
// a cache allocated and filled on the device, timed with events.
func (g *gpu) Bench(ctx context.Context, req kernels.BenchRequest) (*kernels.BenchResult, error) {
	if req.Bytes <= 0 {
		req.Bytes = kernels.DefaultBenchBytes
	}
	reps := max(1, req.Reps)
	c, rows := kernels.BenchCache(req.Bytes)
	bytes := int64(len(rows)) * kernels.BenchSampleBytes
	res := &kernels.BenchResult{Device: g.hello.String(), Cache: kernels.BenchDescription(c), Bytes: bytes, Reps: reps}
	b := &benchCache{g: g, c: c, blocks: len(rows), bytes: bytes}
	defer b.free()
	if err := b.setUp(rows); err != nil {
		return nil, err
	}
	if err := b.time(ctx, reps, res); err != nil {
		return nil, err
	}
	if err := b.verify(res); err != nil {
		return nil, err
	}
	return res, nil
}

// benchFillSeed seeds the fill kernel's pattern of the bench's cache.
const benchFillSeed = 1

// benchCache is the bench's cache on the device: the cache (src, filled
// with the fill kernel's pattern), a copy target of the same size, the
// checksum kernel's job over it and its outputs.
type benchCache struct {
	g      *gpu
	c      *layout.LayerView
	blocks int
	bytes  int64
	frees  []cu.DevicePtr
	// src is the cache, dst the copy's target; sum the read kernel's
	// output, dOut the checksum kernel's (one per block).
	src, dst, sum, dOut      cu.DevicePtr
	job                      *kernels.Job
	factors, offsets, dTable cu.DevicePtr
}

// free waits for the device and frees what setUp allocated.
func (b *benchCache) free() {
	cu.Synchronize()
	for _, f := range b.frees {
		cu.MemFree(f)
	}
}

func (b *benchCache) alloc(n int64) (cu.DevicePtr, error) {
	p, err := cu.MemAlloc(n)
	if err != nil {
		return 0, fmt.Errorf("bench: cuMemAlloc(%d): %w", n, err)
	}
	b.frees = append(b.frees, p)
	return p, nil
}

// setUp allocates the cache, fills it on the device and uploads the
// checksum kernel's job for rows, and waits for all of it.
func (b *benchCache) setUp(rows []ckplan.Row) error {
	var err error
	for _, a := range []struct {
		p *cu.DevicePtr
		n int64
	}{{&b.src, b.bytes}, {&b.dst, b.bytes}, {&b.sum, 8}, {&b.dOut, int64(b.blocks) * 8}} {
		if *a.p, err = b.alloc(a.n); err != nil {
			return err
		}
	}
	words := uint64(b.bytes / 8)
	fillArgs := []uint64{uint64(b.src), words, benchFillSeed}
	if err := b.g.fns[kernels.EntryFill].Launch(int(min(65535, (words+255)/256)), 1, 1, 256, 1, 1, 0, b.g.streams[0], ptrs(fillArgs)); err != nil {
		return fmt.Errorf("bench: fill: %w", err)
	}
	if b.job, err = kernels.NewJob(b.c, rows, kernels.JobOptions{InPlace: true, Base: uint64(b.src), Mode: b.g.mode}); err != nil {
		return err
	}
	if b.factors, err = upload(b.job.Factors); err != nil {
		return err
	}
	b.frees = append(b.frees, b.factors)
	if b.offsets, err = upload(b.job.Offsets); err != nil {
		return err
	}
	b.frees = append(b.frees, b.offsets)
	table := make([]int64, b.blocks*kernels.RowWords)
	b.job.RowTable(table, rows)
	if b.dTable, err = upload(table); err != nil {
		return err
	}
	b.frees = append(b.frees, b.dTable)
	// The uploads and the fill ran on the legacy stream or on the stream:
	// finish them before timing anything.
	if err := cu.Synchronize(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// time runs the checksum kernel, the plain-read kernel and a
// device-to-device copy over the cache, a warm-up then reps timed passes
// of each, and sets res's median times.
func (b *benchCache) time(ctx context.Context, reps int, res *kernels.BenchResult) error {
	stream := b.g.streams[0]
	start, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return err
	}
	defer cu.DestroyEvent(&start)
	stop, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return err
	}
	defer cu.DestroyEvent(&stop)
	timeIt := func(f func() error) (float64, error) {
		if err := start.Record(stream); err != nil {
			return 0, err
		}
		if err := f(); err != nil {
			return 0, err
		}
		if err := stop.Record(stream); err != nil {
			return 0, err
		}
		if err := stop.Synchronize(); err != nil {
			return 0, err
		}
		ms, err := start.Elapsed(stop)
		return ms / 1e3, err
	}
	checksumPass := func() error {
		return b.g.launch(&b.job.Kernel, stream, b.src, b.dTable, b.blocks, b.dOut, b.factors, b.offsets)
	}
	readGrid := max(1, b.g.hello.Multiprocessors) * 16
	readArgs := []uint64{uint64(b.src), uint64(b.bytes/8) / 2, uint64(b.sum)}
	readPass := func() error {
		return b.g.fns[kernels.EntryReadSum].Launch(readGrid, 1, 1, 256, 1, 1, 0, stream, ptrs(readArgs))
	}
	copyPass := func() error { return cu.MemcpyDtoDAsync(b.dst, b.src, b.bytes, stream) }
	var tc, tr, tcp []float64
	for i := -1; i < reps; i++ { // i = -1 warms up
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := cu.MemsetD8Async(b.dOut, 0, int64(b.blocks)*8, stream); err != nil {
			return err
		}
		t1, err := timeIt(checksumPass)
		if err != nil {
			return fmt.Errorf("bench: checksum kernel: %w", err)
		}
		t2, err := timeIt(readPass)
		if err != nil {
			return fmt.Errorf("bench: read kernel: %w", err)
		}
		t3, err := timeIt(copyPass)
		if err != nil {
			return fmt.Errorf("bench: copy: %w", err)
		}
		if i >= 0 {
			tc, tr, tcp = append(tc, t1), append(tr, t2), append(tcp, t3)
		}
	}
	res.ChecksumSeconds, res.ReadSeconds, res.CopySeconds = kernels.Median(tc), kernels.Median(tr), kernels.Median(tcp)
	return nil
}

// verify checks sampled blocks on the host: their bytes are the fill
// pattern and their checksums the reference's. It counts them in res.
func (b *benchCache) verify(res *kernels.BenchResult) error {
	out := make([]uint64, b.blocks)
	if err := cu.MemcpyDtoH(unsafe.Pointer(&out[0]), b.dOut, int64(b.blocks)*8); err != nil {
		return err
	}
	half := int64(kernels.BenchSampleBytes / 2)
	sample := make([]byte, kernels.BenchSampleBytes)
	for _, blk := range kernels.BenchSampleBlocks(b.blocks) {
		r := kernels.BenchSampleRanges(b.c, blk)
		for i, off := range r {
			if err := cu.MemcpyDtoH(unsafe.Pointer(&sample[int64(i)*half]), b.src+cu.DevicePtr(off), half); err != nil {
				return err
			}
			for w := int64(0); w < half/8; w++ {
				if got, want := binary.LittleEndian.Uint64(sample[int64(i)*half+8*w:]), kernels.FillWord(benchFillSeed, uint64(off/8+w)); got != want {
					return fmt.Errorf("bench: the fill kernel wrote %#x at byte %d, want %#x", got, off+8*w, want)
				}
			}
		}
		if want := kernels.BenchCheck(sample, blk); out[blk] != want {
			return fmt.Errorf("bench: block %d: the kernel says %#x, checksum.ReferenceBlock %#x", blk, out[blk], want)
		}
		res.VerifiedRows++
	}
	return nil
}

// ptrs returns pointers to each value, as Launch takes them.
func ptrs(vals []uint64) []unsafe.Pointer {
	ps := make([]unsafe.Pointer, len(vals))
	for i := range vals {
		ps[i] = unsafe.Pointer(&vals[i])
	}
	return ps
}
