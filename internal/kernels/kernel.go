package kernels

import (
	"errors"
	"fmt"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

// Constants of the decomposition; checksum.cu has the same values.
const (
	// Unroll is U: a thread loads U of its tokens before it adds them up,
	// so that U loads are in flight at once.
	Unroll = 4
	// MaxTileLanes bounds the lanes of one thread block.
	MaxTileLanes = 512
	// TokensPerThread is how many tokens one thread covers in a chunk, at
	// most.
	TokensPerThread = 16
	// RowWords is the int64 words of one row of a row table: the byte
	// offset of the block's first kernel row in the data the kernel reads,
	// the request position of its first token, its valid tokens and its
	// output slot.
	RowWords = 4
	// Warp is the threads of a warp; thread blocks are whole warps.
	Warp = 32
	// MaxGrid is the most thread blocks of one launch (gridDim.x).
	MaxGrid = 1<<31 - 1
	// StageAlign is the alignment of staged rows and of the congruence
	// kept between a staged span and its source.
	StageAlign = 16
)

// Kernel is the geometry of one launch of kvaudit_checksum: its parameters
// after the six pointers and counts (see Args), all 64-bit.
//
// The launch has Grid(nrows) thread blocks of Threads threads. Block bid
// covers row bid/(Chunks*Tiles), chunk (bid/Tiles)%Chunks of that row's
// BlockTokens tokens, and tile bid%Tiles of the Lanes lanes. A lane is a
// (head, piece pair) of a cell: lane = head*(Pieces/Vec) + piece/Vec. Thread
// tid of a block reads lane tile*TileLanes + tid%TileLanes at tokens
// chunk*ChunkTokens + tid/TileLanes + n*TokenLanes, n = 0, 1, ..., below
// the row's valid token count (the mask), and accumulates them with the
// addition-only sums of docs/spec.md §1.
type Kernel struct {
	RowStride    int64 // bytes from one kernel row to the next in the data read
	TokenStride  int64 // bytes from one token to the next
	HeadStride   int64 // bytes from one head to the next
	KernelTokens int64 // KT: tokens of a kernel row
	BlockTokens  int64 // S: tokens of a block (kernel rows per block * KT)
	Pieces       int64 // P: pieces of a cell
	Width        int64 // w: bytes of a piece (8; 2 or 4 for state rows)
	Vec          int64 // V: pieces of a lane, 2 (one 16-byte load) or 1
	Lanes        int64 // L = heads * P / V
	TileLanes    int64 // W: lanes of a tile
	TokenLanes   int64 // TL: tokens a thread block reads side by side
	ChunkTokens  int64 // CT = TL * TokensPerThread
	Chunks       int64 // chunks of a row: ceil(S / CT)
	Tiles        int64 // tiles of a chunk: ceil(L / W)
	Threads      int64 // threads of a block: W*TL rounded up to a warp
	Gather       int64 // 1: pieces are assembled byte by byte
}

// Args returns the kernel's parameters in the order of kvaudit_checksum's
// parameter list, after data, rows, nrows, out, factors and offsets.
func (k *Kernel) Args() []int64 {
	return []int64{
		k.RowStride, k.TokenStride, k.HeadStride, k.KernelTokens, k.BlockTokens,
		k.Pieces, k.Width, k.Vec, k.Lanes, k.TileLanes, k.TokenLanes,
		k.ChunkTokens, k.Chunks, k.Tiles, k.Threads, k.Gather,
	}
}

// Grid returns the thread blocks of a launch over nrows rows.
func (k *Kernel) Grid(nrows int) int64 { return int64(nrows) * k.Chunks * k.Tiles }

// MaxRows returns the most rows one launch may cover.
func (k *Kernel) MaxRows() int { return int(MaxGrid / (k.Chunks * k.Tiles)) }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// shape fills in the decomposition fields from the cell geometry.
func (k *Kernel) shape(heads int64) {
	k.Lanes = heads * k.Pieces / k.Vec
	k.Tiles = ceilDiv(k.Lanes, MaxTileLanes)
	k.TileLanes = ceilDiv(k.Lanes, k.Tiles)
	k.TokenLanes = max(1, min(MaxTileLanes/k.TileLanes, k.BlockTokens))
	k.Threads = ceilDiv(k.TileLanes*k.TokenLanes, Warp) * Warp
	k.ChunkTokens = k.TokenLanes * TokensPerThread
	k.Chunks = ceilDiv(k.BlockTokens, k.ChunkTokens)
}

// Mode selects how the kernel loads pieces.
type Mode int

const (
	// ModeAuto picks the widest loads the alignment of the data allows:
	// 16-byte loads of piece pairs, else one load per piece, else bytes.
	ModeAuto Mode = iota
	// ModeScalar never pairs pieces (tests use it to cover that variant).
	ModeScalar
	// ModeGather reads every piece byte by byte through the byte offset
	// table (what ModeAuto picks for pieces that straddle runs or are
	// misaligned).
	ModeGather
)

// JobOptions say where the kernel reads a cache.
type JobOptions struct {
	// InPlace reads the tensor where it lies (a device tensor); Base is
	// then the address of its byte 0, used only for its alignment. Without
	// InPlace the rows' bytes are staged (Fill) into a buffer whose start
	// is aligned to 256 bytes.
	InPlace bool
	Base    uint64
	Mode    Mode
	// MixKey is the mix check's run key (ckplan.Plan.MixKey): MixKeys
	// are keyed by it.
	MixKey uint64
}

// Span is a byte range of a kernel row that the kernel reads, relative to
// the row's start in the tensor (Src) and in a staged row (Dst).
type Span struct{ Src, Dst, Len int64 }

// Job is one cache's rows prepared for the kernel: its launch geometry, its
// tables and, for staged data, where each needed byte goes.
type Job struct {
	Cache *layout.LayerView
	Rows  []ckplan.Row
	// InPlace is JobOptions.InPlace.
	InPlace bool
	// Spans are the bytes of a kernel row that are staged, and
	// StagedRowBytes the bytes of a staged kernel row (a multiple of
	// StageAlign). Unused in place.
	Spans          []Span
	StagedRowBytes int64
	Kernel         Kernel
	// Factors holds m = 2*(layer*H + head)+1 of each local head.
	Factors []uint64
	// Offsets holds, from a cell's address in the data read, the offset of
	// each piece (or, with Kernel.Gather, of each byte) in logical order.
	Offsets []int64
	// MixKeys holds the mix check's key of word 0 of each local head's
	// slice under the run key, checksum.MixKeyOf(JobOptions.MixKey, s, 0)
	// (docs/spec.md §14), and ByteOffsets the
	// offset of each byte of a cell in logical order (what the mix check's
	// word pass of 2- and 4-byte pieces reads). The CUDA kernel does not
	// use them yet (kernels/README.md); the model does.
	MixKeys     []uint64
	ByteOffsets []int64
}

// NewJob prepares a cache's rows. It fails for a geometry the kernel cannot
// read (which layout never builds) or rows outside the cache.
func NewJob(c *layout.LayerView, rows []ckplan.Row, o JobOptions) (*Job, error) {
	v := &c.Cells
	fail := func(format string, args ...any) (*Job, error) {
		return nil, fmt.Errorf("layer %q: %s", c.Layer.Name, fmt.Sprintf(format, args...))
	}
	w := int64(v.Width())
	if w != 2 && w != 4 && w != 8 {
		return fail("pieces of %d bytes (want 2, 4 or 8)", w)
	}
	if v.CellBytes <= 0 || int64(v.CellBytes)%w != 0 || c.Pieces != v.CellBytes/int(w) {
		return fail("%d pieces of %d bytes do not make a %d-byte cell", c.Pieces, w, v.CellBytes)
	}
	if v.Heads < 1 || v.KernelBlocks < 1 || v.KernelTokens < 1 {
		return fail("geometry of %d heads, %d kernel blocks of %d tokens", v.Heads, v.KernelBlocks, v.KernelTokens)
	}
	if v.RowStride < 0 || v.TokenStride < 0 || v.HeadStride < 0 {
		return fail("negative strides")
	}
	total := 0
	for _, r := range v.Runs {
		if r.Len <= 0 || r.Offset < 0 {
			return fail("cell run %+v", r)
		}
		total += r.Len
	}
	if total != v.CellBytes {
		return fail("cell runs hold %d bytes, cells have %d", total, v.CellBytes)
	}
	S := int64(v.KernelBlocks * v.KernelTokens)
	for _, r := range rows {
		if r.Block < 0 || r.Valid < 1 || int64(r.Valid) > S || r.FirstToken < 0 || r.Out < 0 {
			return fail("row %+v is not a block of %d tokens", r, S)
		}
	}
	j := &Job{Cache: c, Rows: rows, InPlace: o.InPlace}
	j.Factors = make([]uint64, v.Heads)
	j.MixKeys = make([]uint64, v.Heads)
	for h := range v.Heads {
		j.Factors[h] = c.Factor(c.HeadBase + h)
		j.MixKeys[h] = checksum.MixKeyOf(o.MixKey, checksum.MixSlice(c, c.HeadBase+h), 0)
	}
	// Byte b of a cell's logical bytes lies at byteOff[b] from its address,
	// in run runOf[b].
	byteOff := make([]int64, 0, v.CellBytes)
	runOf := make([]int, 0, v.CellBytes)
	for ri, r := range v.Runs {
		for i := range int64(r.Len) {
			byteOff = append(byteOff, r.Offset+i)
			runOf = append(runOf, ri)
		}
	}
	k := Kernel{
		RowStride: v.RowStride, TokenStride: v.TokenStride, HeadStride: v.HeadStride,
		KernelTokens: int64(v.KernelTokens), BlockTokens: S,
		Pieces: int64(c.Pieces), Width: w, Vec: 1,
	}
	base := o.Base
	if !o.InPlace {
		j.stage(byteOff, runOf)
		k.RowStride = j.StagedRowBytes
		base = 0 // staged data starts 256-aligned
	}
	// aligned reports whether the address of every piece p, p a multiple
	// of every, is a multiple of a.
	aligned := func(a, every int64) bool {
		if base%uint64(a) != 0 || k.RowStride%a != 0 ||
			(v.KernelTokens > 1 && k.TokenStride%a != 0) || (v.Heads > 1 && k.HeadStride%a != 0) {
			return false
		}
		for p := int64(0); p < k.Pieces; p += every {
			if byteOff[p*w]%a != 0 {
				return false
			}
		}
		return true
	}
	j.ByteOffsets = byteOff
	switch {
	case o.Mode == ModeGather || !v.Contiguous() || !aligned(w, 1):
		k.Gather = 1
		j.Offsets = byteOff
	default:
		j.Offsets = make([]int64, k.Pieces)
		for p := range k.Pieces {
			j.Offsets[p] = byteOff[p*w]
		}
		if o.Mode != ModeScalar && w == 8 && k.Pieces%2 == 0 && aligned(16, 2) && paired(j.Offsets) {
			k.Vec = 2
		}
	}
	k.shape(int64(v.Heads))
	j.Kernel = k
	return j, nil
}

// paired reports whether pieces 2q and 2q+1 are adjacent for every q.
func paired(offs []int64) bool {
	for p := 0; p+1 < len(offs); p += 2 {
		if offs[p+1] != offs[p]+8 {
			return false
		}
	}
	return true
}

// stage computes the spans of a kernel row that the cells cover (one hull
// per cell run, merged where they overlap or touch), packs them into a
// staged row with each span congruent to its source modulo StageAlign,
// and moves byteOff to the staged row.
func (j *Job) stage(byteOff []int64, runOf []int) {
	v := &j.Cache.Cells
	reach := int64(v.KernelTokens-1)*v.TokenStride + int64(v.Heads-1)*v.HeadStride
	type hull struct {
		lo, hi int64
		run    int
	}
	hulls := make([]hull, len(v.Runs))
	for i, r := range v.Runs {
		hulls[i] = hull{r.Offset, r.Offset + reach + int64(r.Len), i}
	}
	// Sort by lo (few runs: insertion sort keeps the order stable).
	for i := 1; i < len(hulls); i++ {
		for k := i; k > 0 && hulls[k].lo < hulls[k-1].lo; k-- {
			hulls[k], hulls[k-1] = hulls[k-1], hulls[k]
		}
	}
	spanOf := make([]int, len(v.Runs))
	for _, h := range hulls {
		if n := len(j.Spans); n > 0 && h.lo <= j.Spans[n-1].Src+j.Spans[n-1].Len {
			s := &j.Spans[n-1]
			s.Len = max(s.Len, h.hi-s.Src)
			spanOf[h.run] = n - 1
			continue
		}
		j.Spans = append(j.Spans, Span{Src: h.lo, Len: h.hi - h.lo})
		spanOf[h.run] = len(j.Spans) - 1
	}
	var cursor int64
	for i := range j.Spans {
		s := &j.Spans[i]
		s.Dst = cursor + ((s.Src-cursor)%StageAlign+StageAlign)%StageAlign
		cursor = s.Dst + s.Len
	}
	j.StagedRowBytes = ceilDiv(max(cursor, 1), StageAlign) * StageAlign
	for b := range byteOff {
		s := j.Spans[spanOf[runOf[b]]]
		byteOff[b] += s.Dst - s.Src
	}
}

// RowBytes returns the staged bytes of one row (all its kernel rows).
func (j *Job) RowBytes() int64 {
	return int64(j.Cache.Cells.KernelBlocks) * j.StagedRowBytes
}

// Batches splits the job's rows into consecutive ranges [lo, hi) of at
// most maxRows rows, each of which stages into at most maxBytes (a row
// larger than maxBytes makes a batch of its own), and no more than one
// launch can cover.
func (j *Job) Batches(maxBytes int64, maxRows int) [][2]int {
	maxRows = max(1, min(maxRows, j.Kernel.MaxRows()))
	if !j.InPlace {
		maxRows = max(1, min(maxRows, int(maxBytes/max(j.RowBytes(), 1))))
	}
	var bs [][2]int
	for lo := 0; lo < len(j.Rows); lo += maxRows {
		bs = append(bs, [2]int{lo, min(lo+maxRows, len(j.Rows))})
	}
	return bs
}

// RowTable writes the row table of rows (a batch of the job, in order) to
// dst, RowWords words per row: staged row i starts at i*RowBytes(); in
// place, block b starts at b*kernel blocks*RowStride.
func (j *Job) RowTable(dst []int64, rows []ckplan.Row) {
	v := &j.Cache.Cells
	for i, r := range rows {
		base := int64(i) * j.RowBytes()
		if j.InPlace {
			base = int64(r.Block) * int64(v.KernelBlocks) * v.RowStride
		}
		d := dst[i*RowWords : i*RowWords+RowWords]
		d[0], d[1], d[2], d[3] = base, r.FirstToken, int64(r.Valid), int64(r.Out)
	}
}

// errOutside is a row whose bytes lie past the end of the tensor's data.
var errOutside = errors.New("past the end of the tensor's data")

// Fill stages the bytes the kernel reads of rows (a batch of the job) into
// dst, RowBytes() per row: for each kernel row holding a valid token, its
// spans. Kernel rows past the valid tokens are left as they are: the kernel
// never reads them. Call it under layout.Guard when the data is mapped.
func (j *Job) Fill(dst []byte, rows []ckplan.Row) error {
	v := &j.Cache.Cells
	kt := int64(v.KernelTokens)
	for i, r := range rows {
		need := ceilDiv(int64(r.Valid), kt)
		for kr := int64(0); kr < need; kr++ {
			src := (int64(r.Block)*int64(v.KernelBlocks) + kr) * v.RowStride
			at := int64(i)*j.RowBytes() + kr*j.StagedRowBytes
			for _, s := range j.Spans {
				if src+s.Src+s.Len > int64(len(v.Data)) {
					return fmt.Errorf("layer %q: block %d: bytes %d..%d are %w (%d bytes)", j.Cache.Layer.Name, r.Block, src+s.Src, src+s.Src+s.Len, errOutside, len(v.Data))
				}
				copy(dst[at+s.Dst:at+s.Dst+s.Len], v.Data[src+s.Src:src+s.Src+s.Len])
			}
		}
	}
	return nil
}

// ReadBytes returns the bytes of cells the rows hold (a measure of work
// for progress reports).
func (j *Job) ReadBytes(rows []ckplan.Row) int64 {
	var n int64
	for _, r := range rows {
		n += int64(r.Valid*j.Cache.Cells.Heads) * int64(j.Cache.Cells.CellBytes)
	}
	return n
}
