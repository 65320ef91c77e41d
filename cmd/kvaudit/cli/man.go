package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

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
			files, err := writeManPages(cmd.Root(), args[0], force)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(s.Err, "wrote %d man pages to %s\n", len(files), args[0])
			return err
		},
	}
	cmd.Flags().Bool("force", false, "replace existing man pages")
	return cmd
}
