package checksum

import "encoding/binary"

// State rows (docs/spec.md §6): each "head" of a state view is a global row
// of 2- or 4-byte elements, one block per request. vLLM's sums weigh the
// elements by their index in the row; the mix check (§14) reads the row's
// bytes as 8-byte words, the last zero-padded. Both come from the words:
// word i's elements are its 2- or 4-byte fields l, at element index
// i*(8/w) + l, so sums of each field over the words give A and the
// weighted sum B exactly (a padded word's extra fields are zero).

// stateConsts is the size of the state rows' kernel constants: step,
// D0..D3, mask and the lane offsets (4 lanes each), then wide.
const stateConsts = 29

// maxStateRow2 bounds a row of 2-byte elements in the SIMD kernel: the
// weighted field sums of a row stay below 2^32 in the 32-bit halves of
// its lanes while M*(M+1)/2 * 65535 < 2^32 for M 32-byte steps.
const maxStateRow2 = 8 << 10

// stateKernelConsts returns the state rows' kernel constants for pieces of
// w bytes, the lane offsets for key offset 0.
func stateKernelConsts(w int) (c [stateConsts]uint64) {
	mask := uint64(0x0000ffff0000ffff)
	if w == 4 {
		mask = 0x00000000ffffffff
	}
	for i, x := range [6]uint64{4 * mixGamma, mixD[0], mixD[1], mixD[2], mixD[3], mask} {
		for l := range 4 {
			c[4*i+l] = x
		}
	}
	setStateKeyOffset(&c, 0)
	if w == 4 {
		c[28] = 1
	}
	return c
}

// setStateKeyOffset sets the state rows' kernel's lane offsets for key
// offset koff (the row's first word's index times MixGamma).
func setStateKeyOffset(c *[stateConsts]uint64, koff uint64) {
	for l := range 4 {
		c[24+l] = koff + uint64(l)*mixGamma
	}
}

// weighed is sum over r < n of (m + step*r)*v_r for sums of v_r whose
// total is s and whose prefix sum is p = sum of (n - r)*v_r: m*s +
// step*(n*s - p), since sum of r*v_r = n*s - p. Every state kernel's
// totals weigh its sums so (the factors of consecutive rows, or groups of
// rows, step evenly).
func weighed(s, p, n, m, step uint64) uint64 { return m*s + step*(n*s-p) }

// stateTotals returns, from the state rows' kernel's sums acc over R rows
// of M 32-byte steps of w-byte elements, X = sum over rows r of m_r*A_r
// and Y = sum of m_r*B_r for the factors m_r = m0 + 2r (a cache's
// consecutive local heads, layout.LayerView.Factor). Per lane q, for each
// of the kernel's sums v (S, C, Bs) with s = acc sum and p = its prefix
// sum (sum of (R - r)*v_r), sum of m_r*v_r = m0*s + 2*(R*s - p); a row's
// A is the sum over lanes of S and, word 4m+q holding element indices
// per*(4m+q) + l, its B = 4*per*(M*A - sum of Bs) + sum over lanes of
// (per*q*S + C): both linear in the row's sums, so weighing the sums
// weighs A and B.
func stateTotals(acc *[24]uint64, R, M uint64, w int, m0 uint64) (X, Y uint64) {
	per := uint64(8 / w)
	weigh := func(v, l int) uint64 { return weighed(acc[8*v+l], acc[8*v+4+l], R, m0, 2) }
	var bs, c uint64
	for l := range 4 {
		S := weigh(0, l)
		X += S
		c += per*uint64(l)*S + weigh(1, l)
		bs += weigh(2, l)
	}
	return X, 4*per*(M*X-bs) + c
}

// rowConsts is the size of the short rows' kernel constants: MixGamma,
// D0..D3, the elements of a word, the 2-byte and the 4-byte field masks
// and the key offset (4 lanes each).
const rowConsts = 36

// adjConsts is the size of the adjacent rows' kernel constants: the short
// rows' (rowConsts), four run offsets and four run masks (4 lanes each).
const adjConsts = rowConsts + 4 + 16

// adjLanes maps the adjacent rows' kernel's output lanes to rows of its
// group of 16: word vectors W0..W3 hold rows 0, 1, 8, 9; 2, 3, 10, 11;
// 4, 5, 12, 13; 6, 7, 14, 15.
var adjLanes = [16]int{0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15}

// maxRowWords bounds the words of a row the short rows' kernel takes.
const maxRowWords = 64

// rowKernelConsts returns the short rows' kernel constants for pieces of
// w bytes.
func rowKernelConsts(w int) (c [rowConsts]uint64) {
	for i, x := range [8]uint64{mixGamma, mixD[0], mixD[1], mixD[2], mixD[3], uint64(8 / w), 0xffff, 0xffffffff} {
		for l := range 4 {
			c[4*i+l] = x
		}
	}
	return c
}

// stateRowsSIMDFits says whether the state rows' kernel takes rows of n
// bytes of w-byte elements.
func stateRowsSIMDFits(n, w int) bool {
	return n >= 32 && n%32 == 0 && (w == 4 || n <= maxStateRow2)
}

// stateRowWords returns A and B (as sumAB16 or sumAB32 of the row) and,
// when mix, the mix check of a state row's logical bytes p (key: of its
// word 0), the generic loop: word by word, the last one zero-padded.
func stateRowWords(p []byte, w int, key uint64, mix bool) (A, B, H uint64) {
	n := uint64(0)
	per := uint64(8 / w)
	for len(p) > 0 {
		var x uint64
		if len(p) >= 8 {
			x = binary.LittleEndian.Uint64(p)
			p = p[8:]
		} else {
			var b [8]byte
			copy(b[:], p)
			x = binary.LittleEndian.Uint64(b[:])
			p = nil
		}
		if mix {
			H += Mix(x ^ key)
			key += mixGamma
		}
		// Fields of word n at element indices n*per + l.
		for l := range per {
			f := (x >> (8 * uint(w) * uint(l))) & (1<<(8*uint(w)) - 1)
			A += f
			B += (n*per + l) * f
		}
		n++
	}
	return A, B, H
}

// stateRows returns, for a state view's block at base (its heads are rows;
// one kernel row of one token), X = sum over rows of m*A and Y = sum of
// m*B (A a row's plain sum, B its sum of element index * element, m its
// factor) and, with the mix check on, adds the rows' mix check to the
// row's. It takes rows of one contiguous run and rows adjacent in runs of
// one element each (a state split on its last axis): long contiguous rows
// through the SIMD kernel of sums_state_amd64.s, short ones and adjacent
// ones four (or sixteen) at a time through its short rows' kernels, the
// rest word by word. ok is false, and nothing done, for any other view
// (pieces of 8 bytes, several tokens, other runs), which the general walk
// takes.
func (s *scratch) stateRows(k *walk, base int64) (X, Y uint64, ok bool) {
	v := k.v
	w := k.w
	if w == 8 || v.KernelTokens != 1 || v.KernelBlocks != 1 {
		return 0, 0, false
	}
	contiguous := len(k.runs) == 1 && k.runs[0].n == v.CellBytes
	if !contiguous {
		if !k.pieceRun {
			return 0, 0, false
		}
		X, Y = s.adjacentRows(k, base)
		return X, Y, true
	}
	n := v.CellBytes
	a := base + k.runs[0].off
	if k.stateSIMD && w == 4 && n == 64 && v.HeadStride >= 0 {
		// Rows of two 32-byte steps (mamba1's ssm rows): one row a loop.
		H := len(k.m)
		_ = v.Data[a+int64(H-1)*v.HeadStride+int64(n)-1]
		koff := s.jbase * mixGamma
		for l := range 4 {
			s.pairConsts[l] = koff + uint64(l)*mixGamma
			s.pairConsts[20+l] = koff + uint64(4+l)*mixGamma
		}
		if !s.pairSet {
			for i, x := range mixD {
				for l := range 4 {
					s.pairConsts[4+4*i+l] = x
				}
			}
			s.pairSet = true
		}
		var acc [32]uint64
		var hsum [4]uint64
		pairRowsSIMD(v.Data, a, H, v.HeadStride, s.mixOn, &acc, k.keys, &s.pairConsts, &hsum)
		X, Y = pairTotals(&acc, uint64(H), k.m[0])
		if s.mixOn {
			s.mix += hsum[0] + hsum[1] + hsum[2] + hsum[3]
		}
		return X, Y, true
	}
	if k.stateSIMD && stateRowsSIMDFits(n, w) && v.HeadStride >= 0 {
		H := len(k.m)
		_ = v.Data[a+int64(H-1)*v.HeadStride+int64(n)-1]
		if s.stateW != w {
			s.stateConsts = stateKernelConsts(w)
			s.stateW = w
		}
		setStateKeyOffset(&s.stateConsts, s.jbase*mixGamma)
		var acc [24]uint64
		var hsum [4]uint64
		stateRowsSIMD(v.Data, a, v.HeadStride, n, H, s.mixOn, &acc, k.keys, &s.stateConsts, &hsum)
		X, Y = stateTotals(&acc, uint64(H), uint64(n/32), w, k.m[0])
		if s.mixOn {
			s.mix += hsum[0] + hsum[1] + hsum[2] + hsum[3]
		}
		return X, Y, true
	}
	h0 := 0
	words := (n + 7) / 8
	if k.stateSIMD && words == 1 && v.HeadStride >= 0 && v.HeadStride+int64(n) <= 16 {
		// One word per row: rows four at a time while a group's two
		// 16-byte loads lie in the tensor.
		rows := len(k.m) &^ 3
		for rows > 0 && a+int64(rows-2)*v.HeadStride+16 > int64(len(v.Data)) {
			rows -= 4
		}
		if rows > 0 {
			X, Y = s.wordRows(k, a, rows, n, v.HeadStride)
			h0 = rows
			a += int64(rows) * v.HeadStride
		}
	} else if k.stateSIMD && words <= maxRowWords && v.HeadStride >= 0 {
		// Rows four at a time while their last word's 8 bytes lie in
		// the tensor.
		rows := len(k.m) &^ 3
		for rows > 0 && a+int64(rows-1)*v.HeadStride+int64(8*words) > int64(len(v.Data)) {
			rows -= 4
		}
		if rows > 0 {
			tail := ^uint64(0)
			if n%8 != 0 {
				tail = 1<<(8*uint(n%8)) - 1
			}
			X, Y = s.rowWords(k, a, 0, rows, words, v.HeadStride, nil, tail, 0)
			h0 = rows
			a += int64(rows) * v.HeadStride
		}
	}
	for h := h0; h < len(k.m); h++ {
		A, B, H := stateRowWords(v.Data[a:a+int64(n)], w, s.key(k, h, 0), s.mixOn)
		X += k.m[h] * A
		Y += k.m[h] * B
		s.mix += H
		a += v.HeadStride
	}
	return X, Y, true
}

// adjacentRows is stateRows for rows adjacent in runs of one element each:
// run e holds element e of every row (k.pieceRun; v.Runs in the rows'
// logical order). Rows go four at a time through the short rows' kernel,
// the rest are assembled one by one.
func (s *scratch) adjacentRows(k *walk, base int64) (X, Y uint64) {
	v := k.v
	w := k.w
	E := len(v.Runs) // elements of a row
	words := (E*w + 7) / 8
	h0 := 0
	if k.stateSIMD && w == 2 && E <= 4 {
		// One word per row: sixteen rows at a time.
		if rows := len(k.m) &^ 15; rows > 0 {
			X, Y = s.adjacent16(k, base, rows)
			h0 = rows
		}
	}
	if k.stateSIMD && words <= maxRowWords && len(k.m)-h0 >= 4 {
		per := 8 / w
		offs := s.offs[:0]
		for e := range words * per {
			off := int64(-1)
			if e < E {
				off = v.Runs[e].Offset
			}
			offs = append(offs, off)
		}
		s.offs = offs
		mode := 1
		if w == 4 {
			mode = 2
		}
		rows := (len(k.m) - h0) &^ 3
		x, y := s.rowWords(k, base+int64(h0*w), mode, rows, words, 0, offs, ^uint64(0), h0)
		X, Y = X+x, Y+y
		h0 += rows
	}
	for h := h0; h < len(k.m); h++ {
		cell := s.cell[:0]
		for _, r := range v.Runs {
			a := base + r.Offset + int64(h)*int64(w)
			cell = append(cell, v.Data[a:a+int64(w)]...)
		}
		s.cell = cell
		A, B, H := stateRowWords(cell, w, s.key(k, h, 0), s.mixOn)
		X += k.m[h] * A
		Y += k.m[h] * B
		s.mix += H
	}
	return X, Y
}

// rowWords runs the short rows' kernel over the first rows rows (a
// multiple of 4) of a state view from data[off:], adds their mix check to
// the row's and returns X = sum of m*A and Y = sum of m*B over them.
func (s *scratch) rowWords(k *walk, off int64, mode, rows, words int, stride int64, offs []int64, tail uint64, h0 int) (X, Y uint64) {
	if s.rowW != k.w {
		s.rowConsts = rowKernelConsts(k.w)
		s.rowW = k.w
	}
	var acc [16]uint64
	var hsum [4]uint64
	for l := range 4 {
		s.rowConsts[32+l] = s.jbase * mixGamma
	}
	rowWordsSIMD(k.v.Data, off, mode, k.w, rows, words, stride, offs, tail, s.mixOn, &acc, k.keys[h0:h0+rows], &s.rowConsts, &hsum)
	X, Y = rowTotals(&acc, uint64(rows/4), k.m[h0])
	if s.mixOn {
		s.mix += hsum[0] + hsum[1] + hsum[2] + hsum[3]
	}
	return X, Y
}

// rowTotals returns, from the short rows' kernel's sums acc over G groups
// of four rows, X = sum over rows r of m_r*A_r and Y = sum of m_r*B_r for
// the factors m_r = m0 + 2r (consecutive local heads): row 4g+q is lane q
// of group g, m_r = (m0 + 2q) + 8g, and with s a lane's sum over groups
// and p its prefix sum (sum of (G - g)*v_g), sum of g*v_g = G*s - p.
func rowTotals(acc *[16]uint64, G, m0 uint64) (X, Y uint64) {
	for q := range uint64(4) {
		X += weighed(acc[q], acc[4+q], G, m0+2*q, 8)
		Y += weighed(acc[8+q], acc[12+q], G, m0+2*q, 8)
	}
	return X, Y
}

// adjacent16 runs the adjacent rows' kernel over the first rows rows (a
// multiple of 16) of a view of adjacent rows of at most four 2-byte
// elements, adds their mix check to the row's and returns X = sum of m*A
// and Y = sum of m*B over them.
func (s *scratch) adjacent16(k *walk, base int64, rows int) (X, Y uint64) {
	v := k.v
	c := &s.adjConsts
	if s.adjW != 2 {
		rc := rowKernelConsts(2)
		copy(c[:rowConsts], rc[:])
		s.adjW = 2
	}
	for l := range 4 {
		c[32+l] = s.jbase * mixGamma
	}
	for e := range 4 {
		off, mask := v.Runs[0].Offset, uint64(0)
		if e < len(v.Runs) {
			off, mask = v.Runs[e].Offset, ^uint64(0)
		}
		c[rowConsts+e] = uint64(off)
		for l := range 4 {
			c[rowConsts+4+4*e+l] = mask
		}
	}
	var acc [64]uint64
	var hsum [4]uint64
	adjacent16SIMD(v.Data, base, rows, s.mixOn, &acc, k.keys[:rows], c, &hsum)
	X, Y = adjacentTotals(&acc, uint64(rows/16), k.m[0])
	if s.mixOn {
		s.mix += hsum[0] + hsum[1] + hsum[2] + hsum[3]
	}
	return X, Y
}

// adjacentTotals returns, from the adjacent rows' kernel's sums acc over G
// groups of 16 rows, X = sum over rows r of m_r*A_r and Y = sum of
// m_r*B_r for the factors m_r = m0 + 2r (consecutive local heads): lane
// l of word vector w of group g is row 16g + adjLanes[4w+l], and with s a
// lane's sum over groups and p its prefix sum (sum of (G - g)*v_g), sum
// of g*v_g = G*s - p.
func adjacentTotals(acc *[64]uint64, G, m0 uint64) (X, Y uint64) {
	for w := range 4 {
		for l := range 4 {
			m := m0 + 2*uint64(adjLanes[4*w+l])
			a, b := 8*w+l, 8*w+4+l
			X += weighed(acc[a], acc[32+a], G, m, 32)
			Y += weighed(acc[b], acc[32+b], G, m, 32)
		}
	}
	return X, Y
}

// wordConsts is the size of the one-word rows' kernel constants: the key
// offset, D0..D3 and the field mask (4 lanes each), the shuffle (32
// bytes) and the field shift.
const wordConsts = 29

// maxWordGroups bounds the groups of four rows of one call of the
// one-word rows' kernel: the prefix sums of 2-byte fields stay below 2^32
// in the 32-bit halves of its lanes while G*(G+1)/2 * 65535 < 2^32.
const maxWordGroups = 256

// wordKernelConsts returns the one-word rows' kernel constants for rows
// of n bytes (at most 8) of w-byte elements, stride bytes apart (stride +
// n at most 16), the key offset 0.
func wordKernelConsts(w, n int, stride int64) (c [wordConsts]uint64) {
	mask, shift := uint64(0x0000ffff0000ffff), uint64(16)
	if w == 4 {
		mask, shift = 0x00000000ffffffff, 32
	}
	for i, x := range [4]uint64{mixD[0], mixD[1], mixD[2], mixD[3]} {
		for l := range 4 {
			c[4+4*i+l] = x
		}
	}
	for l := range 4 {
		c[20+l] = mask
	}
	// Each 16 bytes of a load hold two rows, at 0 and stride: lane bytes
	// j < n of the first word take byte j, of the second byte stride + j;
	// the others are zeroed (0x80).
	var lo, hi uint64
	for j := range 8 {
		b0, b1 := uint64(0x80), uint64(0x80)
		if j < n {
			b0, b1 = uint64(j), uint64(stride)+uint64(j)
		}
		lo |= b0 << (8 * j)
		hi |= b1 << (8 * j)
	}
	c[24], c[25], c[26], c[27] = lo, hi, lo, hi
	c[28] = shift
	return c
}

// wordRows runs the one-word rows' kernel over the first rows rows (a
// multiple of 4) of n bytes, stride bytes apart, of a state view from
// data[off:], at most maxWordGroups groups a call, adds their mix check
// to the row's and returns X = sum of m*A and Y = sum of m*B over them.
func (s *scratch) wordRows(k *walk, off int64, rows, n int, stride int64) (X, Y uint64) {
	if s.wordW != k.w || s.wordN != n || s.wordStride != stride {
		s.wordConsts = wordKernelConsts(k.w, n, stride)
		s.wordW, s.wordN, s.wordStride = k.w, n, stride
	}
	for l := range 4 {
		s.wordConsts[l] = s.jbase * mixGamma
	}
	var hsum [4]uint64
	for h0 := 0; h0 < rows; h0 += 4 * maxWordGroups {
		r := min(rows-h0, 4*maxWordGroups)
		var acc [16]uint64
		wordRowsSIMD(k.v.Data, off+int64(h0)*stride, r, stride, s.mixOn, &acc, k.keys[h0:h0+r], &s.wordConsts, &hsum)
		x, y := wordTotals(&acc, uint64(r/4), k.m[h0], k.w)
		X, Y = X+x, Y+y
	}
	if s.mixOn {
		s.mix += hsum[0] + hsum[1] + hsum[2] + hsum[3]
	}
	return X, Y
}

// wordTotals returns, from the one-word rows' kernel's sums acc over G
// groups of four rows (E, O and their prefix sums), X = sum over rows r
// of m_r*A_r and Y = sum of m_r*B_r for the factors m_r = m0 + 2r: row
// 4g+q is lane q of group g, m_r = (m0 + 2q) + 8g, and with s a field's
// sum over groups and p its prefix sum, sum of g*v_g = G*s - p. Lane q of
// E holds the sums of the row's element 0 (and, for 2-byte elements,
// element 2 in its upper half), O of element 1 (and 3).
func wordTotals(acc *[16]uint64, G, m0 uint64, w int) (X, Y uint64) {
	for q := range uint64(4) {
		weigh := func(s, p uint64) uint64 { return weighed(s, p, G, m0+2*q, 8) }
		E, O, PE, PO := acc[q], acc[4+q], acc[8+q], acc[12+q]
		var f [4]uint64
		if w == 4 {
			f[0], f[1] = weigh(E, PE), weigh(O, PO)
		} else {
			const lo = 0xffffffff
			f[0], f[2] = weigh(E&lo, PE&lo), weigh(E>>32, PE>>32)
			f[1], f[3] = weigh(O&lo, PO&lo), weigh(O>>32, PO>>32)
		}
		X += f[0] + f[1] + f[2] + f[3]
		Y += f[1] + 2*f[2] + 3*f[3]
	}
	return X, Y
}

// pairConsts is the size of the 64-byte rows' kernel constants: step 0's
// key offsets, D0..D3 and step 1's key offsets (4 lanes each).
const pairConsts = 24

// pairTotals returns, from the 64-byte rows' kernel's sums acc over R
// rows of 4-byte elements (R0, O0, R1, O1 and their prefix sums), X =
// sum over rows r of m_r*A_r and Y = sum of m_r*B_r for the factors m_r
// = m0 + 2r. With s a sum and p its prefix sum (sum of (R - r)*v_r), sum
// of m_r*v_r = m0*s + 2*(R*s - p). Lane q of step m is word i = 4m+q,
// elements 2i (its lower field, weighed: R's less O's shifted by 32,
// modulo 2^64 as every sum here) and 2i+1 (its upper field, O's).
func pairTotals(acc *[32]uint64, R, m0 uint64) (X, Y uint64) {
	weigh := func(j int) uint64 { return weighed(acc[j], acc[16+j], R, m0, 2) }
	for m := range 2 {
		for q := range 4 {
			hi := weigh(8*m + 4 + q)
			lo := weigh(8*m+q) - hi<<32
			i := uint64(4*m + q)
			X += lo + hi
			Y += 2*i*lo + (2*i+1)*hi
		}
	}
	return X, Y
}
