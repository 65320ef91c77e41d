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
