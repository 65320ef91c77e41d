// Package cli holds kvaudit's cobra commands. Each verb is an options
// struct, filled from flags, KVAUDIT_* variables and kvaudit.yaml, and a run
// function that only uses the options and writes only to their streams.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Main runs kvaudit with args and returns the process exit code.
func Main(args []string, s *Streams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := NewRootCmd(s)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		if _, silent := err.(*ResultError); !silent || err.Error() != "" {
			fmt.Fprintf(s.Err, "kvaudit: %v\n", err)
		}
		if ue := (*UsageError)(nil); errors.As(err, &ue) && cmd != nil {
			fmt.Fprintf(s.Err, "usage: %s\n", cmd.UseLine())
		}
	}
	return exitCode(err)
}

// NewRootCmd builds the kvaudit command tree.
func NewRootCmd(s *Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "kvaudit",
		Short: "Audit KV cache transfers: checksums, verdicts, fault injection",
		Long: `kvaudit proves that the KV cache a decode instance loaded is the KV cache its
prefill instance computed. It checksums KV cache dumps with vLLM's
connector-agnostic definition (one value per group and block position, the
same whatever the TP, PP, layout or block size), compares producer and
consumer with vLLM's verdict rules, drills every mismatch down to layer,
head, token and byte, and injects faults to show the checks catch them.

Settings come from flags, KVAUDIT_<FLAG> environment variables and an
optional kvaudit.yaml (--config, the working directory or
~/.config/kvaudit), in that order.

` + exitCodeHelp(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	root.PersistentFlags().String("config", "", "configuration file (default ./kvaudit.yaml or ~/.config/kvaudit/kvaudit.yaml)")
	root.PersistentFlags().String("color", "auto", "color in tables and progress bars: auto (on a terminal, unless NO_COLOR is set), always or never")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		mode, _ := cmd.Flags().GetString("color")
		if !slices.Contains(colorModes, mode) {
			return usageErrorf("--color %q: want one of %s", mode, strings.Join(colorModes, ", "))
		}
		s.Color = mode
		return nil
	}
	root.AddCommand(
		NewCmdChecksum(s, nil),
		NewCmdInspect(s, nil),
		NewCmdSynth(s, nil),
		NewCmdDemo(s, nil),
		NewCmdVersion(s),
	)
	for _, add := range extraCommands {
		root.AddCommand(add(s))
	}
	root.Version = versionString()
	root.SetVersionTemplate("{{.Version}}\n")
	registerCompletions(root)
	explainArgs(root)
	return root
}

// extraCommands are added by the files that define them (diff, inject,
// campaign, bench, ...), so the root needs no edit for each.
var extraCommands []func(*Streams) *cobra.Command

// parseFormat checks an -o value against the formats a command offers.
func parseFormat(value string, allowed ...string) (string, error) {
	if slices.Contains(allowed, value) {
		return value, nil
	}
	return "", usageErrorf("-o %q: want one of %s", value, strings.Join(allowed, ", "))
}
