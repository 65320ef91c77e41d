//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"
)

// TestTerminal runs the stories of testdata/terminal: every command's
// tables as a person sees them, kvaudit's stdout a pseudo-terminal of a
// given width (pty), checked against what the same command prints into a
// pipe (fits).
func TestTerminal(t *testing.T) {
	m, s, err := openPty(80)
	if err != nil {
		t.Skipf("no pseudo-terminal here (%v): the terminal stories need /dev/ptmx and /dev/pts", err)
	}
	m.Close()
	s.Close()
	p := scriptParams(testscript.Params{Dir: "testdata/terminal"})
	p.Cmds["pty"] = cmdPty
	p.Cmds["fits"] = cmdFits
	p.Cmds["shows"] = cmdShows
	p.Cmds["jsonset"] = cmdJSONSet
	testscript.Run(t, p)
}

// openPty opens a pseudo-terminal pair of cols x 50 cells: the master
// (kvaudit's output is read there) and the slave (kvaudit's stdout).
func openPty(cols int) (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*os.File, *os.File, error) {
		m.Close()
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return fail(fmt.Errorf("unlockpt: %w", err))
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		return fail(fmt.Errorf("ptsname: %w", err))
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return fail(err)
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: uint16(cols)}); err != nil {
		s.Close()
		return fail(fmt.Errorf("setting the window size: %w", err))
	}
	return m, s, nil
}

// cmdPty runs kvaudit with its stdout on a pseudo-terminal COLS cells
// wide and checks its exit code: pty [-color] COLS CODE ARGS... The
// terminal's output (line ends as written, \r\n made \n) becomes the
// script's stdout, kvaudit's stderr (a pipe) its stderr. NO_COLOR is set
// unless -color is given (then color is on, as on a terminal).
func cmdPty(ts *testscript.TestScript, neg bool, args []string) {
	color := len(args) > 0 && args[0] == "-color"
	if color {
		args = args[1:]
	}
	if neg || len(args) < 2 {
		ts.Fatalf("usage: pty [-color] COLS CODE ARGS...")
	}
	cols, err := strconv.Atoi(args[0])
	ts.Check(err)
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	bin := ""
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		if p := filepath.Join(dir, "kvaudit"); fileExists(p) {
			bin = p
			break
		}
	}
	if bin == "" {
		ts.Fatalf("no kvaudit on the script's PATH")
	}
	master, slave, err := openPty(cols)
	ts.Check(err)
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args[2:]...)
	cmd.Dir = ts.MkAbs(".")
	env := []string{"PATH=" + ts.Getenv("PATH"), "HOME=" + ts.Getenv("HOME"), "TERM=xterm-256color", "COLUMNS="}
	if !color {
		env = append(env, "NO_COLOR=1")
	}
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); k != "NO_COLOR" && k != "COLUMNS" && k != "TERM" {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, scriptKVAuditEnv(ts)...)
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), slave, &stderr
	ts.Check(cmd.Start())
	slave.Close()
	var out bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(&out, master)
		copied <- err
	}()
	err = cmd.Wait()
	if cerr := <-copied; cerr != nil && !errors.Is(cerr, unix.EIO) {
		ts.Fatalf("reading the terminal: %v", cerr)
	}
	fmt.Fprint(ts.Stdout(), strings.ReplaceAll(out.String(), "\r\n", "\n"))
	fmt.Fprint(ts.Stderr(), stderr.String())
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("running kvaudit: %v", err)
	}
	if code != want {
		ts.Fatalf("kvaudit exited %d, want %d\nstderr: %s", code, want, stderr.String())
	}
}

// ttyTable is one table as a terminal shows it (title, grid, notes) or as
// a pipe gets it (title, tab-separated lines, notes).
type ttyTable struct {
	// text is the title and notes (every line outside the grid),
	// whitespace removed.
	text string
	// prose is the same with its words separated by one space.
	prose  string
	header []string
	// cols holds each column's text, top to bottom, whitespace removed:
	// a cell wrapped over lines reads as the cell unwrapped.
	cols []string
	// lines are the grid's lines (terminal) or rows (pipe), as shown.
	lines []string
}

var leftOut = regexp.MustCompile(`left out to fit \d+ columns: (.*) \(-o json has every field\)`)

var elapsed = regexp.MustCompile(`\b\d+\.\d+s\b`)

// noSpace is s without whitespace, and with times ("0.6s") made "Ns":
// they differ from run to run.
func noSpace(s string) string {
	return strings.Join(strings.Fields(elapsed.ReplaceAllString(s, "Ns")), "")
}

// splitTables splits an output into its tables at blank lines.
func splitTables(out string) [][]string {
	var tables [][]string
	var cur []string
	for l := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		if strings.TrimSpace(l) == "" {
			if cur != nil {
				tables = append(tables, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, l)
	}
	if cur != nil {
		tables = append(tables, cur)
	}
	return tables
}

// parsePiped reads tables as a pipe gets them.
func parsePiped(out string) []ttyTable {
	var ts []ttyTable
	for _, lines := range splitTables(out) {
		var t ttyTable
		for i, l := range lines {
			switch {
			case i == 0 && strings.HasPrefix(l, "# "):
				t.text += noSpace(strings.TrimPrefix(l, "# "))
			case strings.Contains(l, "\t"):
				cells := strings.Split(l, "\t")
				if t.cols == nil {
					t.cols = make([]string, len(cells))
				}
				for k, c := range cells {
					t.cols[k] += noSpace(c)
				}
				t.lines = append(t.lines, l)
			default:
				t.text += noSpace(l)
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// parseTerminal reads tables as a terminal shows them: the grid's
// vertical borders split cells; a header is the grid's first row when a
// separator follows it.
func parseTerminal(out string) []ttyTable {
	var ts []ttyTable
	for _, lines := range splitTables(ansi.Strip(out)) {
		var t ttyTable
		var rows [][]string
		headerAt := -1
		for _, l := range lines {
			trim := strings.TrimSpace(l)
			first, _ := utf8.DecodeRuneInString(trim)
			switch {
			case trim == "":
			case strings.ContainsRune("┌╭└╰", first):
			case first == '├':
				if headerAt < 0 {
					headerAt = len(rows)
				}
			case strings.HasPrefix(trim, "│"):
				cells := strings.Split(strings.Trim(trim, "│"), "│")
				rows = append(rows, cells)
				t.lines = append(t.lines, l)
			default:
				t.text += noSpace(l)
				t.prose += " " + strings.Join(strings.Fields(l), " ")
			}
		}
		start := 0
		if headerAt >= 1 {
			// a header may wrap at its spaces over several lines
			t.header = make([]string, len(rows[0]))
			for _, r := range rows[:headerAt] {
				for k, h := range r {
					if k < len(t.header) {
						t.header[k] = strings.TrimSpace(t.header[k] + " " + strings.TrimSpace(h))
					}
				}
			}
			start = headerAt
		}
		for _, r := range rows[start:] {
			if t.cols == nil {
				t.cols = make([]string, len(r))
			}
			for k, c := range r {
				if k < len(t.cols) {
					t.cols[k] += noSpace(c)
				}
			}
		}
		ts = append(ts, t)
	}
	return ts
}

var checksumWord = regexp.MustCompile(`0x[0-9a-f]{16}`)

var sentenceRef = regexp.MustCompile(`^\[\d+\]`)

// sentencesBelow says whether the terminal's column shown holds, for each
// piped cell of column k, the cell itself (a short one) or the number of
// its sentence ("[1]"), the terminal showing the sentence below a grid
// under that number (a Prose column, moved below the table).
func sentencesBelow(tty, shown string, p ttyTable, k int) bool {
	all := noSpace(ansi.Strip(tty))
	rest, refs := shown, 0
	for _, l := range p.lines[1:] {
		cells := strings.Split(l, "\t")
		if k >= len(cells) {
			continue
		}
		c := noSpace(cells[k])
		if ref := sentenceRef.FindString(rest); ref != "" && strings.Contains(all, ref+c) {
			rest, refs = rest[len(ref):], refs+1
			continue
		}
		if !strings.HasPrefix(rest, c) {
			return false
		}
		rest = rest[len(c):]
	}
	return rest == "" && refs > 0
}

// cmdFits checks the terminal output of the last pty command against the
// piped output in FILE: fits COLS FILE. Every line fits in COLS cells;
// the terminal shows the same tables, titles and notes; each column it
// keeps (all but those its note says were left out) holds, top to
// bottom, exactly the piped column's cells (wrapped cells read
// unwrapped), block maps only unless scaled; and no checksum is split
// over two lines. With FILE "-" only the widths are checked (a table whose
// numbers differ from run to run).
func cmdFits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: fits COLS FILE")
	}
	cols, err := strconv.Atoi(args[0])
	ts.Check(err)
	tty := ts.ReadFile("stdout")
	for i, l := range strings.Split(ansi.Strip(tty), "\n") {
		if w := ansi.StringWidth(l); w > cols {
			ts.Fatalf("line %d is %d cells wide, more than %d:\n%s", i+1, w, cols, l)
		}
	}
	if args[1] == "-" {
		return
	}
	piped, shown := parsePiped(ts.ReadFile(args[1])), parseTerminal(tty)
	if len(piped) != len(shown) {
		ts.Fatalf("%d tables piped, %d on the terminal:\n%s", len(piped), len(shown), tty)
	}
	// the sentences of Prose columns written below a grid ("[1] ...")
	// are not among the piped notes
	var cells []string
	for _, p := range piped {
		for _, l := range p.lines {
			for c := range strings.SplitSeq(l, "\t") {
				if c = noSpace(c); len(c) > 1 {
					cells = append(cells, c)
				}
			}
		}
	}
	for i := range shown {
		for _, c := range cells {
			shown[i].text = regexp.MustCompile(`\[\d+\]`+regexp.QuoteMeta(c)).ReplaceAllString(shown[i].text, "")
		}
	}
	for i, p := range piped {
		s := shown[i]
		if !strings.Contains(s.text, p.text) {
			ts.Fatalf("table %d: the title and notes on the terminal\n%s\ndo not hold the piped ones\n%s", i, s.text, p.text)
		}
		if len(p.cols) == 0 {
			continue
		}
		title := p.lines[0]
		var header []string
		if s.header != nil {
			// the piped header is the first line's cells
			header = strings.Split(p.lines[0], "\t")
			for k := range p.cols {
				p.cols[k] = strings.TrimPrefix(p.cols[k], noSpace(header[k]))
			}
		}
		// the columns left out are those the terminal's header lacks; a
		// note names each ("left out to fit N columns: ...", or "empty,
		// not shown: ...")
		dropped := map[string]bool{}
		scaled := strings.Contains(s.text, noSpace("blocks scaled to fit"))
		for _, h := range header {
			if slices.Contains(s.header, h) {
				continue
			}
			dropped[h] = true
			if !leftOut.MatchString(s.prose) && !strings.Contains(s.prose, "empty, not shown:") || !strings.Contains(s.text, noSpace(h)) {
				ts.Fatalf("table %q: column %q is left out and no note says so:\n%s", p.lines[0], h, tty)
			}
		}
		var kept []int
		for k := range p.cols {
			if header == nil || !dropped[header[k]] {
				kept = append(kept, k)
			}
		}
		if len(kept) != len(s.cols) {
			ts.Fatalf("table %q: %d columns on the terminal, want %d (of %d, left out %v):\n%s", title, len(s.cols), len(kept), len(p.cols), dropped, tty)
		}
		for j, k := range kept {
			if header != nil && s.header[j] != header[k] {
				ts.Fatalf("table %q: column %d is %q on the terminal, %q piped", title, j, s.header[j], header[k])
			}
			if header != nil && header[k] == "blocks" && scaled {
				continue
			}
			if s.cols[j] != p.cols[k] && !sentencesBelow(tty, s.cols[j], p, k) {
				ts.Fatalf("table %q column %d: the terminal shows\n%s\nthe pipe\n%s", title, k, s.cols[j], p.cols[k])
			}
		}
		for _, l := range p.lines {
			cells := strings.Split(l, "\t")
			for _, k := range kept {
				for _, c := range checksumWord.FindAllString(cells[k], -1) {
					if !strings.Contains(tty, c) {
						ts.Fatalf("table %q: checksum %s is split over lines on the terminal:\n%s", title, c, tty)
					}
				}
			}
		}
	}
}

// cmdShows checks the columns of a table of the last pty command's
// output: shows TITLE COLUMN... finds the table whose title or notes hold
// TITLE and checks its header (wrapped or not) has every COLUMN; with !,
// none of them.
func cmdShows(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: shows TITLE COLUMN...")
	}
	tty := ts.ReadFile("stdout")
	for _, t := range parseTerminal(tty) {
		if !strings.Contains(t.text, noSpace(args[0])) {
			continue
		}
		for _, c := range args[1:] {
			if has := slices.Contains(t.header, c); has == neg {
				ts.Fatalf("table %q: column %q shown: %v (header %q):\n%s", args[0], c, has, t.header, tty)
			}
		}
		return
	}
	ts.Fatalf("no table %q in:\n%s", args[0], tty)
}
