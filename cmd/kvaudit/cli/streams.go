package cli

import (
	"io"
	"os"

	"golang.org/x/term"
)

// Streams are a command's input and output. Commands write only here.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// OutTerminal and ErrTerminal say whether Out and Err are terminals
	// (styled tables, progress bars).
	OutTerminal, ErrTerminal bool
	// NoColor is set by the NO_COLOR environment variable.
	NoColor bool
}

// SystemStreams returns the process's standard streams.
func SystemStreams() *Streams {
	_, noColor := os.LookupEnv("NO_COLOR")
	return &Streams{
		In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
		OutTerminal: term.IsTerminal(int(os.Stdout.Fd())),
		ErrTerminal: term.IsTerminal(int(os.Stderr.Fd())),
		NoColor:     noColor,
	}
}

// color says whether tables on Out are styled.
func (s *Streams) color() bool { return s.OutTerminal && !s.NoColor }
