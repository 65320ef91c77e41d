package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/transfer"
)

// TransfersOptions are the settings of `kvaudit transfers`: the audit's
// own (transfer.Options, its flags bound to the fields) and the
// command's.
type TransfersOptions struct {
	transfer.Options
	IO *Streams
	// Logs are the logs (files or directories) as given; Producer and
	// Consumer the sides' dumps.
	Logs               []string
	Producer, Consumer []string
	Output             string
	// JUnit, when set, is a file to write the JUnit report to as well.
	JUnit string
	// HTML, when set, is a file to write the HTML report to as well
	// (--html FILE); command is the command line, for the report.
	HTML    string
	command string
	started time.Time
}

// NewCmdTransfers builds `kvaudit transfers`. runF replaces the run
// function in tests.
func NewCmdTransfers(s *Streams, runF func(context.Context, *TransfersOptions) error) *cobra.Command {
	opts := &TransfersOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "transfers LOG... --producer P --consumer C",
		Short: "Audit NIXL transfers recorded in kvaudit-nixl-log/1 logs against the producer's and the consumer's dumps",
		Long: `Transfers reads the NIXL descriptor logs a deployment recorded (the
kvaudit_export recorder's kvaudit-nixl-log/1: the logs of the consumer's
ranks for a pull, of the producer's for a push; a directory gives its
*.jsonl files, a quoted glob the paths it matches), resolves every transfer's descriptors through the dumps'
device addresses to the cells they name (layer, K or V, heads, block,
request and tokens), and checks, per request and transfer:

  confined   every byte written lies in a block the request loads, every
             byte read in a block of the producer's request
  aligned    the two descriptors of a pair have one length and hold the same
             KV: byte for byte, or, where the consumer converts what it
             receives (other block sizes, another page order), per chunk of
             tokens, heads and K/V
  covered    every loaded token of every layer and head the consumer rank
             holds was delivered by a transfer that reached DONE
  zeroed     every byte of the request's loaded blocks that no transfer
             delivered is zero
  written-twice  no byte written by transfers from different sources
  failed     no transfer ended in ERR for a request that was loaded anyway
  lease      no READ posted after the producer's lease on its request lapsed
             (the logs' timestamps and lease_s, or --lease)

The tokens a pull must deliver are vLLM's: a request's tokens from
num_local_computed_tokens up to all but its last one on a hybrid (state)
model, all but its last --lookahead minus one with multi-token prediction;
the recomputed ones are neither pulled nor required. Every request of every
consumer rank is accounted for (one no transfer served is a covered
finding); a consumer rank without a log leaves the audit unresolved (exit
2) unless --allow-unverified. What looks like a mistake in what was given
(one dump on both sides, the sides swapped, logs of another run) is said
under "pairing". See docs/transfers.md.

Every finding names its request, transfer, descriptor, layer and tokens,
and what lies where the bytes went or came from ("transfer 7 read producer
block 12, which holds request B's KV"). Dumps need device addresses and
agent names (kvaudit_export and kvaudit synth write them).

` + exitCodeHelp("transfers"),
		Example: `  # a producer, a TP2 consumer and the logs of its correct pull
  $ kvaudit synth --out kv --preset llama --layout hnd
  $ kvaudit synth --out kv --preset llama --layout hnd --role consumer --tp 2 --transfers
  $ kvaudit transfers kv/nixl --producer kv/producer --consumer kv/consumer

  # what a vLLM deployment recorded, as JSON, and as an HTML report
  $ kvaudit transfers /data/kvaudit/nixl --producer /data/kvaudit/producer/R --consumer /data/kvaudit/consumer/R -o json
  $ kvaudit transfers kv/nixl --producer kv/producer --consumer kv/consumer --html transfers.html`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			opts.Logs = args
			if opts.Output, err = outputOf(cfg); err != nil {
				return err
			}
			if len(opts.Producer) == 0 || len(opts.Consumer) == 0 {
				return usageErrorf("--producer and --consumer are required: the dumps the logs' descriptors resolve to")
			}
			inputs := append(append(slices.Clone(opts.Logs), opts.Producer...), opts.Consumer...)
			if err := checkOutputFile("--html", opts.HTML, inputs); err != nil {
				return err
			}
			// Before the work, not after it.
			if err := checkOutputFile("--junit", opts.JUnit, inputs); err != nil {
				return err
			}
			opts.started = time.Now()
			opts.command = commandLine(opts.IO, cmd, args)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return transfersRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	addOutputFlag(cmd, "")
	f.StringSliceVar(&opts.Producer, "producer", nil, "the producer's dumps (a dump, a directory of dumps or a quoted glob; repeatable)")
	f.StringSliceVar(&opts.Consumer, "consumer", nil, "the consumer's dumps (a dump, a directory of dumps or a quoted glob; repeatable)")
	f.StringSliceVar(&opts.Requests, "request", nil, "audit only this consumer (or producer) request id (repeatable)")
	f.IntVar(&opts.MaxFindings, "max-findings", transfer.DefaultMaxFindings, "findings kept at most (-1: no cap)")
	f.BoolVar(&opts.AllowUnverified, "allow-unverified", false, "audit what the logs hold when a consumer rank has no log (a note), instead of exit 2")
	f.IntVar(&opts.LeaseS, "lease", 0, "the producer's lease on a request's blocks in seconds (default: the logs' lease_s; vLLM: kv_lease_duration)")
	f.IntVar(&opts.Lookahead, "lookahead", 0, "the consumer's num_prefill_lookahead_tokens (MTP): its last N-1 prompt tokens are recomputed, not pulled")
	f.StringVar(&opts.JUnit, "junit", "", "also write the JUnit XML report to this file (the table, or -o, still printed)")
	f.StringVar(&opts.HTML, "html", "", htmlFlagHelp)
	return cmd
}

func transfersRun(ctx context.Context, opts *TransfersOptions) error {
	logs, err := transfer.FindLogs(opts.Logs)
	if err != nil {
		return err
	}
	prod, err := openDumpSide("producer", opts.Producer)
	if err != nil {
		return err
	}
	defer prod.Close()
	cons, err := openDumpSide("consumer", opts.Consumer)
	if err != nil {
		return err
	}
	defer cons.Close()
	// A bar of the logs' bytes read (the audit's work after reading, its
	// checks of what the logs delivered, is short beside it).
	var total int64
	if opts.IO.ErrTerminal {
		total = filesBytes(logs)
	}
	bar := newProgress(opts.IO, total, "auditing the transfers")
	aopts := opts.Options
	aopts.Progress = bar.Callback()
	res, err := transfer.Audit(ctx, logs, prod.Dumps, cons.Dumps, aopts)
	if err == nil {
		bar.Set(total)
	}
	bar.Finish()
	if err != nil {
		return err
	}
	style := tableStyle(opts.IO)
	if err := report.RenderTransfers(opts.IO.Out, res, report.Format(opts.Output), style, time.Since(opts.started)); err != nil {
		return err
	}
	if opts.JUnit != "" {
		err := writeReport(opts.IO, "JUnit report", opts.JUnit, func(w io.Writer) error {
			return report.RenderTransfers(w, res, report.FormatJUnit, style, time.Since(opts.started))
		})
		if err != nil {
			return err
		}
	}
	exit := transfersExit(res)
	if opts.HTML != "" {
		info := report.HTMLInfo{Command: opts.command, Producer: strings.Join(opts.Producer, " "), Consumer: strings.Join(opts.Consumer, " "),
			Logs: strings.Join(opts.Logs, " "), Exit: exitCode(exit), Version: versionString(), Time: opts.started}
		if err := writeReport(opts.IO, "report", opts.HTML, func(w io.Writer) error { return report.RenderTransfersHTML(w, res, info) }); err != nil {
			return err
		}
	}
	opts.IO.verdict = res.Verdict
	return exit
}

// transfersExit maps an audit to the command's exit: ExitMismatch when an
// invariant is violated, ExitUnverified when the logs could not be
// resolved, else nil.
func transfersExit(res *transfer.Result) error {
	switch res.Verdict {
	case transfer.Violated:
		return &ResultError{Code: ExitMismatch, Msg: res.Summary()}
	case transfer.Unresolved:
		return &ResultError{Code: ExitUnverified, Msg: res.Summary()}
	}
	return nil
}

// openDumpSide opens a side of the transfer audit through side.Open, the
// one way every command opens a side (so a path, a directory or a quoted
// glob means what it means to diff); the audit resolves descriptors to
// cells, so the side must be dumps.
func openDumpSide(what string, paths []string) (*side.Source, error) {
	s, err := side.Open(side.Input{Paths: paths})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if !s.DumpsOnly() {
		s.Close()
		return nil, fmt.Errorf("%s: the transfer audit resolves the logs' descriptors to the dumps' cells: give dumps, not records", what)
	}
	return s, nil
}
