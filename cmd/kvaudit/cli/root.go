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

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/report"
)

// Main runs kvaudit with args and returns the process exit code.
func Main(args []string, s *Streams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := NewRootCmd(s)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var dm *checksum.DeviceMemoryError
	if errors.As(err, &dm) {
		err = fmt.Errorf("%w (--engine cuda)", err)
	}
	if err != nil {
		if _, silent := err.(*ResultError); !silent || err.Error() != "" {
			fmt.Fprintf(s.Err, "kvaudit: %v\n", err)
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
	// Every command, in one list.
	root.AddCommand(
		NewCmdChecksum(s, nil),
		NewCmdDiff(s, nil),
		NewCmdInspect(s, nil),
		NewCmdInject(s, nil),
		NewCmdCampaign(s, nil),
		NewCmdSynth(s, nil),
		NewCmdDemo(s, nil),
		NewCmdBench(s, nil),
		NewCmdMan(s),
		NewCmdVersion(s),
	)
	return root
}

// parseFormat checks an -o value against the formats a command offers.
func parseFormat(value string, allowed ...string) (string, error) {
	if slices.Contains(allowed, value) {
		return value, nil
	}
	return "", usageErrorf("-o %q: want one of %s", value, strings.Join(allowed, ", "))
}

// tableStyle is the report style for the streams' output.
func tableStyle(s *Streams) report.Style { return report.Style{Color: s.color()} }
