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
	"strings"
	"sync"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
)

// RunnerName is the runner's executable name.
const RunnerName = "kvaudit-cuda"

// RunnerEnv names the environment variable that gives the runner's path.
const RunnerEnv = "KVAUDIT_CUDA_RUNNER"

// DefaultStartTimeout bounds the runner's start: CUDA's initialization,
// the context and the kernels' JIT compilation.
const DefaultStartTimeout = 2 * time.Minute

// ErrNoRunner is wrapped by FindRunner's error when no runner is found.
var ErrNoRunner = errors.New("the kvaudit-cuda runner is not installed")

// FindRunner returns the runner's path: $KVAUDIT_CUDA_RUNNER when set (an
// error if it names no executable), else kvaudit-cuda beside the running
// executable, else kvaudit-cuda on PATH.
func FindRunner() (string, error) {
	if p := os.Getenv(RunnerEnv); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("%s=%q: %w", RunnerEnv, p, err)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), RunnerName)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(RunnerName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w (no %s beside kvaudit or on PATH, and %s is not set)", ErrNoRunner, RunnerName, RunnerEnv)
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
}

// Runner is the checksum.Engine of --engine cuda: a running kvaudit-cuda
// that computes plans on its GPU. It is safe for use by several goroutines
// (requests are sent one at a time). Close ends the runner; so does the
// end of kvaudit (its stdin closes).
type Runner struct {
	path    string
	hello   Hello
	stdin   io.WriteCloser
	lines   chan []byte // stdout lines; closed when the runner has exited
	stderr  *tail
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error

	mu     sync.Mutex
	nextID int64
	broken error // once set, every call fails with it
}

// StartRunner starts the runner and waits for its Hello. A runner that is
// missing fails with an error wrapping ErrNoRunner; one that exits or
// says something else first (gorgonia.org/cu exits 1 without a GPU, with
// a message on stdout) with a *StartError holding what it printed.
func StartRunner(ctx context.Context, o RunnerOptions) (*Runner, error) {
	path := o.Path
	if path == "" {
		var err error
		if path, err = FindRunner(); err != nil {
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
	r := &Runner{path: path, cmd: cmd, stderr: &tail{max: 4096}, lines: make(chan []byte, 64), exited: make(chan struct{})}
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
				r.hello = h
				return r, nil
			}
			// Not a Hello: keep what it says until it exits (briefly), at
			// most maxSaid bytes of it.
			if saidBytes < maxSaid {
				said = append(said, clip(strings.TrimSpace(string(line)), maxSaid-saidBytes))
				saidBytes += len(said[len(said)-1]) + 1
			}
			if len(said) == 1 {
				timer.Reset(5 * time.Second)
			}
		}
	}
}

// Bounds on what is kept of a runner's output: a line of stdout (a
// response with every output of a plan fits many times over), what a runner
// says instead of its handshake, and (in tail) its stderr. A runner that
// floods its output (KVAUDIT_CUDA_RUNNER=/usr/bin/yes) costs no more.
const (
	maxRunnerLine = 1 << 28
	maxSaid       = 4096
)

// read passes the runner's stdout lines to r.lines, then waits for its
// exit and closes r.lines. A line longer than maxRunnerLine is passed on
// cut short, with a note, which no reader takes for a message.
func (r *Runner) read(stdout io.Reader) {
	br := bufio.NewReaderSize(stdout, 1<<16)
	for {
		line, err := readLine(br, maxRunnerLine)
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

// Run implements checksum.Engine: it sends the plan to the runner, which
// opens p.Dump.Path itself.
func (r *Runner) Run(ctx context.Context, p *checksum.Plan, out []uint64) error {
	dump, err := filepath.Abs(p.Dump.Path)
	if err != nil {
		return err
	}
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
	for i, v := range resp.Out {
		out[i] += uint64(v)
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
	if _, err := r.stdin.Write(append(b, '\n')); err != nil {
		return nil, r.died()
	}
	for {
		select {
		case <-ctx.Done():
			r.kill()
			return nil, r.fail(ctx.Err())
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
				return nil, fmt.Errorf("cuda engine: %s", resp.Error)
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
				line = append(line[:min(len(line), 512)], fmt.Sprintf("... (a line of more than %d bytes)", max)...)
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

// String returns the kept bytes on one line.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(strings.Fields(string(t.b)), " ")
}
