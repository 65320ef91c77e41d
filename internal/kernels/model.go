package kernels

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

// DefaultBatchBytes is the staging buffer of one batch of rows.
const DefaultBatchBytes = 64 << 20

// Model is a checksum.Engine that executes the CUDA kernel's work in Go:
// the same jobs, batches and staging as the runner, and, for every launch,
// every thread block and thread of the grid one after the other with the
// per-thread code of checksum.cu (Kernel.Thread). It is slow; it exists to
// prove the kernel's decomposition against checksum.Reference where there
// is no GPU.
type Model struct {
	// InPlace reads mapped tensors where they lie, as the runner reads
	// device tensors, instead of staging the rows' bytes as it does for
	// dumps.
	InPlace bool
	// Mode forces a load variant (ModeAuto picks as the runner does).
	Mode Mode
	// BatchBytes bounds the staged bytes of one launch; 0 means
	// DefaultBatchBytes.
	BatchBytes int64
	// MaxRows bounds the rows of one launch; 0 means no bound but the
	// grid's.
	MaxRows int
}

// Name returns "model".
func (Model) Name() string { return "model" }

// Mixes returns true: the model computes kvaudit's mix check (Plan.Mix) as
// the kernel would with its mix step (ThreadMix, WordMix), which
// checksum.cu does not have yet (kernels/README.md).
func (Model) Mixes() bool { return true }

// Run implements checksum.Engine.
func (m Model) Run(ctx context.Context, p *ckplan.Plan, out []uint64) error {
	for _, t := range p.Tasks {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := t.Cache
		if c.Cells.Device != nil {
			return fmt.Errorf("layer %q of %q lives in device memory (cuda_ipc): the model engine cannot read it", c.Layer.Name, p.Dump.Path)
		}
		var base uint64
		if len(c.Cells.Data) > 0 {
			base = uint64(c.Cells.FileOffset) // the alignment a device copy of the file would have
		}
		j, err := NewJob(c, t.Rows, JobOptions{InPlace: m.InPlace, Base: base, Mode: m.Mode, MixKey: p.MixKey})
		if err != nil {
			return err
		}
		mixBase := -1
		if p.Mix {
			mixBase = 2 * p.Outputs
		}
		err = layout.Guard(c.Cells.File, func() error { return m.run(j, out, mixBase, p.Progress) })
		if err != nil {
			return err
		}
	}
	return nil
}

func (m Model) run(j *Job, out []uint64, mixBase int, progress func(int64)) error {
	batchBytes := m.BatchBytes
	if batchBytes <= 0 {
		batchBytes = DefaultBatchBytes
	}
	maxRows := m.MaxRows
	if maxRows <= 0 {
		maxRows = MaxGrid
	}
	var stage []byte
	for _, b := range j.Batches(batchBytes, maxRows) {
		rows := j.Rows[b[0]:b[1]]
		table := make([]int64, len(rows)*RowWords)
		j.RowTable(table, rows)
		data := j.Cache.Cells.Data
		if !j.InPlace {
			n := int64(len(rows)) * j.RowBytes()
			if int64(cap(stage)) < n {
				stage = make([]byte, n)
			}
			stage = stage[:n]
			// Poison the buffer: the kernel must never read a byte Fill did
			// not write.
			for i := range stage {
				stage[i] = 0xa5
			}
			if err := j.Fill(stage, rows); err != nil {
				return err
			}
			data = stage
		}
		if err := j.Kernel.Exec(data, table, out, j.Factors, j.Offsets); err != nil {
			return fmt.Errorf("layer %q: %w", j.Cache.Layer.Name, err)
		}
		if mixBase >= 0 {
			if err := j.Kernel.ExecMix(data, table, out[mixBase:], j.MixKeys, j.Offsets, j.ByteOffsets); err != nil {
				return fmt.Errorf("layer %q: mix check: %w", j.Cache.Layer.Name, err)
			}
		}
		if progress != nil {
			progress(j.ReadBytes(rows))
		}
	}
	return nil
}

// Exec runs one launch over the rows of table (RowWords words each): every
// thread block of the grid, each the sum of its threads, added to its row's
// output slot, as the CUDA kernel's block reduction and atomic add do. A
// read outside data is an error.
func (k *Kernel) Exec(data []byte, table []int64, out []uint64, factors []uint64, offsets []int64) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("model kernel: %v", r)
		}
	}()
	nrows := len(table) / RowWords
	grid := k.Grid(nrows)
	for bid := int64(0); bid < grid; bid++ {
		var sum uint64 // the block reduction
		for tid := int64(0); tid < k.Threads; tid++ {
			sum += k.Thread(data, table, factors, offsets, bid, tid)
		}
		row := bid / (k.Chunks * k.Tiles)
		out[table[row*RowWords+3]] += sum
	}
	return nil
}

// Thread returns what thread tid of thread block bid adds to its row's
// output slot. It is kvaudit_checksum's per-thread code, statement by
// statement (checksum.cu marks each with the same comment; [decompose],
// [lane], [tokens] and [address] are in threadAt).
func (k *Kernel) Thread(data []byte, rows []int64, factors []uint64, offsets []int64, bid, tid int64) uint64 {
	c, ok := k.threadAt(rows, offsets, bid, tid)
	if !ok {
		return 0
	}
	n := c.n
	steps := (n + Unroll - 1) / Unroll * Unroll

	// [accumulate] a = sum of y_i, b = sum over steps of a (so that
	// sum_i i*y_i = steps*a - b), e = sum of the second pieces of pairs.
	var a, b, e uint64
	for i := int64(0); i < steps; i += Unroll {
		var x, y [Unroll]uint64
		for u := int64(0); u < Unroll; u++ {
			if i+u < n {
				x[u], y[u] = k.load(data, offsets, c.at, c.p)
				c.step()
			}
		}
		for u := 0; u < Unroll; u++ {
			a += x[u] + y[u]
			b += a
			e += y[u]
		}
	}

	// [weigh] piece p of token first+t0+i*TL has index
	// j = (first+t0)*P + p + i*TL*P: sum_i y_i*(2j+1) + 2*e.
	j0 := uint64(c.first+c.t0)*uint64(k.Pieces) + uint64(c.p)
	s := (2*j0+1)*a + 2*uint64(k.Pieces)*uint64(k.TokenLanes)*(uint64(steps)*a-b) + 2*e
	return factors[c.h] * s
}

// threadCursor is where a thread of the kernel reads: its row's first
// token, its head h and piece p, its first token t0 and its n tokens (t0,
// t0+TL, ...), and the cell of the token it is at (at, tk: its index in
// its kernel block) with how that moves by TL tokens.
type threadCursor struct {
	first, h, p, t0, n         int64
	at, tk                     int64
	stepTK, stepAddr, wrapAddr int64
	kernelTokens               int64
}

// threadAt decomposes thread tid of thread block bid as kvaudit_checksum
// does (Thread and ThreadMix share it); ok is false for a thread with
// nothing to read.
func (k *Kernel) threadAt(rows []int64, offsets []int64, bid, tid int64) (c threadCursor, ok bool) {
	// [decompose] block -> row, chunk, tile.
	tile := bid % k.Tiles
	rest := bid / k.Tiles
	chunk := rest % k.Chunks
	row := rest / k.Chunks
	rowBase := rows[row*RowWords+0]
	c.first = rows[row*RowWords+1]
	valid := rows[row*RowWords+2]

	// [lane] thread -> token lane, lane -> head, piece.
	tokenLane := tid / k.TileLanes
	lane := tile*k.TileLanes + tid%k.TileLanes
	if tokenLane >= k.TokenLanes || lane >= k.Lanes {
		return c, false
	}
	perCell := k.Pieces / k.Vec
	c.h = lane / perCell
	c.p = (lane % perCell) * k.Vec

	// [tokens] this thread's tokens: t0, t0+TL, ... below the chunk's end
	// and the row's valid tokens (the mask).
	c.t0 = chunk*k.ChunkTokens + tokenLane
	end := min(chunk*k.ChunkTokens+k.ChunkTokens, valid)
	if c.t0 >= end {
		return c, false
	}
	c.n = (end - c.t0 + k.TokenLanes - 1) / k.TokenLanes

	// [address] the cell of token t0, and how it moves by TL tokens.
	c.tk = c.t0 % k.KernelTokens
	c.at = rowBase + (c.t0/k.KernelTokens)*k.RowStride + c.tk*k.TokenStride + c.h*k.HeadStride
	if k.Gather == 0 {
		c.at += offsets[c.p]
	}
	c.stepTK = k.TokenLanes % k.KernelTokens
	c.stepAddr = (k.TokenLanes/k.KernelTokens)*k.RowStride + c.stepTK*k.TokenStride
	c.wrapAddr = k.RowStride - k.KernelTokens*k.TokenStride
	c.kernelTokens = k.KernelTokens
	return c, true
}

// step moves the cursor to the cell TL tokens on.
func (c *threadCursor) step() {
	c.tk += c.stepTK
	c.at += c.stepAddr
	if c.tk >= c.kernelTokens {
		c.tk -= c.kernelTokens
		c.at += c.wrapAddr
	}
}

// load reads piece p (and, for a pair, p+1) of the cell whose piece p lies
// at at (wide loads), or whose address is at (gather: byte by byte through
// the byte offset table). y is 0 unless Vec is 2.
func (k *Kernel) load(data []byte, offsets []int64, at, p int64) (x, y uint64) {
	if k.Gather != 0 {
		for i := int64(0); i < k.Width; i++ {
			x |= uint64(data[at+offsets[p*k.Width+i]]) << (8 * i)
		}
		return x, 0
	}
	switch k.Width {
	case 2:
		return uint64(binary.LittleEndian.Uint16(data[at:])), 0
	case 4:
		return uint64(binary.LittleEndian.Uint32(data[at:])), 0
	}
	x = binary.LittleEndian.Uint64(data[at:])
	if k.Vec == 2 {
		y = binary.LittleEndian.Uint64(data[at+8:])
	}
	return x, y
}

// ExecMix runs the mix check's step of a launch over the rows of table:
// for 8-byte pieces every thread of the grid mixes the pieces it loaded
// (ThreadMix), for 2- and 4-byte pieces (state rows, whose words pack
// several pieces) one thread per (row, head, word) mixes a word
// (WordMix); each row's sum is added to out[slot]. It is the kernel's
// design for kvaudit's mix check (docs/spec.md §14), which checksum.cu
// does not have yet.
func (k *Kernel) ExecMix(data []byte, table []int64, out []uint64, mixKeys []uint64, offsets, byteOffsets []int64) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("model kernel: %v", r)
		}
	}()
	nrows := len(table) / RowWords
	if k.Width == 8 {
		for bid := int64(0); bid < k.Grid(nrows); bid++ {
			var sum uint64
			for tid := int64(0); tid < k.Threads; tid++ {
				sum += k.ThreadMix(data, table, mixKeys, offsets, bid, tid)
			}
			out[table[(bid/(k.Chunks*k.Tiles))*RowWords+3]] += sum
		}
		return nil
	}
	words := (int64(len(byteOffsets)) + 7) / 8
	heads := int64(len(mixKeys))
	for row := int64(0); row < int64(nrows); row++ {
		var sum uint64
		for t := int64(0); t < table[row*RowWords+2]; t++ {
			for h := range heads {
				for w := range words {
					sum += k.WordMix(data, table, mixKeys, byteOffsets, row, t, h, w)
				}
			}
		}
		out[table[row*RowWords+3]] += sum
	}
	return nil
}

// ThreadMix is the mix step of thread tid of thread block bid, for 8-byte
// pieces: the same lane, tokens and loads as Thread ([decompose], [lane],
// [tokens], [address]), and for each piece x at index j =
// (first+t)*P + p, Mix(x ^ key) with key = MixKeys[h] + j*MixGamma,
// advanced by TL*P*MixGamma from one of the thread's tokens to the next
// (an addition: no multiply per piece but the mix's own).
func (k *Kernel) ThreadMix(data []byte, rows []int64, mixKeys []uint64, offsets []int64, bid, tid int64) uint64 {
	c, ok := k.threadAt(rows, offsets, bid, tid)
	if !ok {
		return 0
	}

	// [mix] the key of piece p of token first+t0, and its step.
	key := mixKeys[c.h] + (uint64(c.first+c.t0)*uint64(k.Pieces)+uint64(c.p))*checksum.MixGamma
	keyStep := uint64(k.TokenLanes) * uint64(k.Pieces) * checksum.MixGamma
	var mix uint64
	for i := int64(0); i < c.n; i++ {
		x, y := k.load(data, offsets, c.at, c.p)
		mix += checksum.Mix(x ^ key)
		if k.Vec == 2 {
			mix += checksum.Mix(y ^ (key + checksum.MixGamma))
		}
		key += keyStep
		c.step()
	}
	return mix
}

// WordMix is the mix check's word pass for 2- and 4-byte pieces (state
// rows): word w of the cell of token t of row row, head h, assembled
// little-endian from its 8 logical bytes (past the cell's last byte, zero:
// docs/spec.md §14), at index j = (first+t)*W + w.
func (k *Kernel) WordMix(data []byte, rows []int64, mixKeys []uint64, byteOffsets []int64, row, t, h, w int64) uint64 {
	rowBase := rows[row*RowWords+0]
	first := rows[row*RowWords+1]
	at := rowBase + (t/k.KernelTokens)*k.RowStride + (t%k.KernelTokens)*k.TokenStride + h*k.HeadStride
	var x uint64
	for b := int64(0); b < 8 && 8*w+b < int64(len(byteOffsets)); b++ {
		x |= uint64(data[at+byteOffsets[8*w+b]]) << (8 * b)
	}
	W := (int64(len(byteOffsets)) + 7) / 8
	return checksum.Mix(x ^ (mixKeys[h] + uint64((first+t)*W+w)*checksum.MixGamma))
}
