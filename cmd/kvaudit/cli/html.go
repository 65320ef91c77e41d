package cli

import (
	"errors"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvaudit/kvaudit/internal/safeio"
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

// writeHTML writes an HTML report to path (safeio.WriteOutput): a regular
// file atomically, replacing an earlier one as --junit does; a device,
// FIFO or descriptor as it is.
func writeHTML(path string, render func(w io.Writer) error) error {
	return safeio.WriteOutput(path, render)
}

// commandLine is the command as run, for a report: the command's path,
// the flags given on the command line and the arguments.
func commandLine(cmd *cobra.Command, args []string) string {
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		parts = append(parts, "--"+f.Name+"="+f.Value.String())
	})
	return strings.Join(append(parts, args...), " ")
}
