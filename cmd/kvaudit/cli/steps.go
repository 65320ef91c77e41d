package cli

import (
	"fmt"
	"sync"
	"time"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// longStep shows msg as a status line on stderr while a step runs, once
// it has taken longer than progressDelay (quick steps print nothing), for
// steps whose bytes are not counted (injecting, preparing, drilling
// down). The line counts the seconds the step has taken, so a long step
// is seen to go on. The returned function ends the step and clears the
// line; it is safe to call more than once.
func longStep(s *Streams, msg string) (done func()) {
	if !s.ErrTerminal {
		return func() {}
	}
	st := newStatus(s)
	stop := make(chan struct{})
	ended := make(chan struct{})
	start := time.Now()
	first := progressDelay
	if first <= 0 {
		st.show(msg + " ... 0s") // at once: every step is long
		first = progressTick
	}
	go func() {
		defer close(ended)
		wait := time.NewTimer(first)
		defer wait.Stop()
		select {
		case <-stop:
			return
		case <-wait.C:
		}
		tick := time.NewTicker(progressTick)
		defer tick.Stop()
		for {
			st.show(fmt.Sprintf("%s ... %s", msg, time.Since(start).Truncate(time.Second)))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-ended
			st.done()
		})
	}
}

// verifyProgress returns the progress hooks of verify's options for the
// streams: a byte bar per side's checksums, a status line per long step.
func verifyProgress(s *Streams) (side.Progress, verify.Step) {
	progress := func(side string, dumps []*layout.Dump, requests []string) (func(int64), func()) {
		bar := newChecksumProgress(s, dumps, requests, "checksum "+side)
		return bar.Callback(), bar.Finish
	}
	step := func(what string) func() { return longStep(s, what) }
	return progress, step
}
