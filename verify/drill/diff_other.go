//go:build !amd64 || purego

package drill

// useSIMD is false: this build has only the generic loop.
var useSIMD = false

// diffSIMD, diffSegsSIMD and diffItemsSIMD are never called without
// useSIMD.
func diffSIMD(a, b []byte, d *wordDiff) { panic("drill: no SIMD kernel in this build") }

func diffSegsSIMD(a []byte, x int64, b []byte, y int64, segs []seg, d *wordDiff) {
	panic("drill: no SIMD kernel in this build")
}

func diffItemsSIMD(a []byte, x, sa int64, b []byte, y, sb int64, count int, segs []seg, d *itemsDiff) {
	panic("drill: no SIMD kernel in this build")
}

// maxTokenRun bounds the segments diffItemsSIMD takes (never called).
const maxTokenRun = 0
