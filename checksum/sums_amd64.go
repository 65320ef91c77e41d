//go:build amd64 && !purego

package checksum

import "golang.org/x/sys/cpu"

// simdAvailable says whether this machine runs the AVX2 kernel.
var simdAvailable = cpu.X86.HasAVX2

// sumsAVX2 is implemented in sums_amd64.s.
//
//go:noescape
func sumsAVX2(p *byte, stride int, count int, n int, out *uint64)

// sumsSIMD writes A and B (as sumAB) of count runs of n bytes to ab: run i
// is data[off+i*stride : off+i*stride+n], n a positive multiple of 32.
// The caller checks that the runs lie in data and len(ab) >= 2*count.
func sumsSIMD(data []byte, off int64, stride int64, count int, n int, ab []uint64) {
	sumsAVX2(&data[off], int(stride), count, n, &ab[0])
}
