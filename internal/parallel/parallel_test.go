package parallel_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/kvaudit/kvaudit/internal/parallel"
)

// TestEach: every index runs once, the error is the first failing index's
// (as a loop in turn gives), and a panic reaches the caller, with one
// goroutine and with several.
func TestEach(t *testing.T) {
	for _, procs := range []int{1, 4} {
		t.Run(fmt.Sprint(procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			const n = 1000
			var ran [n]atomic.Int32
			if err := parallel.Each(n, func(i int) error { ran[i].Add(1); return nil }); err != nil {
				t.Fatal(err)
			}
			for i := range ran {
				if got := ran[i].Load(); got != 1 {
					t.Fatalf("index %d ran %d times", i, got)
				}
			}
			err := parallel.Each(n, func(i int) error {
				if i%100 == 37 {
					return fmt.Errorf("index %d", i)
				}
				return nil
			})
			if err == nil || err.Error() != "index 37" {
				t.Errorf("error %v, want index 37's", err)
			}
			boom := errors.New("boom")
			func() {
				defer func() {
					if r := recover(); r != boom {
						t.Errorf("recovered %v, want the panic of fn", r)
					}
				}()
				parallel.Each(n, func(i int) error {
					if i == 500 {
						panic(boom)
					}
					return nil
				})
			}()
		})
	}
}
