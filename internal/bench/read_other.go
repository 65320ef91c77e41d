//go:build !amd64 || purego

package bench

// vecRead is false: no vectorised read in this build.
var vecRead = false

// ReadSumVec is ReadSum: this build has no vectorised loop.
func ReadSumVec(b []byte) uint64 { return ReadSum(b) }
