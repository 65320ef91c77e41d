//go:build amd64 && !purego

package bench

import "golang.org/x/sys/cpu"

// vecRead says whether ReadSumVec has its AVX2 loop here.
var vecRead = cpu.X86.HasAVX2

// sumAVX2 is implemented in read_amd64.s.
//
//go:noescape
func sumAVX2(p *byte, n int) uint64

// ReadSumVec is ReadSum, vectorised: the same sum, the 128-byte steps
// through AVX2 (four 32-byte accumulators) where the machine has it. It
// is the fastest plain read of the bytes this machine does, the baseline
// every ratio is quoted against.
func ReadSumVec(b []byte) uint64 {
	n := len(b) &^ 127
	if !vecRead || n == 0 {
		return ReadSum(b)
	}
	return sumAVX2(&b[0], n) + ReadSum(b[n:])
}
