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
