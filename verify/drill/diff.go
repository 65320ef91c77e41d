package drill

import (
	"encoding/binary"
	"math/bits"
)

// wordDiff is what differs between two runs of whole 8-byte words: the
// differing bits and bytes, the OR of the first run's words (zero when
// it is all zero), each run's sum of words, and the index of the first
// differing byte (-1 while none; at counts the bytes compared so far).
type wordDiff struct {
	bits, bytes int
	or          uint64
	sumA, sumB  uint64
	first, at   int
}

// diffWords adds to d the differences of a and b, whose length is a
// multiple of 8 (b at least as long as a), word by word: through the SIMD
// kernel where the machine has one, else diffWordsGeneric.
func diffWords(a, b []byte, d *wordDiff) {
	n := len(a) &^ 31
	if useSIMD && n > 0 {
		diffSIMD(a[:n], b[:n], d)
		a, b = a[n:], b[n:]
	}
	diffWordsGeneric(a, b, d)
}

// diffWordsGeneric is diffWords in plain Go.
func diffWordsGeneric(a, b []byte, d *wordDiff) {
	b = b[:len(a)]
	for len(a) >= 8 {
		u, v := binary.LittleEndian.Uint64(a), binary.LittleEndian.Uint64(b)
		x := u ^ v
		if x != 0 && d.first < 0 {
			d.first = d.at + bits.TrailingZeros64(x)/8
		}
		d.bits += bits.OnesCount64(x)
		d.bytes += nonzeroBytes(x)
		d.or |= u
		d.sumA += u
		d.sumB += v
		a, b = a[8:], b[8:]
		d.at += 8
	}
}

// nonzeroBytes counts the bytes of x that are not zero.
func nonzeroBytes(x uint64) int {
	const lo7 = 0x7f7f7f7f7f7f7f7f
	// The high bit of each byte of y is set when the byte of x is not 0.
	y := ((x & lo7) + lo7) | x
	return bits.OnesCount64(y &^ lo7)
}

// tokDiff is what the SIMD kernel found over a run of items of one
// segment: the differing items and those whose consumer cell is not all
// zero.
type tokDiff struct {
	differs, nonzero uint64
}

// itemDiff is what differs in one item (one cell) of a diffItems run:
// the differing bits, the equal bytes, the sums of each side's 8-byte
// words, and the logical offset of the first differing byte (-1 when
// none).
type itemDiff struct {
	bits, equal, sumA, sumB uint64
	first                   int64
}

// itemsDiff is what differs between the cells of a run of items (at most
// 32: the tokens of one head, or the heads of one token) on both sides:
// the differing items, those whose consumer cell is not all zero, each
// item's counts, sums and first differing byte, and the bytes of a cell
// compared.
type itemsDiff struct {
	differs, nonzero uint64
	items            [32]itemDiff
	n                int
}

// reset readies d for a run of count items.
func (d *itemsDiff) reset(count int) {
	d.differs, d.nonzero, d.n = 0, 0, 0
	for i := range count {
		d.items[i] = itemDiff{first: -1}
	}
}

// diffItems compares count (1..32) cells: item i's consumer cell at x +
// i*sa of a, its producer cell at y + i*sb of b, both cut by segs (d
// reset for count items).
func diffItems(a []byte, x, sa int64, b []byte, y, sb int64, count int, segs segList, d *itemsDiff) {
	for _, s := range segs.segs {
		d.n += s.n
	}
	if segs.simd {
		diffItemsSIMD(a, x, sa, b, y, sb, count, segs.segs, d)
		return
	}
	for i := range count {
		var c cellDiff
		differs := diffCells(a, x+int64(i)*sa, b, y+int64(i)*sb, segs, &c)
		d.items[i] = itemDiff{bits: uint64(c.bits), equal: uint64(d.n - c.bytes), sumA: c.sumC, sumB: c.sumP, first: int64(c.first)}
		if c.nonzero {
			d.nonzero |= 1 << i
		}
		if differs {
			d.differs |= 1 << i
		}
	}
}
