//go:build amd64 && !purego

package checksum

import "golang.org/x/sys/cpu"

//go:generate go run ./internal/mixgen -o sums_mix_amd64.s

// simdAvailable says whether this machine runs the AVX2 kernel.
var simdAvailable = cpu.X86.HasAVX2

// accumAVX2 is implemented in sums_amd64.s.
//
//go:noescape
func accumAVX2(p *byte, n int, stride int, count int, group int, heads int, state *uint64)

// accumSIMD runs the kernel of sums_amd64.s: count runs of n bytes, run i
// at data[off+i*stride:], runs i*group.. of head i%heads, into state (12
// lanes per head). The caller checks that the runs lie in data, that n is
// a positive multiple of 32 and that state holds 12*heads lanes.
func accumSIMD(data []byte, off, stride int64, n, count, group, heads int, state []uint64) {
	accumAVX2(&data[off], n, int(stride), count, group, heads, &state[0])
}

// accumMixAVX2 is implemented in sums_mix_amd64.s.
//
//go:noescape
func accumMixAVX2(p *byte, n, stride, count, group, heads int, state, consts, hsum *uint64)

// accumMixSIMD is accumSIMD with kvaudit's mix check in the same pass
// (sums_mix_amd64.s): state holds 16 lanes per head (a, b, c as
// accumSIMD's, then the keys of the head's next four pieces, seeded with
// seedMixKeys), consts are mixKernelConsts and hsum the mix check's four
// lanes, shared by all heads.
func accumMixSIMD(data []byte, off, stride int64, n, count, group, heads int, state []uint64, consts *[mixConsts]uint64, hsum *[4]uint64) {
	accumMixAVX2(&data[off], n, int(stride), count, group, heads, &state[0], &consts[0], &hsum[0])
}

// stateRowsAVX2 is implemented in sums_state_amd64.s.
//
//go:noescape
func stateRowsAVX2(p *byte, n, stride, count, mix int, acc, keys, consts, hsum *uint64)

// stateRowsSIMD runs the state rows' kernel of sums_state_amd64.s: count
// rows of n bytes (a positive multiple of 32), row r at data[off+r*stride:],
// their sums of 2- or 4-byte elements (as consts say) into acc (see
// stateTotals), and with mix the mix check of every word (row r's first
// key keys[r]) into hsum. The caller checks the bounds.
func stateRowsSIMD(data []byte, off, stride int64, n, count int, mix bool, acc *[24]uint64, keys []uint64, consts *[stateConsts]uint64, hsum *[4]uint64) {
	m := 0
	if mix {
		m = 1
	}
	stateRowsAVX2(&data[off], n, int(stride), count, m, &acc[0], &keys[0], &consts[0], &hsum[0])
}

// rowWordsAVX2 is implemented in sums_state_amd64.s.
//
//go:noescape
func rowWordsAVX2(p *byte, mode, wide, count, words, stride int, offs *int64, tail uint64, mix int, acc, keys, consts, hsum *uint64)

// rowWordsSIMD runs the short state rows' kernel of sums_state_amd64.s
// from data[off:] (see rowWordsAVX2 for the modes); count is a multiple of
// 4, keys holds count keys, acc receives the rows' sums (see rowTotals),
// hsum their mix check when mix. The caller checks the bounds.
func rowWordsSIMD(data []byte, off int64, mode, w, count, words int, stride int64, offs []int64, tail uint64, mix bool, acc *[16]uint64, keys []uint64, consts *[rowConsts]uint64, hsum *[4]uint64) {
	wide := 0
	if w == 4 {
		wide = 1
	}
	var po *int64
	if len(offs) > 0 {
		po = &offs[0]
	}
	m := 0
	if mix {
		m = 1
	}
	rowWordsAVX2(&data[off], mode, wide, count, words, int(stride), po, tail, m, &acc[0], &keys[0], &consts[0], &hsum[0])
}

// adjacent16AVX2 is implemented in sums_state_amd64.s.
//
//go:noescape
func adjacent16AVX2(p *byte, count, mix int, acc, keys, consts, hsum *uint64)

// adjacent16SIMD runs the kernel for rows of at most four 2-byte elements
// in runs of one element each (rows adjacent) from data[off:], count rows
// (a multiple of 16), their sums into acc (see adjacentTotals) and with
// mix their mix check into hsum; consts holds the run offsets and masks
// after the short rows' constants. The caller checks the bounds.
func adjacent16SIMD(data []byte, off int64, count int, mix bool, acc *[64]uint64, keys []uint64, consts *[adjConsts]uint64, hsum *[4]uint64) {
	m := 0
	if mix {
		m = 1
	}
	adjacent16AVX2(&data[off], count, m, &acc[0], &keys[0], &consts[0], &hsum[0])
}

// wordRowsAVX2 is implemented in sums_state_amd64.s.
//
//go:noescape
func wordRowsAVX2(p *byte, count, stride, mix int, acc, keys, consts, hsum *uint64)

// wordRowsSIMD runs the one-word rows' kernel of sums_state_amd64.s from
// data[off:]: count rows (a multiple of 4) of one word each, row r at
// off + r*stride, their field sums into acc (see wordTotals) and with mix
// their mix check into hsum; consts are wordKernelConsts with the key
// offset set. The caller checks the bounds (a group reads 16 bytes from
// its rows 0 and 2).
func wordRowsSIMD(data []byte, off int64, count int, stride int64, mix bool, acc *[16]uint64, keys []uint64, consts *[wordConsts]uint64, hsum *[4]uint64) {
	m := 0
	if mix {
		m = 1
	}
	wordRowsAVX2(&data[off], count, int(stride), m, &acc[0], &keys[0], &consts[0], &hsum[0])
}

// pairRowsAVX2 is implemented in sums_state_amd64.s.
//
//go:noescape
func pairRowsAVX2(p *byte, count, stride, mix int, acc, keys, consts, hsum *uint64)

// pairRowsSIMD runs the kernel for state rows of 64 bytes of 4-byte
// elements of sums_state_amd64.s from data[off:]: count rows, row r at
// off + r*stride, their sums into acc (see pairTotals) and with mix their
// mix check into hsum; consts are pairKernelConsts. The caller checks the
// bounds.
func pairRowsSIMD(data []byte, off int64, count int, stride int64, mix bool, acc *[32]uint64, keys []uint64, consts *[pairConsts]uint64, hsum *[4]uint64) {
	m := 0
	if mix {
		m = 1
	}
	pairRowsAVX2(&data[off], count, int(stride), m, &acc[0], &keys[0], &consts[0], &hsum[0])
}
