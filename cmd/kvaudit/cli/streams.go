package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/term"

	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/internal/termtext"
)

// Streams are a command's input and output. Commands write only here.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// OutTerminal and ErrTerminal say whether Out and Err are terminals
	// (aligned or styled tables, progress bars).
	OutTerminal, ErrTerminal bool
	// NoColor is set by a non-empty NO_COLOR environment variable
	// (https://no-color.org): no color, the tables stay aligned.
	NoColor bool
	// Color is --color: "auto" (or ""): color on a terminal unless
	// NoColor; "always"; "never".
	Color string
	// Width is Out's terminal width in cells, 0 when unknown or not a
	// terminal: tables on a terminal fit in it.
	Width int
	// ErrWidth is Err's terminal width in cells, 0 when unknown (80 is
	// taken then): progress bars and status lines fit in it. ErrSize,
	// when set, reads it again (the terminal may be resized while a bar
	// is drawn); 0 from it means unknown.
	ErrWidth int
	ErrSize  func() int
	// Quiet is -q: the command's output is discarded, no progress is
	// drawn, and Main prints only the verdict line (quiet holds the
	// output it goes to). With a document on stdout (Document: -o json
	// or junit), -q keeps the document, whose verdict it is, and prints
	// no verdict line.
	Quiet bool
	quiet io.Writer
	// Document says the command writes a document on stdout (-o json or
	// junit) that a program parses: -q keeps it, and with -o json an
	// error is a kvaudit-error/1 document there too.
	Document bool
	// JSON says the command writes -o json.
	JSON bool
	// verdict is the verdict line of a command that succeeded (diff,
	// campaign, checksum --stored), for -q.
	verdict string
	// argv are the arguments Main was given, for a report's command line
	// (commandLine); nil for a command not run through Main.
	argv []string
}

// beQuiet discards the command's output and progress for -q; a document
// (-o json, junit) is kept.
func (s *Streams) beQuiet() {
	switch {
	case !s.Quiet || s.quiet != nil:
	case s.Document:
		s.ErrTerminal = false
	default:
		s.quiet, s.Out, s.ErrTerminal = s.Out, io.Discard, false
	}
}

// stdout is the command's standard output, even under -q.
func (s *Streams) stdout() io.Writer {
	if s.quiet != nil {
		return s.quiet
	}
	return s.Out
}

// quietVerdict prints, for -q, the command's verdict line on the output:
// a result error's message (which Main then does not repeat on stderr),
// or the verdict of a command that succeeded, escaped (termtext.Line). It
// reports whether it printed err.
func (s *Streams) quietVerdict(err error) bool {
	if s.quiet == nil {
		return false
	}
	var re *ResultError
	switch {
	case errors.As(err, &re) && re.Msg != "":
		fmt.Fprintln(s.quiet, termtext.Line(re.Msg))
		return true
	case err == nil && s.verdict != "":
		fmt.Fprintln(s.quiet, termtext.Line(s.verdict))
	}
	return false
}

// SystemStreams returns the process's standard streams.
func SystemStreams() *Streams {
	s := &Streams{
		In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
		OutTerminal: term.IsTerminal(int(os.Stdout.Fd())),
		ErrTerminal: term.IsTerminal(int(os.Stderr.Fd())),
		NoColor:     os.Getenv("NO_COLOR") != "",
	}
	if s.OutTerminal {
		s.Width = terminalWidth(os.Stdout)
	}
	if s.ErrTerminal {
		s.ErrWidth = terminalWidth(os.Stderr)
		s.ErrSize = func() int {
			if w, _, err := term.GetSize(int(os.Stderr.Fd())); err == nil && w > 0 {
				return w
			}
			return 0
		}
	}
	return s
}

// terminalWidth is the width of the terminal f, else $COLUMNS, else 0.
func terminalWidth(f *os.File) int {
	if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
		return w
	}
	if w, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && w > 0 {
		return w
	}
	return 0
}

// errWidth is the width progress bars and status lines fit in: Err's
// terminal width now, else ErrWidth, else 80.
func (s *Streams) errWidth() int {
	if s.ErrSize != nil {
		if w := s.ErrSize(); w > 0 {
			return w
		}
	}
	if s.ErrWidth > 0 {
		return s.ErrWidth
	}
	return 80
}

// colorModes are the values of --color.
var colorModes = []string{"auto", "always", "never"}

// color says whether tables on Out are styled with color.
func (s *Streams) color() bool { return s.colorOn(s.OutTerminal) }

// errColor says whether progress bars on Err use color.
func (s *Streams) errColor() bool { return s.colorOn(s.ErrTerminal) }

// colorOn says whether a stream, a terminal or not, gets color: --color
// always or never, else (auto) on a terminal unless NO_COLOR is set.
func (s *Streams) colorOn(terminal bool) bool {
	switch s.Color {
	case "always":
		return true
	case "never":
		return false
	}
	return terminal && !s.NoColor
}

// renderTables writes tables to Out in the -o format output, table or
// markdown, styled for Out (tableStyle).
func (s *Streams) renderTables(output string, tables ...*report.Table) error {
	for _, t := range tables {
		if err := t.Render(s.Out, report.Format(output), tableStyle(s)); err != nil {
			return err
		}
	}
	return nil
}

// tableStyle is the report style for the streams' output: styled with
// color, else aligned on a terminal, else tab-separated for a pipe;
// fitted to the terminal's width.
func tableStyle(s *Streams) report.Style {
	st := report.Style{Color: s.color(), ForceColor: s.Color == "always", Aligned: s.OutTerminal}
	if s.OutTerminal {
		st.Width = s.Width
	}
	return st
}
