//go:build amd64 && !purego

package sglangsum

import "golang.org/x/sys/cpu"

// kernelAvailable says whether this machine runs the AVX2 kernel.
var kernelAvailable = cpu.X86.HasAVX2

// adlerBlocksAVX2 is implemented in adler_amd64.s.
//
//go:noescape
func adlerBlocksAVX2(p *byte, chunks int, out *[24]uint32, consts *[64]byte)

// adlerConsts are the kernel's constants: the byte weights of one 32-byte
// step (32 down to 1), then sixteen little-endian int16 ones that widen
// their pair sums.
var adlerConsts = [64]byte{
	32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1,
	1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
}

// adlerSIMD is whether adlerUpdate runs the AVX2 kernel (kernelAvailable,
// switched off by tests to compare the two paths).
var adlerSIMD = kernelAvailable

// adlerBlocks returns, for the 32*chunks bytes at p, their byte sum and
// the sum of (n-k)*x_k (n their count), through the AVX2 kernel.
func adlerBlocks(p []byte, chunks int) (sum, weighted uint64) {
	var out [24]uint32
	adlerBlocksAVX2(&p[0], chunks, &out, &adlerConsts)
	var s, pre, q uint64
	for i := range 8 {
		s += uint64(out[i])
		pre += uint64(out[8+i])
		q += uint64(out[16+i])
	}
	return s, 32*pre + q
}
