package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// NewCmdMan builds `kvaudit man`, which writes man pages for every command.
func NewCmdMan(s *Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "man DIR",
		Short: "Write man pages for every kvaudit command",
		Long: `Man writes one man page (section 1) per kvaudit command into DIR, generated
from the same help text --help prints. Release archives ship them; shell
completions come from "kvaudit completion bash|zsh|fish|powershell".`,
		Example: `  # install the man pages
  $ kvaudit man /usr/local/share/man/man1

  # bash completion for this shell
  $ source <(kvaudit completion bash)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			header := &doc.GenManHeader{Title: "KVAUDIT", Section: "1", Source: versionString()}
			if err := doc.GenManTree(cmd.Root(), header, args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(s.Out, "wrote man pages to %s\n", args[0])
			return err
		},
	}
}
