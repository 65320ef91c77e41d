//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// TestProgressTerminal runs every command that shows progress with its
// stderr on a pseudo-terminal 80 columns wide, as a person sees it, and
// again with stderr a pipe, as CI logs get it. kvaudit is built with
// -tags kvaudit_testhooks (hookedKvaudit) and run with
// KVAUDIT_TEST_FAST_PROGRESS set, which draws bars at once and redraws
// them every few milliseconds (cmd/kvaudit/cli/progress_testhooks.go), so
// the small inputs here show many frames. On the terminal, replayed on an
// 80-column screen (screen): no frame is wider than the screen (a frame
// that wraps leaves its first line behind at every redraw), the bar
// reaches 100% where the work is counted, and what stays on the screen
// at the end is exactly what the pipe got: no frame is left behind. In
// the pipe: no bar, no carriage return, no escape sequence.
func TestProgressTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kvaudit")
	}
	m, s, err := openPty(80)
	if err != nil {
		t.Skipf("no pseudo-terminal here (%v)", err)
	}
	m.Close()
	s.Close()
	t.Parallel()
	bin := hookedKvaudit(t)
	// A long directory name: a status line naming a path must still fit.
	dir := filepath.Join(t.TempDir(), "a-directory-whose-name-alone-takes-most-of-an-eighty-column-line")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	kv := filepath.Join(dir, "kv")
	for _, args := range [][]string{
		{"synth", "--out", kv, "--preset", "tiny", "--layout", "hnd", "--store", "vllm-fs"},
		{"synth", "--out", kv, "--preset", "tiny", "--layout", "hnd", "--role", "consumer", "--tp", "2", "--transfers"},
	} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("kvaudit %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		// bar: the work is counted, and the bar must reach 100%; else
		// a status line must be shown.
		bar bool
		// out: the command writes into this path of dir, removed
		// before each run.
		out string
	}{
		{name: "checksum", args: []string{"checksum", kv + "/producer"}, bar: true},
		{name: "diff", args: []string{"diff", kv + "/producer", kv + "/consumer"}, bar: true},
		{name: "transfers", args: []string{"transfers", "--producer", kv + "/producer", "--consumer", kv + "/consumer", kv + "/nixl"}, bar: true},
		{name: "synth", args: []string{"synth", "--out", filepath.Join(dir, "synth"), "--preset", "tiny", "--tp", "2"}, bar: true, out: "synth"},
		{name: "inject", args: []string{"inject", kv + "/producer", "--fault", "bit-flip", "--out", filepath.Join(dir, "bad")}, bar: true, out: "bad"},
		{name: "campaign", args: []string{"campaign", "--faults", "bit-flip,zero-block", "--trials", "2", "--dir", dir}, bar: true},
		{name: "scrub", args: []string{"scrub", kv + "/store/vllm-fs"}, bar: true},
		{name: "bench", args: []string{"bench", "--size", "4MB", "--reps", "1", "--warmup", "0", "--threads", "1", "--no-end-to-end", "--ref-sample", "1MB", "--dir", dir}, bar: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(tty bool) (stderr []byte) {
				if c.out != "" {
					if err := os.RemoveAll(filepath.Join(dir, c.out)); err != nil {
						t.Fatal(err)
					}
				}
				stderr, code := runStderr(t, bin, dir, tty, c.args...)
				if code != c.code {
					t.Fatalf("kvaudit %s exited %d, want %d (stderr on a terminal: %v)\n%s", c.name, code, c.code, tty, stderr)
				}
				return stderr
			}
			piped := run(false)
			if bytes.ContainsAny(piped, "\r\x1b") || bytes.Contains(piped, []byte("%")) {
				t.Errorf("stderr into a pipe holds a bar, a carriage return or an escape sequence:\n%q", piped)
			}
			raw := run(true)
			sc := newScreen(80)
			sc.write(raw)
			if len(sc.wrappedFrames) > 0 {
				t.Errorf("%d frame(s) wider than 80 columns, each leaving a stale line, the first:\n%q", len(sc.wrappedFrames), sc.wrappedFrames[0])
			}
			if len(sc.frames) == 0 {
				t.Fatalf("no progress drawn on the terminal:\n%q", raw)
			}
			if c.bar {
				full := false
				for _, f := range sc.frames {
					if strings.Contains(f, "100%") {
						full = true
					}
				}
				if !full {
					t.Errorf("the bar never reaches 100%%; the last frame: %q", sc.frames[len(sc.frames)-1])
				}
			}
			pipe := newScreen(80)
			pipe.write(bytes.ReplaceAll(piped, []byte("\n"), []byte("\r\n")))
			if got, want := sc.text(), pipe.text(); got != want {
				t.Errorf("the terminal keeps what the pipe did not get (a stale frame):\nterminal:\n%s\npipe:\n%s", got, want)
			}
		})
	}
}

// runStderr runs bin args in dir with its stderr on a pseudo-terminal of
// 80 columns (tty) or a pipe, and stdout into a pipe; it returns what
// stderr got (the terminal's output, its \r\n as written) and the exit
// code.
func runStderr(t *testing.T, bin, dir string, tty bool, args ...string) ([]byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	env := []string{"NO_COLOR=1", "TERM=xterm-256color", "COLUMNS=", "KVAUDIT_TEST_FAST_PROGRESS=1"}
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); k != "NO_COLOR" && k != "COLUMNS" && k != "TERM" && !strings.HasPrefix(k, "KVAUDIT_") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	cmd.Stdin, cmd.Stdout = strings.NewReader(""), io.Discard
	var stderr bytes.Buffer
	var master *os.File
	copied := make(chan error, 1)
	if tty {
		m, s, err := openPty(80)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		master = m
		cmd.Stderr = s
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		go func() {
			_, err := io.Copy(&stderr, master)
			copied <- err
		}()
	} else {
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		copied <- nil
	}
	err := cmd.Wait()
	if cerr := <-copied; cerr != nil && !errors.Is(cerr, unix.EIO) {
		t.Fatalf("reading the terminal: %v", cerr)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return stderr.Bytes(), ee.ExitCode()
	case err != nil:
		t.Fatalf("running kvaudit: %v", err)
	}
	return stderr.Bytes(), 0
}

// screen replays a terminal's output on a screen of a given width, as a
// terminal does: printing wraps at the last column, \r goes back to the
// start of the line, \n down a line, ESC [ K (or 0K) erases to the end of
// the line and ESC [ 2K the whole line; other escape sequences (colors)
// are skipped.
type screen struct {
	width int
	rows  [][]rune
	row   int
	col   int
	// wrapped says the cursor's line was reached by wrapping since the
	// last \n.
	wrapped bool
	// frames are the lines a \r not followed by \n ends: the frames of a
	// bar or status line before each redraw, as shown (a frame that
	// wrapped, from its first row).
	frames []string
	// wrappedFrames are the frames that wrapped.
	wrappedFrames []string
	// frameRow is the row the current line started on.
	frameRow int
}

func newScreen(width int) *screen {
	return &screen{width: width, rows: [][]rune{nil}}
}

func (s *screen) write(b []byte) {
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				s.newline()
				i += 2
				continue
			}
			if f := s.frame(); strings.TrimSpace(f) != "" {
				s.frames = append(s.frames, f)
				if s.wrapped {
					s.wrappedFrames = append(s.wrappedFrames, f)
				}
			}
			s.row, s.col = s.frameRow, 0
			// A real terminal's \r goes to the start of the cursor's
			// row; a wrapped frame's first rows stay behind.
			if s.wrapped {
				s.row = len(s.rows) - 1
				s.frameRow = s.row
			}
			s.wrapped = false
			i++
		case c == '\n':
			s.newline()
			i++
		case c == 0x1b && i+1 < len(b) && b[i+1] == '[':
			j := i + 2
			for j < len(b) && (b[j] < 0x40 || b[j] > 0x7e) {
				j++
			}
			if j < len(b) {
				switch string(b[i+2 : j+1]) {
				case "K", "0K":
					s.rows[s.row] = s.rows[s.row][:min(s.col, len(s.rows[s.row]))]
				case "2K":
					s.rows[s.row] = nil
				}
			}
			i = j + 1
		default:
			r, n := utf8.DecodeRune(b[i:])
			i += n
			if r < 0x20 {
				continue
			}
			if s.col == s.width {
				s.rows = append(s.rows, nil)
				s.row, s.col = len(s.rows)-1, 0
				s.wrapped = true
			}
			line := s.rows[s.row]
			for len(line) <= s.col {
				line = append(line, ' ')
			}
			line[s.col] = r
			s.rows[s.row] = line
			s.col++
		}
	}
}

func (s *screen) newline() {
	s.rows = append(s.rows, nil)
	s.row, s.col = len(s.rows)-1, 0
	s.frameRow = s.row
	s.wrapped = false
}

// frame is the current line, from the row it started on.
func (s *screen) frame() string {
	var b strings.Builder
	for r := s.frameRow; r < len(s.rows); r++ {
		b.WriteString(string(s.rows[r]))
	}
	return b.String()
}

// text is the screen's rows, trailing spaces and blank rows at the end
// left out.
func (s *screen) text() string {
	var lines []string
	for _, r := range s.rows {
		lines = append(lines, strings.TrimRight(string(r), " "))
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}
