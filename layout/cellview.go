package layout

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/kvaudit/kvaudit/internal/strided"
)

// CellView is a layer's cache tensor seen as cells: the bytes of one token of
// one head, K then V (docs/spec.md §1). Block id b owns kernel rows
// b*KernelBlocks .. b*KernelBlocks+KernelBlocks-1; token t of a block lies
// in kernel row t/KernelTokens at token t%KernelTokens.
type CellView struct {
	// Data holds the tensor's bytes; offsets below are relative to it. It
	// is nil for a tensor in device memory (Device is set instead).
	Data []byte
	// File names the mapped file; Data[0] is its byte FileOffset.
	File       string
	FileOffset int64
	Device     *DeviceTensor

	KernelBlocks int // kernel blocks per block
	KernelTokens int // tokens per kernel block
	Heads        int // heads on this rank (1 without a head axis)
	CellBytes    int
	// PieceBytes is the width of a piece: 8 for attention cells; 2 or 4
	// for state rows, whose elements are read at their own width and
	// zero-extended (docs/spec.md §6). Zero means 8.
	PieceBytes int

	// Strides in bytes of a kernel row, a token and a head.
	RowStride, TokenStride, HeadStride int64
	// Runs are the cell's bytes in logical order (K then V), each a
	// contiguous range at Offset from the cell's address.
	Runs []CellRun
}

// CellRun is a contiguous byte range of a cell.
type CellRun struct {
	Offset int64
	Len    int
}

// DeviceTensor is a tensor in live device memory (a cuda_ipc source). Only
// the CUDA engine reads it.
type DeviceTensor struct {
	IPCHandle string // base64 of the 64-byte cudaIpcMemHandle_t
	Offset    int64
	Dtype     Dtype
	Shape     []int64
	Strides   []int64 // in bytes
}

// Addr returns the offset in Data of the cell of token tok of kernel row
// row, head head.
func (v *CellView) Addr(row, tok, head int) int64 {
	return int64(row)*v.RowStride + int64(tok)*v.TokenStride + int64(head)*v.HeadStride
}

// CellAddr returns the offset of the cell of the token at index t within
// block id block (t < block size).
func (v *CellView) CellAddr(block, t, head int) int64 {
	return v.Addr(block*v.KernelBlocks+t/v.KernelTokens, t%v.KernelTokens, head)
}

// ReadCell appends the logical bytes of a cell (K then V) to dst.
func (v *CellView) ReadCell(dst []byte, block, t, head int) []byte {
	a := v.CellAddr(block, t, head)
	for _, r := range v.Runs {
		dst = append(dst, v.Data[a+r.Offset:a+r.Offset+int64(r.Len)]...)
	}
	return dst
}

// Width returns the piece width in bytes (8 unless PieceBytes says
// otherwise).
func (v *CellView) Width() int {
	if v.PieceBytes == 0 {
		return 8
	}
	return v.PieceBytes
}

// Pieces returns the pieces of one cell.
func (v *CellView) Pieces() int { return v.CellBytes / v.Width() }

// Contiguous reports whether every run is whole pieces, so pieces can be
// read in place without assembling the cell.
func (v *CellView) Contiguous() bool {
	w := v.Width()
	for _, r := range v.Runs {
		if r.Len%w != 0 {
			return false
		}
	}
	return true
}

// BlockBytes returns the bytes one block occupies in this view, counting
// only cells (a measure of work).
func (v *CellView) BlockBytes() int64 {
	return int64(v.KernelBlocks*v.KernelTokens*v.Heads) * int64(v.CellBytes)
}

// rowMajorStrides returns the byte strides of a contiguous row-major tensor
// of elem-byte elements; ok is false when they overflow 2^62.
func rowMajorStrides(shape []int64, elem int64) ([]int64, bool) {
	st := make([]int64, len(shape))
	s := elem
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		hi, lo := bits.Mul64(uint64(s), uint64(max(shape[i], 1)))
		if hi != 0 || lo > 1<<62 {
			return nil, false
		}
		s = int64(lo)
	}
	return st, true
}

// buildCellView makes a layer's CellView from its tensor. It returns an
// error for a tensor that disagrees with the manifest, and a reason for a
// valid one the checksum cannot cover.
func buildCellView(m *Manifest, g *Group, l *Layer, t strided.Tensor) (CellView, string, error) {
	var v CellView
	if len(t.Shape) != len(l.Layout) {
		return v, "", fmt.Errorf("tensor has %d dimensions %v, layout %q has %d", len(t.Shape), t.Shape, l.Layout, len(l.Layout))
	}
	ldt, err := TorchDtype(l.Dtype)
	if err != nil {
		return v, "", err
	}
	axis := map[string]int{}
	for i, a := range l.Layout {
		axis[a] = i
	}
	size := func(a string) int64 { return t.Shape[axis[a]] }
	stride := func(a string) int64 { return t.Strides[axis[a]] }
	_, hasCell := axis["cell"]
	if hasCell {
		if t.Dtype.Bits != 8 {
			return v, "", fmt.Errorf("a cell axis needs a tensor of bytes (U8 or I8), got %s", t.Dtype.Name)
		}
	} else if t.Dtype.Bits != ldt.Bits {
		return v, "", fmt.Errorf("dtype size mismatch: tensor %s has %d-bit elements, layer dtype %q %d-bit", t.Dtype.Name, t.Dtype.Bits, l.Dtype, ldt.Bits)
	}
	// The extent of the tensor must lie in the bytes available.
	if t.Size >= 0 {
		end, ok := strided.End(t)
		if !ok || end > t.Size {
			return v, "", fmt.Errorf("tensor of shape %v and strides %v (bytes) needs %d bytes, %d available", t.Shape, t.Strides, end, t.Size)
		}
	}
	nb := size("block")
	if nb < int64(m.NumBlocks) || nb%int64(m.NumBlocks) != 0 {
		return v, reasonNumBlocks, nil
	}
	v.KernelBlocks = int(nb / int64(m.NumBlocks))
	v.KernelTokens = int(size("token"))
	if v.KernelTokens*v.KernelBlocks != g.BlockSize {
		return v, reasonKernelBlocks, nil
	}
	v.RowStride, v.TokenStride = stride("block"), stride("token")
	v.Heads = 1
	if _, ok := axis["head"]; ok {
		v.Heads = int(size("head"))
		v.HeadStride = stride("head")
		if l.NumKVHeads != 0 && v.Heads != l.NumKVHeads {
			return v, "", fmt.Errorf("head axis has %d heads, num_kv_heads is %d", v.Heads, l.NumKVHeads)
		}
	} else if l.NumKVHeads > 1 {
		return v, "", fmt.Errorf("num_kv_heads is %d but the layout %q has no head axis", l.NumKVHeads, l.Layout)
	}
	elem := int64(ldt.Bits / 8)
	var offsets []int64 // byte offsets of the cell's elements, in order
	if hasCell {
		n := size("cell")
		if l.HeadSize != 0 {
			want := int64(l.HeadSize) * elem
			if !g.IsMLA(l) {
				want *= 2
			}
			if n != want {
				return v, "", fmt.Errorf("cell axis has %d bytes, a cell of head_size %d %s is %d", n, l.HeadSize, l.Dtype, want)
			}
		}
		elem = 1
		cs := stride("cell")
		for i := int64(0); i < n; i++ {
			offsets = append(offsets, i*cs)
		}
	} else {
		if d := size("dim"); d != int64(l.HeadSize) {
			return v, "", fmt.Errorf("dim axis has %d elements, head_size is %d", d, l.HeadSize)
		}
		kvN, kvStride := int64(1), int64(0)
		if _, ok := axis["kv"]; ok {
			if kvN = size("kv"); kvN != 2 {
				return v, "", fmt.Errorf("kv axis has size %d, want 2 (K then V)", kvN)
			}
			kvStride = stride("kv")
		}
		ds := stride("dim")
		offsets = make([]int64, 0, min(kvN*int64(l.HeadSize), 4096)) // a cell's elements (capped: the shape is the dump's word)
		for kv := int64(0); kv < kvN; kv++ {
			for d := int64(0); d < int64(l.HeadSize); d++ {
				offsets = append(offsets, kv*kvStride+d*ds)
			}
		}
	}
	v.CellBytes = len(offsets) * int(elem)
	for _, o := range offsets {
		if n := len(v.Runs); n > 0 && v.Runs[n-1].Offset+int64(v.Runs[n-1].Len) == o {
			v.Runs[n-1].Len += int(elem)
			continue
		}
		v.Runs = append(v.Runs, CellRun{Offset: o, Len: int(elem)})
	}
	v.Runs = slices.Clip(v.Runs)
	if v.CellBytes == 0 || v.CellBytes%8 != 0 {
		return v, reasonPieces, nil
	}
	return v, "", nil
}
