package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/schollz/progressbar/v3"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/termtext"
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

// progressTick is how often a bar or status line is redrawn, and
// progressThrottle the least time between two frames of a bar.
var (
	progressTick     = 100 * time.Millisecond
	progressThrottle = 100 * time.Millisecond
)

// progress is a progress bar on stderr, of bytes or of items. It appears
// only when stderr is a terminal and the work has taken longer than
// progressDelay, and it fits the terminal's width (termLine). Add is safe
// for concurrent use and costs one atomic addition: a goroutine of its own
// draws the bar, so engine threads never wait on the terminal. A nil
// *progress does nothing.
type progress struct {
	done  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
	total int64
}

// What a bar counts: bytes (it shows their rate), items (it shows how
// many are done), or units of work that mean nothing to the reader
// (synth's: it shows the percentage and times only).
type barKind int

const (
	barBytes barKind = iota
	barItems
	barWork
)

// newProgress starts a bar for total bytes described by desc; it is nil
// when stderr is not a terminal or total is not positive.
func newProgress(s *Streams, total int64, desc string) *progress {
	return startBar(s, total, desc, barBytes)
}

// newCountProgress starts a bar for total items (trials, files)
// described by desc; nil as for newProgress.
func newCountProgress(s *Streams, total int64, desc string) *progress {
	return startBar(s, total, desc, barItems)
}

// newWorkProgress starts a bar for total units of work described by
// desc; nil as for newProgress.
func newWorkProgress(s *Streams, total int64, desc string) *progress {
	return startBar(s, total, desc, barWork)
}

// The cells of a bar's line besides the description and the bar: the
// percentage and the bar's ends ("  66% |", "| "), the elapsed and
// remaining times (" [12s:1m4s]", up to " [59m59s:59m59s]" before
// termLine cuts the line) and the stats: the rate of bytes ("(905 MB/s)"),
// with the bytes done when the terminal is wide enough ("(1.2 GB/2.6 GB,
// 905 MB/s)"), or the items done ("(3/12)").
const (
	barFrame  = len("  66% |") + len("| ")
	barTimes  = len(" [1m23s:12m34s]")
	rateStats = len("(999 MB/s)")
	byteStats = len("(999 MB/999 GB, 999 MB/s)")
)

func countStats(total int64) int { return 2*len(strconv.FormatInt(total, 10)) + len("(/)") }

func startBar(s *Streams, total int64, desc string, kind barKind) *progress {
	if !s.ErrTerminal || total <= 0 {
		return nil
	}
	p := &progress{stop: make(chan struct{}), total: total}
	// The bar is made now, drawing into a line that opens after
	// progressDelay: its rate counts from the start of the work. A bar made
	// only when it appears took every byte done before as done at once
	// (a 4 GB diff showed 1.2 TB/s).
	line := &termLine{s: s}
	width := s.errWidth() - 1 // the last column would wrap on some terminals
	desc = termtext.Line(desc)
	var stats int
	switch kind {
	case barItems:
		stats = countStats(total)
	case barBytes:
		stats = rateStats
		if width-ansi.StringWidth(desc)-barFrame-barTimes-byteStats >= 20 {
			stats = byteStats
		}
	}
	desc = fitText(desc, width-barFrame-barTimes-stats-minBar)
	barWidth := min(maxBar, width-ansi.StringWidth(desc)-barFrame-barTimes-stats)
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(line),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(max(minBar, barWidth)),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(progressThrottle),
		progressbar.OptionUseANSICodes(true),
		progressbar.OptionEnableColorCodes(s.errColor()),
	}
	switch {
	case kind == barWork:
	case kind == barItems:
		opts = append(opts, progressbar.OptionShowCount())
	case stats == byteStats:
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowTotalBytes(true), progressbar.OptionShowCount())
	default:
		opts = append(opts, progressbar.OptionShowBytes(true))
	}
	bar := progressbar.NewOptions64(total, opts...)
	if progressDelay <= 0 {
		line.open.Store(true)
	}
	_ = bar.RenderBlank() // starts its clock
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		start := time.Now()
		tick := time.NewTicker(progressTick)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				if line.open.Load() {
					draw(func() {
						// The bar as it ends (full when the work is
						// done), then an empty line for what follows.
						done := min(p.done.Load(), total)
						if done == total {
							_ = bar.Finish()
						} else {
							_ = bar.Set64(done)
						}
						line.clear()
					})
				}
				return
			case <-tick.C:
			}
			if time.Since(start) >= progressDelay {
				line.open.Store(true)
			}
			draw(func() {
				_ = bar.Set64(min(p.done.Load(), total-1)) // full only in Finish
				if line.open.Load() {
					_ = bar.RenderBlank() // redrawn while it stands still too (throttled)
				}
			})
		}
	}()
	return p
}

// The bar's width in cells, between its ends: at most maxBar, and at
// least minBar (the description is cut short for it).
const (
	minBar = 10
	maxBar = 40
)

// fitText cuts s to at most n cells, ending it with "…" when cut.
func fitText(s string, n int) string {
	if ansi.StringWidth(s) <= n {
		return s
	}
	if n <= 1 {
		return ""
	}
	return ansi.Truncate(s, n, "…")
}

// termLine is the one line progress bars draw on a terminal's stderr. It
// drops what is written before it opens (a bar appears only after
// progressDelay), and draws each frame a bar writes as "\r", the frame cut
// to the terminal's width less one cell, and an erase to the end of the
// line: a frame never wraps, so the next one, after its "\r", always
// overwrites it whole and no stale line is left behind, whatever the
// width of either. A frame with nothing to show clears the line.
type termLine struct {
	s     *Streams
	open  atomic.Bool
	drawn bool
}

func (l *termLine) Write(b []byte) (int, error) {
	if !l.open.Load() {
		return len(b), nil
	}
	// A frame of progressbar (OptionUseANSICodes): "\r", the text and
	// "\x1b[0K"; its clear: "\x1b[2K\r".
	text := strings.NewReplacer("\r", "", "\x1b[0K", "", "\x1b[2K", "", "\x1b[K", "").Replace(string(b))
	if strings.TrimSpace(ansi.Strip(text)) == "" {
		l.clear()
		return len(b), nil
	}
	l.show(text)
	return len(b), nil
}

// show draws text as the line.
func (l *termLine) show(text string) {
	text = strings.TrimRight(text, " ")
	fmt.Fprintf(l.s.Err, "\r%s\x1b[K", fitText(text, l.s.errWidth()-1))
	l.drawn = true
}

// clear erases the line, if anything was drawn.
func (l *termLine) clear() {
	if l.drawn {
		fmt.Fprint(l.s.Err, "\r\x1b[K")
		l.drawn = false
	}
}

// Add records n more bytes done. It matches ckplan.Plan.Progress.
func (p *progress) Add(n int64) {
	if p != nil {
		p.done.Add(n)
	}
}

// Set records n bytes (or items) done in all.
func (p *progress) Set(n int64) {
	if p != nil {
		p.done.Store(n)
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

// status is a one-line status display on stderr for long steps whose
// work is not counted: a line is replaced by the next, and done clears
// it. The line fits the terminal (termLine). It prints nothing when
// stderr is not a terminal.
type status struct {
	line termLine
	mu   sync.Mutex
}

func newStatus(s *Streams) *status {
	st := &status{line: termLine{s: s}}
	st.line.open.Store(true)
	return st
}

// show shows msg in place of the previous line. msg is escaped
// (termtext.Line): it may hold names from the input.
func (st *status) show(msg string) {
	if !st.line.s.ErrTerminal {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	draw(func() { st.line.show(termtext.Line(msg)) })
}

// done clears the status line.
func (st *status) done() {
	st.mu.Lock()
	defer st.mu.Unlock()
	draw(st.line.clear)
}
