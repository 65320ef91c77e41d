//go:build amd64 && !purego

package checksum

import "golang.org/x/sys/cpu"

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
