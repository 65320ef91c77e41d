package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time by release builds (-X); otherwise the module
// version from the build info is used.
var version = ""

// releaseVersion is the version kvaudit was built as: the -X version of
// a release build, else the module version, else "devel".
func releaseVersion() string {
	v := version
	if info, ok := debug.ReadBuildInfo(); v == "" && ok {
		v = info.Main.Version
	}
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	return v
}

func versionString() string {
	v := releaseVersion()
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return fmt.Sprintf("kvaudit %s %s/%s %s", v, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// NewCmdVersion builds `kvaudit version`.
func NewCmdVersion(s *Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kvaudit's version",
		Long:  "Version prints the version kvaudit was built as (from the build information), its platform and Go version.",
		Example: `  # which kvaudit is this
  $ kvaudit version`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(s.Out, versionString())
			return err
		},
	}
}
