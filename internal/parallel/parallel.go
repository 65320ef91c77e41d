// Package parallel runs the iterations of an index loop on up to
// GOMAXPROCS goroutines.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Each calls fn(i) for every i in [0, n) on up to GOMAXPROCS goroutines,
// each taking the next i, and returns the error of the first i (in index
// order) that failed, as a loop over them in turn would; with one
// goroutine it is that loop, stopping at the first error. A panic in fn
// is raised again on the caller's goroutine, where the caller may recover
// it (kvaudit reports an internal error), as it would in turn.
func Each(n int, fn func(i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	panics := make([]any, workers)
	for w := range workers {
		wg.Go(func() {
			defer func() { panics[w] = recover() }()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				errs[i] = fn(i)
			}
		})
	}
	wg.Wait()
	for _, r := range panics {
		if r != nil {
			panic(r)
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
