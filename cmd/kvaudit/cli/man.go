package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/kvaudit/kvaudit/internal/safeio"
)

func init() {
	extraCommands = append(extraCommands, NewCmdMan)
}

// NewCmdMan builds `kvaudit man`, which writes man pages for every command.
func NewCmdMan(s *Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "man DIR",
		Short: "Write man pages for every kvaudit command",
		Long: `Man writes one man page (section 1) per kvaudit command into DIR, generated
from the same help text --help prints. Release archives ship them; shell
completions come from "kvaudit completion bash|zsh|fish|powershell".

Pages are written to temporary names in DIR and renamed into place when
complete; an existing page is replaced only with --force (never through a
symlink: the link itself is replaced).`,
		Example: `  # install the man pages
  $ kvaudit man /usr/local/share/man/man1

  # bash completion for this shell
  $ source <(kvaudit completion bash)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			force, _ := cmd.Flags().GetBool("force")
			if err := writeManPages(cmd.Root(), args[0], force); err != nil {
				return err
			}
			_, err := fmt.Fprintf(s.Out, "wrote man pages to %s\n", args[0])
			return err
		},
	}
	cmd.Flags().Bool("force", false, "replace existing man pages")
	return cmd
}

// writeManPages generates the pages into a temporary directory in dir and
// moves each into place.
func writeManPages(root *cobra.Command, dir string, force bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := safeio.TempDir(dir, ".kvaudit-man-")
	if err != nil {
		return err
	}
	defer safeio.RemoveTemp(tmp)
	header := &doc.GenManHeader{Title: "KVAUDIT", Section: "1", Source: versionString()}
	if err := doc.GenManTree(root, header, tmp); err != nil {
		return err
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := safeio.Place(filepath.Join(tmp, e.Name()), filepath.Join(dir, e.Name()), force); err != nil {
			return err
		}
	}
	return nil
}
