package cli

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuilder is a strings.Builder safe for the bar's goroutine.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProgressSilentWhenPiped: without a terminal on stderr there is no
// bar and no callback (the engines skip the calls).
func TestProgressSilentWhenPiped(t *testing.T) {
	var errb syncBuilder
	p := newProgress(&Streams{Err: &errb}, 1000, "checksum")
	if p != nil || p.Callback() != nil {
		t.Fatal("a progress bar without a terminal")
	}
	p.Add(10)
	p.Finish()
	st := newStatus(&Streams{Err: &errb})
	st.show("working")
	st.done()
	if errb.String() != "" {
		t.Errorf("wrote %q to a pipe", errb.String())
	}
}

// TestProgressOnTerminal: on a terminal the bar appears once the work has
// run longer than the delay, and is cleared at the end.
func TestProgressOnTerminal(t *testing.T) {
	old := progressDelay
	progressDelay = 0
	defer func() { progressDelay = old }()
	var errb syncBuilder
	p := newProgress(&Streams{Err: &errb, ErrTerminal: true, NoColor: true}, 1000, "checksum")
	add := p.Callback()
	add(400)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errb.String(), "checksum") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	add(600)
	p.Finish()
	if out := errb.String(); !strings.Contains(out, "checksum") || !strings.Contains(out, "%") {
		t.Errorf("no bar drawn: %q", out)
	}
}

// TestProgressQuickWorkDrawsNothing: work done within the delay leaves
// stderr empty even on a terminal.
func TestProgressQuickWorkDrawsNothing(t *testing.T) {
	old := progressDelay
	progressDelay = time.Hour
	defer func() { progressDelay = old }()
	var errb syncBuilder
	p := newProgress(&Streams{Err: &errb, ErrTerminal: true}, 1000, "checksum")
	p.Add(1000)
	p.Finish()
	if errb.String() != "" {
		t.Errorf("quick work drew %q", errb.String())
	}
}

// TestInterruptionClearsTheBar: once an interruption stops drawing, the
// bar's line is cleared and nothing is drawn after it, even while the
// work goes on.
func TestInterruptionClearsTheBar(t *testing.T) {
	old := progressDelay
	progressDelay = 0
	defer func() { progressDelay = old; resumeDrawing() }()
	var errb syncBuilder
	s := &Streams{Err: &errb, ErrTerminal: true, NoColor: true}
	p := newProgress(s, 1000, "checksum")
	p.Add(400)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errb.String(), "checksum") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if code := interrupted(s, os.Interrupt); code != ExitInterrupted {
		t.Errorf("exit code %d, want %d", code, ExitInterrupted)
	}
	at := len(errb.String())
	p.Add(300)
	time.Sleep(300 * time.Millisecond) // a few of the bar's ticks
	st := newStatus(s)
	st.show("still working")
	p.Finish()
	out := errb.String()
	if !strings.HasSuffix(out[:at], "\r\x1b[Kkvaudit: interrupted\n") {
		t.Errorf("the line was not cleared before the message: %q", out[:at])
	}
	if after := out[at:]; after != "" {
		t.Errorf("drawn after the interruption: %q", after)
	}
}

// TestProgressRateCountsFromTheStart: the bar's rate is the bytes done
// over the time since the work started, not since the bar appeared: work
// that did 1 GB before a bar that appears after 300 ms shows at most
// 1 GB / 300 ms (a bar that started its clock when it appeared showed
// terabytes per second).
func TestProgressRateCountsFromTheStart(t *testing.T) {
	old := progressDelay
	progressDelay = 300 * time.Millisecond
	defer func() { progressDelay = old }()
	var errb syncBuilder
	p := newProgress(&Streams{Err: &errb, ErrTerminal: true, NoColor: true}, 2e9, "checksum")
	p.Add(1e9)
	deadline := time.Now().Add(10 * time.Second)
	rate := regexp.MustCompile(`([0-9.]+) ([kMGTPE]?B)/s`)
	for !rate.MatchString(errb.String()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	p.Finish()
	m := rate.FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("no rate drawn: %q", errb.String())
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	v *= map[string]float64{"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15, "EB": 1e18}[m[2]]
	if max := 1e9 / progressDelay.Seconds() * 1.05; v > max {
		t.Errorf("the bar shows %s %s/s, more than the %.2g B/s done since the start", m[1], m[2], max)
	}
}
