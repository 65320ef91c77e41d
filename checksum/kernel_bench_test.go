package checksum

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkKernels times the SIMD kernels alone on a flash-shaped kernel
// row (128 runs of 256 bytes, 8 heads interleaved), in the first-level
// caches and over 64 MiB.
func BenchmarkKernels(b *testing.B) {
	if !simdAvailable {
		b.Skip("no SIMD kernel")
	}
	for _, size := range []int{32 << 10, 64 << 20} {
		data := make([]byte, size)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		const n, heads = 256, 8
		count := 128
		state := make([]uint64, 16*heads)
		consts := mixKernelConsts(64, n)
		var hsum [4]uint64
		b.Run(byteSize(size)+"/ab", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for off := 0; off+count*n <= size; off += count * n {
					accumSIMD(data, int64(off), n, n, count, 1, heads, state)
				}
			}
		})
		b.Run(byteSize(size)+"/ab+mix", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for off := 0; off+count*n <= size; off += count * n {
					accumMixSIMD(data, int64(off), n, n, count, 1, heads, state, &consts, &hsum)
				}
			}
		})
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return itoa(n>>20) + "MiB"
	}
	return itoa(n>>10) + "KiB"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
