//go:build !amd64 || purego

package checksum

// simdAvailable is false: this build has only the generic loops.
var simdAvailable = false

// sumsSIMD is never called without simdAvailable.
func sumsSIMD(data []byte, off int64, stride int64, count int, n int, ab []uint64) {
	panic("checksum: no SIMD kernel in this build")
}
