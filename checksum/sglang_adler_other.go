//go:build !amd64 || purego

package checksum

// adlerSIMD is false: this build has no Adler-32 kernel, and adlerUpdate
// is hash/adler32.
var adlerSIMD = false

// adlerBlocks is never called without adlerSIMD.
func adlerBlocks(p []byte, chunks int) (sum, weighted uint64) {
	panic("checksum: no Adler-32 kernel in this build")
}
