//go:build !unix

package bench

// offHeap returns n bytes from the heap: this system has no anonymous
// mapping here.
func offHeap(n int) []byte { return make([]byte, n) }
