package kernels

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/termtext"
)

// RunnerName is the runner's executable name.
const RunnerName = "kvaudit-cuda"

// RunnerEnv names the environment variable that gives the runner's path.
const RunnerEnv = "KVAUDIT_CUDA_RUNNER"

// DefaultStartTimeout bounds the runner's start: CUDA's initialization,
// the context and the kernels' JIT compilation.
const DefaultStartTimeout = 2 * time.Minute

// DefaultRequestTimeout bounds one request to the runner (one rank's
// checksums, or a benchmark): a runner that sends progress forever, or
// nothing, is stopped then.
const DefaultRequestTimeout = 10 * time.Minute

// ErrNoRunner is wrapped by FindRunner's error when no runner is found.
var ErrNoRunner = errors.New("the kvaudit-cuda runner is not installed")

// How FindRunner found the runner (Runner.Found).
const (
	FoundEnv    = "from $" + RunnerEnv
	FoundBeside = "beside kvaudit"
	FoundPath   = "on PATH"
	FoundGiven  = "as given"
)

// FindRunner returns the runner's path and how it was found (FoundEnv,
// FoundBeside, FoundPath): $KVAUDIT_CUDA_RUNNER when set (an error if it
// names no executable), else kvaudit-cuda beside the running executable,
// else kvaudit-cuda on PATH. The path is absolute where it can be made so.
func FindRunner() (path, found string, err error) {
	if p := os.Getenv(RunnerEnv); p != "" {
		lp, err := exec.LookPath(p)
		if err != nil {
			return "", "", fmt.Errorf("%s=%q: %w", RunnerEnv, p, err)
		}
		return absPath(lp), FoundEnv, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), RunnerName)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, FoundBeside, nil
		}
	}
	if p, err := exec.LookPath(RunnerName); err == nil {
		return absPath(p), FoundPath, nil
	}
	return "", "", fmt.Errorf("%w (no %s beside kvaudit or on PATH, and %s is not set)", ErrNoRunner, RunnerName, RunnerEnv)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// StartError is a runner that could not be started, or exited or said
// something else than its Hello at start. Msg holds what it printed.
type StartError struct {
	Path string
	Msg  string
}

func (e *StartError) Error() string { return fmt.Sprintf("%s failed to start: %s", e.Path, e.Msg) }

// RunnerOptions say how to start the runner.
type RunnerOptions struct {
	// Path is the runner; "" means FindRunner().
	Path string
	// Args are its arguments; nil means ["serve"].
	Args []string
	// Env, when not nil, is its environment.
	Env []string
	// StartTimeout bounds the wait for its Hello; 0 means
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// RequestTimeout bounds each request, from sending it to its final
	// answer, progress lines or not; 0 means DefaultRequestTimeout, a
	// negative value no deadline. A request past it stops the runner
	// (a *TimeoutError).
	RequestTimeout time.Duration
	// TimeoutSetting names what sets RequestTimeout, for the
	// *TimeoutError's message ("--cuda-timeout"); "" names none.
	TimeoutSetting string
	// Check is how many host-resident output slots of each request the
	// cpu engine recomputes (--runner-check): 0 the default sample
	// (DefaultSampleMin, or 1/DefaultSampleFraction of them), CheckAll
	// every one. Trust (--trust-runner) accepts what only the runner can
	// read, rows in device memory (EngineCheck.Trusted).
	Check int
	Trust bool
}

// TimeoutError is a request the runner did not answer in time
// (RunnerOptions.RequestTimeout); the runner was stopped.
type TimeoutError struct {
	Path    string
	Op      string
	Timeout time.Duration
	// Setting names what sets the deadline (RunnerOptions.TimeoutSetting).
	Setting string
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("cuda engine: %s did not answer a %s request within %v, the deadline of one request: it was stopped", e.Path, e.Op, e.Timeout)
	if e.Setting != "" {
		msg += " (" + e.Setting + " sets the deadline)"
	}
	return msg
}

// Runner is the checksum.Engine of --engine cuda: a running kvaudit-cuda
// that computes plans on its GPU. It is safe for use by several goroutines
// (requests are sent one at a time). Close ends the runner; so does the
// end of kvaudit (its stdin closes).
type Runner struct {
	path    string
	found   string
	hello   Hello
	stdin   io.WriteCloser
	lines   chan []byte // stdout lines; closed when the runner has exited
	stderr  *tail
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	// maxLine caps the next line read from the runner's stdout (see
	// lineCap); timeout and timeoutBy are RunnerOptions'.
	maxLine   atomic.Int64
	timeout   time.Duration
	timeoutBy string

	mu     sync.Mutex
	nextID int64
	broken error // once set, every call fails with it

	// check and trust are RunnerOptions'; checked is what checkResults
	// recomputed so far (Checked).
	check   int
	trust   bool
	checkMu sync.Mutex
	checked checksum.EngineCheck
}

// StartRunner starts the runner and waits for its Hello. A runner that is
// missing fails with an error wrapping ErrNoRunner; one that exits or
// says something else first (gorgonia.org/cu exits 1 without a GPU, with
// a message on stdout) with a *StartError holding what it printed.
func StartRunner(ctx context.Context, o RunnerOptions) (*Runner, error) {
	path, found := o.Path, FoundGiven
	if path == "" {
		var err error
		if path, found, err = FindRunner(); err != nil {
			return nil, err
		}
	}
	args := o.Args
	if args == nil {
		args = []string{"serve"}
	}
	cmd := exec.Command(path, args...)
	if o.Env != nil {
		cmd.Env = o.Env
	}
	// A runner whose children keep its stderr open is not waited for.
	cmd.WaitDelay = 2 * time.Second
	// lines holds one line: with the line being read and the one being
	// handled, at most three lines of lineCap bytes are held at once.
	r := &Runner{path: path, found: found, cmd: cmd, stderr: &tail{max: 4096}, lines: make(chan []byte, 1), exited: make(chan struct{})}
	r.maxLine.Store(minLineCap)
	r.timeout, r.timeoutBy = o.RequestTimeout, o.TimeoutSetting
	r.check, r.trust = o.Check, o.Trust
	if r.timeout == 0 {
		r.timeout = DefaultRequestTimeout
	}
	cmd.Stderr = r.stderr
	var err error
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, &StartError{Path: path, Msg: err.Error()}
	}
	go r.read(stdout)

	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var said []string // what the runner printed instead of a Hello
	saidBytes := 0    // len(said[i])+1 summed
	for {
		select {
		case <-ctx.Done():
			r.kill()
			return nil, ctx.Err()
		case <-timer.C:
			r.kill()
			if len(said) > 0 {
				return nil, &StartError{Path: path, Msg: r.exitMessage(said)}
			}
			return nil, &StartError{Path: path, Msg: fmt.Sprintf("no handshake after %v%s", timeout, r.stderrNote())}
		case line, ok := <-r.lines:
			if !ok {
				return nil, &StartError{Path: path, Msg: r.exitMessage(said)}
			}
			var h Hello
			if len(said) == 0 && json.Unmarshal(line, &h) == nil && h.Protocol != 0 {
				if h.Protocol != ProtocolVersion {
					r.kill()
					return nil, &StartError{Path: path, Msg: fmt.Sprintf("it speaks protocol %d, this kvaudit %d: install kvaudit and kvaudit-cuda of one release", h.Protocol, ProtocolVersion)}
				}
				r.hello = h.escaped()
				return r, nil
			}
			// Not a Hello: keep what it says until it exits (briefly), at
			// most maxSaid bytes of it.
			if saidBytes < maxSaid {
				said = append(said, clip(termtext.Escape(strings.TrimSpace(string(line))), maxSaid-saidBytes))
				saidBytes += len(said[len(said)-1]) + 1
			}
			if len(said) == 1 {
				timer.Reset(5 * time.Second)
			}
		}
	}
}

// Bounds on what is kept of a runner's output: a line of stdout (see
// lineCap), what a runner says instead of its handshake, and (in tail) its
// stderr. A runner that floods its output (KVAUDIT_CUDA_RUNNER=/usr/bin/yes)
// costs no more.
const (
	// minLineCap bounds a line outside a checksum request (the Hello,
	// a benchmark's answer, an error) and the fixed part of one inside.
	minLineCap = 1 << 20
	// lineBytesPerOutput bounds the bytes per output slot of a checksum
	// request's answer: a value is 21 bytes ("0x" and 16 hex digits,
	// quoted, a comma), and an engine may give a slot several values.
	lineBytesPerOutput = 64
	maxSaid            = 4096
)

// lineCap returns the longest line a request's answers may take: the
// fixed part and lineBytesPerOutput per output slot. A line is cut there
// as it is read, never buffered whole.
func lineCap(req *Request) int64 {
	return minLineCap + lineBytesPerOutput*int64(max(req.Outputs, 0))
}

// read passes the runner's stdout lines to r.lines, then waits for its
// exit and closes r.lines. A line longer than r.maxLine is passed on cut
// short, with a note, which no reader takes for a message; its rest is
// read and dropped as it comes, never held.
func (r *Runner) read(stdout io.Reader) {
	br := bufio.NewReaderSize(stdout, 1<<16)
	for {
		line, err := readLine(br, int(r.maxLine.Load()))
		if len(bytes.TrimSpace(line)) > 0 {
			r.lines <- line
		}
		if err != nil {
			break
		}
	}
	r.waitErr = r.cmd.Wait()
	close(r.exited)
	close(r.lines)
}

// kill ends the runner and waits for it.
func (r *Runner) kill() {
	if r.cmd.Process != nil {
		r.cmd.Process.Kill()
	}
	r.stdin.Close()
	for range r.lines {
	}
}

// exitMessage describes an exited runner: what it printed and its status.
func (r *Runner) exitMessage(said []string) string {
	var parts []string
	if len(said) > 0 {
		parts = append(parts, strings.Join(said, " "))
	}
	if s := r.stderr.String(); s != "" {
		parts = append(parts, s)
	}
	status := "it exited"
	if r.waitErr != nil {
		status = fmt.Sprintf("it exited (%v)", r.waitErr)
	}
	if len(parts) == 0 {
		return status + " without a word"
	}
	return strings.Join(parts, "; ") + " [" + status + "]"
}

func (r *Runner) stderrNote() string {
	if s := r.stderr.String(); s != "" {
		return "; it said: " + s
	}
	return ""
}

// Name returns "cuda".
func (r *Runner) Name() string { return "cuda" }

// Hello returns the runner's handshake: its device.
func (r *Runner) Hello() Hello { return r.hello }

// Path returns the runner's executable.
func (r *Runner) Path() string { return r.path }

// Found says how the runner was found: FoundEnv, FoundBeside, FoundPath,
// or FoundGiven (RunnerOptions.Path).
func (r *Runner) Found() string { return r.found }

// Run implements checksum.Engine: it sends the plan to the runner, which
// opens p.Dump.Path itself, the rows in device memory summed into output
// slots of their own (splitDevice), and checks the answer against the cpu
// engine (see checkResults): a runner whose results differ is an
// *checksum.InternalError naming it, and broken for good.
func (r *Runner) Run(ctx context.Context, orig *ckplan.Plan, out []uint64) error {
	dump, err := filepath.Abs(orig.Dump.Path)
	if err != nil {
		return err
	}
	p, dev := splitDevice(orig)
	req := Request{Op: OpChecksum, Dump: dump, Outputs: p.Outputs}
	for _, t := range p.Tasks {
		tm := TaskMessage{Group: -1, Layer: t.Cache.Layer.Name, Geometry: Signature(t.Cache)}
		for _, g := range p.Dump.Groups {
			for i, c := range g.Caches {
				if c == t.Cache {
					tm.Group, tm.Cache = g.Group.ID, i
				}
			}
		}
		if tm.Group < 0 {
			return fmt.Errorf("cuda engine: layer %q is not a cache of %q", t.Cache.Layer.Name, p.Dump.Path)
		}
		tm.Rows = make([][4]int64, len(t.Rows))
		for i, row := range t.Rows {
			tm.Rows[i] = [4]int64{int64(row.Block), row.FirstToken, int64(row.Valid), int64(row.Out)}
		}
		req.Tasks = append(req.Tasks, tm)
	}
	resp, err := r.call(ctx, &req, p.Progress)
	if err != nil {
		return err
	}
	if len(resp.Out) != p.Outputs {
		return r.fail(fmt.Errorf("cuda engine: %s sent %d outputs, want %d", r.path, len(resp.Out), p.Outputs))
	}
	got := make([]uint64, len(resp.Out))
	for i, v := range resp.Out {
		got[i] = uint64(v)
	}
	if err := r.checkResults(ctx, p, got, orig.Outputs); err != nil {
		return r.fail(err)
	}
	for k := range orig.Outputs {
		out[k] += got[k]
	}
	for i, k := range dev {
		out[k] += got[orig.Outputs+i]
	}
	return nil
}

// Bench runs the runner's benchmark.
func (r *Runner) Bench(ctx context.Context, req BenchRequest) (*BenchResult, error) {
	resp, err := r.call(ctx, &Request{Op: OpBench, Bench: &req}, nil)
	if err != nil {
		return nil, err
	}
	if resp.Bench == nil {
		return nil, r.fail(fmt.Errorf("cuda engine: %s sent no benchmark", r.path))
	}
	return resp.Bench, nil
}

// call sends one request and returns its final answer; progress lines go
// to progress. A runner that fails to answer is broken for good.
func (r *Runner) call(ctx context.Context, req *Request, progress func(int64)) (*Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken != nil {
		return nil, r.broken
	}
	r.nextID++
	req.ID = r.nextID
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	r.maxLine.Store(lineCap(req))
	defer r.maxLine.Store(minLineCap)
	var deadline <-chan time.Time
	if r.timeout > 0 {
		timer := time.NewTimer(r.timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	// Written aside, so that a runner that reads no request is stopped at
	// the deadline too.
	wrote := make(chan error, 1)
	go func() {
		_, err := r.stdin.Write(append(b, '\n'))
		wrote <- err
	}()
	for {
		select {
		case err := <-wrote:
			if err != nil {
				return nil, r.died()
			}
			wrote = nil
		case <-ctx.Done():
			r.kill()
			return nil, r.fail(ctx.Err())
		case <-deadline:
			r.kill()
			return nil, r.fail(&TimeoutError{Path: r.path, Op: req.Op, Timeout: r.timeout, Setting: r.timeoutBy})
		case line, ok := <-r.lines:
			if !ok {
				return nil, r.died()
			}
			var resp Response
			if err := json.Unmarshal(line, &resp); err != nil || resp.ID != req.ID {
				r.kill()
				return nil, r.fail(fmt.Errorf("cuda engine: %s broke the protocol: %q", r.path, clip(strings.TrimSpace(string(line)), 512)))
			}
			if !resp.Done {
				if progress != nil {
					progress(resp.Progress)
				}
				continue
			}
			if resp.Error != "" {
				return nil, fmt.Errorf("cuda engine: %s", clip(termtext.Escape(resp.Error), maxSaid))
			}
			return &resp, nil
		}
	}
}

// died reports a runner that exited during a request.
func (r *Runner) died() error {
	r.kill()
	<-r.exited
	return r.fail(fmt.Errorf("cuda engine: %s stopped: %s", r.path, r.exitMessage(nil)))
}

func (r *Runner) fail(err error) error {
	r.broken = err
	return err
}

// Close ends the runner: it closes its stdin and waits up to 10 seconds
// for it to exit, then kills it.
func (r *Runner) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stdin.Close()
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		r.kill()
	}
	if r.broken == nil {
		r.broken = errors.New("cuda engine: the runner is closed")
	}
	return nil
}

// readLine reads one line of at most max bytes; the rest of a longer line
// is read and dropped, and the line returned is its first 512 bytes and a
// note.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	over := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !over {
			if len(line)+len(chunk) > max {
				over = true
				// A new slice: the long one is let go at once.
				line = append(slices.Clone(line[:min(len(line), 512)]), fmt.Sprintf("... (a line of more than %d bytes)", max)...)
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, err
	}
}

// clip cuts s to at most n bytes (and a note).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:max(n, 0)] + "..."
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

// String returns the kept bytes on one line, escaped (internal/termtext):
// a runner's stderr is shown to a person.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return termtext.Escape(strings.Join(strings.Fields(string(t.b)), " "))
}
