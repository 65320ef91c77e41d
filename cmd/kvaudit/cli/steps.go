package cli

import (
	"sync"
	"time"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// longStep shows msg as a status line on stderr while a step runs, once
// it has taken longer than progressDelay (quick steps print nothing), for
// steps whose bytes are not counted (synthesizing, injecting, preparing,
// drilling down). The returned function ends the step and clears the
// line; it is safe to call more than once.
func longStep(s *Streams, msg string) (done func()) {
	if !s.ErrTerminal {
		return func() {}
	}
	st := newStatus(s)
	var mu sync.Mutex
	ended := false
	t := time.AfterFunc(progressDelay, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			st.line(msg + " ...")
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		defer mu.Unlock()
		ended = true
		st.done()
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
