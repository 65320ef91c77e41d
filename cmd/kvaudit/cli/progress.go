package cli

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
)

// Every draw on the terminal (progress bars, status lines) goes through
// draw, so an interruption can stop them all before it clears the line.
var (
	drawMu      sync.Mutex
	drawStopped bool
)

// draw runs f unless drawing was stopped.
func draw(f func()) {
	drawMu.Lock()
	defer drawMu.Unlock()
	if !drawStopped {
		f()
	}
}

// stopDrawing ends every bar and status line for good (until resumeDrawing)
// and clears the current line of a terminal w.
func stopDrawing(w io.Writer, terminal bool) {
	drawMu.Lock()
	defer drawMu.Unlock()
	if !drawStopped && terminal {
		fmt.Fprint(w, "\r\x1b[K")
	}
	drawStopped = true
}

func resumeDrawing() {
	drawMu.Lock()
	drawStopped = false
	drawMu.Unlock()
}

// progressDelay is how long work runs before its progress bar appears:
// quick commands print nothing.
var progressDelay = time.Second

// progress is a byte progress bar on stderr. It appears only when stderr
// is a terminal and the work has taken longer than progressDelay. Add is
// safe for concurrent use and costs one atomic addition: a goroutine of
// its own draws the bar, so engine threads never wait on the terminal. A
// nil *progress does nothing.
type progress struct {
	done  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
	total int64
}

// newProgress starts a bar for total bytes described by desc; it is nil
// when stderr is not a terminal or total is not positive.
func newProgress(s *Streams, total int64, desc string) *progress {
	if !s.ErrTerminal || total <= 0 {
		return nil
	}
	p := &progress{stop: make(chan struct{}), total: total}
	// The bar is made now, drawing into a gate that opens after
	// progressDelay: its rate counts from the start of the work. A bar made
	// only when it appears took every byte done before as done at once
	// (a 4 GB diff showed 1.2 TB/s).
	g := &gate{w: s.Err}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(g),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionEnableColorCodes(s.errColor()),
	)
	_ = bar.RenderBlank() // starts its clock
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		start := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				if g.open.Load() {
					draw(func() {
						bar.Set64(min(p.done.Load(), total))
						bar.Finish()
					})
				}
				return
			case <-tick.C:
			}
			if time.Since(start) >= progressDelay {
				g.open.Store(true)
			}
			draw(func() {
				bar.Set64(min(p.done.Load(), total))
				if g.open.Load() {
					_ = bar.RenderBlank() // redrawn while it stands still too (throttled)
				}
			})
		}
	}()
	return p
}

// gate passes writes on to w once open, and drops them before.
type gate struct {
	w    io.Writer
	open atomic.Bool
}

func (g *gate) Write(b []byte) (int, error) {
	if !g.open.Load() {
		return len(b), nil
	}
	return g.w.Write(b)
}

// Add records n more bytes done. It matches checksum.Plan.Progress.
func (p *progress) Add(n int64) {
	if p != nil {
		p.done.Add(n)
	}
}

// Callback returns Add as a checksum progress function, nil for a nil
// progress (so the engines skip the calls).
func (p *progress) Callback() func(int64) {
	if p == nil {
		return nil
	}
	return p.Add
}

// Finish removes the bar. It waits for the drawing goroutine to end.
func (p *progress) Finish() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
}

// newChecksumProgress starts a bar for checksumming the selected requests
// of dumps.
func newChecksumProgress(s *Streams, dumps []*layout.Dump, requests []string, desc string) *progress {
	if !s.ErrTerminal {
		return nil
	}
	var total int64
	for _, d := range dumps {
		p, _, err := checksum.NewPlan(d, requests)
		if err != nil {
			return nil // the checksum itself reports it
		}
		total += p.Bytes()
	}
	return newProgress(s, total, desc)
}

// status is a one-line status display on stderr for long steps (bench): a
// line is replaced by the next, and done clears it. It prints nothing
// when stderr is not a terminal.
type status struct {
	s     *Streams
	mu    sync.Mutex
	shown bool
}

func newStatus(s *Streams) *status { return &status{s: s} }

// line shows msg in place of the previous line.
func (st *status) line(msg string) {
	if !st.s.ErrTerminal {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	draw(func() {
		fmt.Fprintf(st.s.Err, "\r\x1b[K%s", msg)
		st.shown = true
	})
}

// done clears the status line.
func (st *status) done() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.shown {
		draw(func() { fmt.Fprint(st.s.Err, "\r\x1b[K") })
		st.shown = false
	}
}
