package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/termtext"
)

// htmlFlagHelp is the help of --html FILE.
const htmlFlagHelp = "also write the report as one self-contained HTML page to this file (replaced if it exists; no script, no network)"

// checkOutputFile applies the output rule (internal/safeio) to an output
// file (--html FILE, --junit FILE) before any work starts: refused, a
// usage error, when it is an input itself, lies inside an input directory
// or is a link to either (globs among inputs expanded, links resolved), is
// a directory, or is a file in a directory that does not exist or takes
// no new file. A character device, FIFO or descriptor (/dev/stdout) is
// written to as it is. An empty path is no output; inputs that are not
// paths (payload text) are passed over.
func checkOutputFile(flag, path string, inputs []string) error {
	if path == "" {
		return nil
	}
	if err := safeio.CheckOutput(path, inputs); err != nil {
		var oe *safeio.OutputError
		if errors.As(err, &oe) {
			return outputRefused(flag, err)
		}
		return usageErrorf("%s %v", flag, err)
	}
	if err := safeio.CheckOutFile(path); err != nil {
		return usageErrorf("%s %v", flag, err)
	}
	return nil
}

// writeReport writes a report file beside the command's output (--html
// FILE, --junit FILE) with safeio.WriteOutput (a regular file
// atomically, replacing an earlier one; a device, FIFO or descriptor as
// it is) and says on stderr where (wrote): what names the report.
func writeReport(s *Streams, what, path string, render func(w io.Writer) error) error {
	if err := safeio.WriteOutput(path, render); err != nil {
		return err
	}
	wrote(s, what, path)
	return nil
}

// wrote says on stderr that the command wrote a file, as every output
// written beside the command's own says it: "wrote report r.html" (what
// names it; "" for a file its name says enough of: "wrote out/x.json").
// Under -q, which prints the verdict alone, it says nothing.
func wrote(s *Streams, what, path string) {
	if s.Quiet {
		return
	}
	if what != "" {
		what += " "
	}
	fmt.Fprintf(s.Err, "wrote %s%s\n", what, termtext.Line(path))
}

// commandLine is the command as the user typed it, for a report: kvaudit
// and the arguments Main was given, each quoted for a POSIX shell where
// it needs it (shellQuote), so that the line can be run again. A command
// not run through Main (a test's) is written from its parsed flags.
func commandLine(s *Streams, cmd *cobra.Command, args []string) string {
	if s != nil && s.argv != nil {
		parts := []string{cmd.Root().Name()}
		for _, a := range s.argv {
			parts = append(parts, shellQuote(a))
		}
		return strings.Join(parts, " ")
	}
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		values := []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			values = sv.GetSlice()
		}
		for _, v := range values {
			if f.Value.Type() == "bool" && v == "true" {
				parts = append(parts, "--"+f.Name)
				continue
			}
			parts = append(parts, "--"+f.Name, shellQuote(v))
		}
	})
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// shellQuote writes an argument as a POSIX shell reads it back: as it is
// when it holds only characters no shell treats specially, else in single
// quotes (a quote inside written '\”).
func shellQuote(a string) string {
	plain := a != "" && strings.IndexFunc(a, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("@%+=:,./-_", r))
	}) < 0
	if plain {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}
