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

// tokDiff is what the SIMD kernel found over a run of tokens of one
// segment (see tokCells).
type tokDiff struct {
	differs, nonzero   uint64
	firstTok, firstOff int64
}

// tokCells is what differs between the cells of a run of tokens (at most
// 32) of one head on both sides: the differing tokens, those whose
// consumer cell is not all zero, the first differing token and its first
// differing logical byte, and the counts and sums of diffCells.
type tokCells struct {
	differs, nonzero   uint64
	firstTok, firstOff int
	bytes, bits        int
	sumC, sumP         uint64
}

// merge adds one segment's (at logical offset q) tokDiff-like result.
func (d *tokCells) merge(t *tokDiff, q int) {
	d.differs |= t.differs
	d.nonzero |= t.nonzero
	if t.firstTok >= 0 && (d.firstTok < 0 || int(t.firstTok) < d.firstTok) {
		d.firstTok, d.firstOff = int(t.firstTok), q+int(t.firstOff)
	}
}

// diffTokens compares count (1..32) tokens' cells: token i's consumer
// cell at x + i*sa of a, its producer cell at y + i*sb of b, both cut by
// segs.
func diffTokens(a []byte, x, sa int64, b []byte, y, sb int64, count int, segs segList, d *tokCells) {
	if segs.simd {
		diffTokensSIMD(a, x, sa, b, y, sb, count, segs.segs, d)
		return
	}
	for i := range count {
		var c cellDiff
		if !diffCells(a, x+int64(i)*sa, b, y+int64(i)*sb, segs, &c) {
			if c.nonzero {
				d.nonzero |= 1 << i
			}
			continue
		}
		d.differs |= 1 << i
		if c.nonzero {
			d.nonzero |= 1 << i
		}
		if d.firstTok < 0 {
			d.firstTok, d.firstOff = i, c.first
		}
		d.bytes += c.bytes
		d.bits += c.bits
		d.sumC += c.sumC
		d.sumP += c.sumP
	}
}
