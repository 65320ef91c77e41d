//go:build !amd64 || purego

package sglangsum

// kernelAvailable is false: this build has only hash/adler32.
const kernelAvailable = false

// adlerSIMD is false: this build has no Adler-32 kernel, and adlerUpdate
// is hash/adler32.
var adlerSIMD = false

// adlerBlocks is never called without adlerSIMD.
func adlerBlocks(p []byte, chunks int) (sum, weighted uint64) {
	panic("sglangsum: no Adler-32 kernel in this build")
}
