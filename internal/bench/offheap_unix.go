//go:build unix

package bench

import "golang.org/x/sys/unix"

// offHeap returns n bytes of anonymous memory outside the Go heap (the
// copy method's destinations, which would otherwise count in the peak
// heap that bench reports), or heap memory if the mapping fails. It is
// never freed: bench runs once per process.
func offHeap(n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n)
	}
	return b
}
