package cli

import (
	"testing"
	"time"
)

// TestLongStep: a step that outlasts progressDelay shows its line on a
// terminal, with the seconds it has taken, and clears it; a step that ends first, and a pipe, print
// nothing.
func TestLongStep(t *testing.T) {
	defer func(d time.Duration) { progressDelay = d }(progressDelay)
	progressDelay = 0 // every step is long
	var errb syncBuilder
	done := longStep(&Streams{Err: &errb, ErrTerminal: true}, "injecting bit-flip")
	for i := 0; i < 1000 && errb.String() == ""; i++ {
		time.Sleep(10 * time.Millisecond) // until the line is drawn
	}
	done()
	done()
	if got := errb.String(); got != "\rinjecting bit-flip ... 0s\x1b[K\r\x1b[K" {
		t.Errorf("long step drew %q", got)
	}

	progressDelay = time.Hour // no step is long
	var quick syncBuilder
	longStep(&Streams{Err: &quick, ErrTerminal: true}, "quick")()
	progressDelay = 0
	var pipe syncBuilder
	done = longStep(&Streams{Err: &pipe}, "piped")
	done()
	if quick.String() != "" || pipe.String() != "" {
		t.Errorf("quick step drew %q, a pipe got %q", quick.String(), pipe.String())
	}
}
