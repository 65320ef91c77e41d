//go:build !amd64 || purego

package checksum

// simdAvailable is false: this build has only the generic loops.
var simdAvailable = false

// accumSIMD is never called without simdAvailable.
func accumSIMD(data []byte, off, stride int64, n, count, group, heads int, state []uint64) {
	panic("checksum: no SIMD kernel in this build")
}

// accumMixSIMD is never called without simdAvailable.
func accumMixSIMD(data []byte, off, stride int64, n, count, group, heads int, state []uint64, consts *[mixConsts]uint64, hsum *[4]uint64) {
	panic("checksum: no SIMD kernel in this build")
}

// stateRowsSIMD is never called without simdAvailable.
func stateRowsSIMD(data []byte, off, stride int64, n, count int, mix bool, acc *[24]uint64, keys []uint64, consts *[stateConsts]uint64, hsum *[4]uint64) {
	panic("checksum: no SIMD kernel in this build")
}

// rowWordsSIMD is never called without simdAvailable.
func rowWordsSIMD(data []byte, off int64, mode, w, count, words int, stride int64, offs []int64, tail uint64, mix bool, acc *[16]uint64, keys []uint64, consts *[rowConsts]uint64, hsum *[4]uint64) {
	panic("checksum: no SIMD kernel in this build")
}

// adjacent16SIMD is never called without simdAvailable.
func adjacent16SIMD(data []byte, off int64, count int, mix bool, acc *[64]uint64, keys []uint64, consts *[adjConsts]uint64, hsum *[4]uint64) {
	panic("checksum: no SIMD kernel in this build")
}

// wordRowsSIMD is never called without simdAvailable.
func wordRowsSIMD(data []byte, off int64, count int, stride int64, mix bool, acc *[16]uint64, keys []uint64, consts *[wordConsts]uint64, hsum *[4]uint64) {
	panic("checksum: no SIMD kernel in this build")
}

// pairRowsSIMD is never called without simdAvailable.
func pairRowsSIMD(data []byte, off int64, count int, stride int64, mix bool, acc *[32]uint64, keys []uint64, consts *[pairConsts]uint64, hsum *[4]uint64) {
	panic("checksum: no SIMD kernel in this build")
}
