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
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/termtext"
)

// interruptGrace is how long a command may take to stop after SIGINT or
// SIGTERM before Main ends the process itself (a second signal ends it at
// once).
const interruptGrace = 1500 * time.Millisecond

// exitProcess ends the process when a command does not stop in time.
var exitProcess = os.Exit

// Main runs kvaudit with args and returns the process exit code. SIGINT
// and SIGTERM cancel the command's context; the command's temporary files
// and directories are removed (internal/safeio), the progress bar line is
// cleared and Main returns ExitInterrupted or ExitTerminated. A panic is
// recovered and reported as ExitInternal.
func Main(args []string, s *Streams) int { return execute(NewRootCmd(s), args, s) }

// execute runs root with args: Main's work, for any command tree.
func execute(root *cobra.Command, args []string, s *Streams) (code int) {
	resumeDrawing()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var (
		mu  sync.Mutex
		got os.Signal
	)
	received := func() os.Signal { mu.Lock(); defer mu.Unlock(); return got }
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-finished:
			return
		}
		mu.Lock()
		got = sig
		mu.Unlock()
		cancel()
		select {
		case <-finished:
			return
		case <-sigs:
		case <-time.After(interruptGrace):
		}
		exitProcess(interrupted(s, sig))
	}()
	defer func() {
		if r := recover(); r != nil {
			if sig := received(); sig != nil {
				code = interrupted(s, sig)
				return
			}
			safeio.Cleanup()
			fmt.Fprintf(s.Err, "kvaudit: internal error: %v\n%s\nkvaudit: this is a bug; please report it with the command line\n", r, debug.Stack())
			code = ExitInternal
			if wantsJSON(s, nil, args) {
				writeErrorJSON(s.stdout(), fmt.Errorf("internal error: %v", r), code)
			}
		}
	}()
	root.SetArgs(args)
	s.argv = args
	cmd, err := root.ExecuteContextC(ctx)
	if sig := received(); sig != nil {
		code := interrupted(s, sig)
		if wantsJSON(s, cmd, args) {
			writeErrorJSON(s.stdout(), errors.New("interrupted"), code)
		}
		return code
	}
	var dm *checksum.DeviceMemoryError
	if errors.As(err, &dm) {
		err = fmt.Errorf("%w (--engine cuda)", err)
	}
	err = asUsage(unknownCommand(err))
	printed := s.quietVerdict(err)
	var result *ResultError
	isResult := errors.As(err, &result)
	// -q with a document: the document says the verdict, nothing else.
	if isResult && s.Quiet && s.Document {
		printed = true
	}
	if err != nil && !printed {
		if !isResult || err.Error() != "" {
			// Messages hold untrusted strings (request ids, names from
			// manifests): escaped, so none can rewrite the line.
			fmt.Fprintf(s.Err, "kvaudit: %s\n", termtext.Line(err.Error()))
		}
		if ue := (*UsageError)(nil); errors.As(err, &ue) && cmd != nil {
			fmt.Fprintf(s.Err, "usage: %s\n", cmd.UseLine())
		}
	}
	code = exitCode(err)
	// With -o json, an error the command printed no document for is a
	// document too, so that a program reading stdout always parses it.
	if err != nil && !isResult && wantsJSON(s, cmd, args) {
		writeErrorJSON(s.stdout(), err, code)
	}
	return code
}

// unknownCommand rewrites cobra's unknown command error, several lines
// with its suggestions ("unknown command \"dif\" for \"kvaudit\"\n\nDid you
// mean this?\n\tdiff\n"), as one usage error line, as a mistyped flag's:
// unknown command "dif" for "kvaudit" (did you mean diff? see kvaudit
// --help). Other errors are returned as they are.
func unknownCommand(err error) error {
	if err == nil || !strings.HasPrefix(err.Error(), "unknown command ") {
		return err
	}
	first, rest, _ := strings.Cut(err.Error(), "\n")
	root := "kvaudit"
	if _, r, ok := strings.Cut(first, " for "); ok {
		root = strings.Trim(r, `"`)
	}
	_, suggested, _ := strings.Cut(rest, "Did you mean this?")
	if names := strings.Fields(suggested); len(names) > 0 {
		return &UsageError{fmt.Errorf("%s (did you mean %s? see %s --help)", first, strings.Join(names, " or "), root)}
	}
	return &UsageError{fmt.Errorf("%s (see %s --help)", first, root)}
}

// interrupted ends a command stopped by sig: it removes the temporaries in
// progress, clears the progress bar's line and returns the exit code.
func interrupted(s *Streams, sig os.Signal) int {
	stopDrawing(s.Err, s.ErrTerminal)
	safeio.Cleanup()
	fmt.Fprintln(s.Err, "kvaudit: interrupted")
	if sig == syscall.SIGTERM {
		return ExitTerminated
	}
	return ExitInterrupted
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

` + exitCodeHelp(""),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if s := suggestFlag(c, err); s != "" {
			return &UsageError{fmt.Errorf("%w (did you mean %s? see %s --help)", err, s, c.CommandPath())}
		}
		return &UsageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	root.PersistentFlags().String("config", "", "configuration file (default ./kvaudit.yaml or ~/.config/kvaudit/kvaudit.yaml)")
	root.PersistentFlags().BoolP("quiet", "q", false, "print only the verdict line (diff, campaign, checksum --stored) and set the exit code; with -o json or junit, only that document")
	root.PersistentFlags().String("color", "auto", "color in tables and progress bars: auto (on a terminal, unless NO_COLOR is set), always or never")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		// --color and --quiet, from the flag, KVAUDIT_COLOR and
		// KVAUDIT_QUIET, or kvaudit.yaml, like every setting. The
		// command's RunE gets the same config (newConfig).
		cfg, err := withConfig(cmd)
		if err != nil {
			return err
		}
		mode := cfg.String("color")
		if !slices.Contains(colorModes, mode) {
			return usageErrorf("--color %q: want one of %s", mode, strings.Join(colorModes, ", "))
		}
		s.Color = mode
		if cmd.Flags().Lookup("output") != nil {
			out := cfg.String("output")
			s.JSON = out == "json"
			s.Document = out == "json" || out == "junit"
		}
		s.Quiet = cfg.Bool("quiet")
		s.beQuiet()
		return nil
	}
	// Every command, in one list.
	root.AddCommand(
		NewCmdChecksum(s, nil),
		NewCmdDiff(s, nil),
		NewCmdTransfers(s, nil),
		NewCmdInspect(s, nil),
		NewCmdScrub(s, nil),
		NewCmdInject(s, nil),
		NewCmdCampaign(s, nil),
		NewCmdSynth(s, nil),
		NewCmdDemo(s, nil),
		NewCmdBench(s, nil),
		NewCmdMan(s),
		NewCmdVersion(s),
	)
	root.Version = versionString()
	root.SetVersionTemplate("{{.Version}}\n")
	registerCompletions(root)
	explainArgs(root)
	wrapHelpOutput(root, s)
	return root
}

// parseFormat checks an -o value against the formats a command offers.
func parseFormat(value string, allowed ...string) (string, error) {
	if slices.Contains(allowed, value) {
		return value, nil
	}
	return "", usageErrorf("-o %q: want one of %s", value, strings.Join(allowed, ", "))
}
