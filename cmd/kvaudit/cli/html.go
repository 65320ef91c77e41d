package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvaudit/kvaudit/internal/safeio"
)

// htmlFlagHelp is the help of --html FILE.
const htmlFlagHelp = "also write the report as one self-contained HTML page to this file (replaced if it exists; no script, no network)"

// checkOutputFile refuses an output file (--html FILE) before any work
// starts: a directory, a file in a directory that does not exist, an
// input itself, or a file inside an input directory (kvaudit never writes
// among the files it reads). An empty path is no output.
func checkOutputFile(flag, path string, inputs []string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usageErrorf("%s %q is a directory: name a file", flag, path)
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usageErrorf("%s %q: the directory %q does not exist", flag, path, dir)
	}
	o, err := realPath(path)
	if err != nil {
		return err
	}
	for _, in := range inputs {
		p, err := realPath(in)
		if err != nil {
			continue // not a path (payload text)
		}
		if o == p {
			return usageErrorf("%s %q is the input %q: write outputs elsewhere", flag, path, in)
		}
		if st, err := os.Stat(p); err == nil && st.IsDir() && strings.HasPrefix(o, p+string(filepath.Separator)) {
			return usageErrorf("%s %q is inside the input %q: write outputs elsewhere", flag, path, in)
		}
	}
	return nil
}

// writeHTML writes an HTML report to path atomically (internal/safeio),
// replacing an earlier one as --junit does.
func writeHTML(path string, render func(w io.Writer) error) error {
	return safeio.Write(path, true, render)
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
