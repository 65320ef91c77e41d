package cli

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// DiffOptions are the settings of `kvaudit diff`: the comparison's own
// (verify.CompareOptions, its flags bound to the fields) and the
// command's.
type DiffOptions struct {
	verify.CompareOptions
	IO *Streams
	// Producer and Consumer are the two sides as given (see NewCmdDiff):
	// one argument each, or the paths of --producer and --consumer.
	Producer, Consumer []string
	Output             string
	AllowUnverified    bool
	// AllowedBy is the configuration file and line that set
	// AllowUnverified, when no flag or variable did ("" otherwise).
	AllowedBy string
	// JUnit, when set, is a file to write the JUnit report to as well
	// (--junit FILE); started is when the command started (its time).
	JUnit string
	// HTML, when set, is a file to write the HTML report to as well
	// (--html FILE); command is the command line, for the report.
	HTML    string
	command string
	started time.Time
	// SGLangSent are --sglang-checksum values (verify.ParseSGLangChecksums).
	SGLangSent map[string]uint64
	// Threads of the cpu engine, for SGLang's Adler-32.
	Threads int
}

// NewCmdDiff builds `kvaudit diff`. runF replaces the run function in
// tests.
func NewCmdDiff(s *Streams, runF func(context.Context, *DiffOptions) error) *cobra.Command {
	opts := &DiffOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "diff PRODUCER CONSUMER",
		Short: "Compare what a producer sent with what a consumer loaded: verdicts per request and group",
		Long: `Diff compares a consumer's KV cache with its producer's, request by request
and group by group, with vLLM's verdict rules: verified, mismatch (with the
consumer's block positions and the replica copies that differ) or unverified
(with a fixed reason: no or invalid checksums, a missing rank, other layers,
block sizes that are not multiples, ...). Sides may differ in TP, PP, memory
layout and block size.

Each side is one argument: a dump, a directory of dumps (and/or records), a
record file (checksum --partial -o record), a quoted glob of them
('rec/producer/*': the records every host wrote), or, for the producer,
what it sent: a payload as base64 text (the argument itself, or a file holding it,
or - for stdin), a JSON object with a "kv_checksums" key (vLLM's
kv_transfer_params), or the JSON map of request id to payload that
checksum -o payload prints. An argument that is not an existing path is read
as payload text. A bare payload pairs with the consumer request --request
names, or with the consumer's only request; otherwise requests pair by id, or
by a consumer request's producer_id. The consumer must be dumps or records.
A side gathered from several places is given with --producer and
--consumer, each repeatable (paths or globs), in place of its argument.

A flat payload (what vLLM's published KV checksum code sends) is compared in
block numbering and judged on the positions both sides cover, as vLLM's
consumer does; --strict makes a loaded block it does not cover unverified.
Payloads are decoded as vLLM's consumer decodes them, each leniency noted.

When both sides are dumps, every mismatching block is drilled down to the
layers, global heads, replica copies and tokens whose cells differ, with a
hint of what it looks like (1 bit flipped, zeroed, heads 2<->5 swapped, holds
the block of position 3, holds KV of request req-4, random bytes, ...).

--transfers LOG... also audits the NIXL logs of the transfer (see kvaudit
transfers): a violated invariant is an audit finding (exit 1), and each
mismatch a finding explains gets its cause ("position 3: transfer 7 read
producer block 12, which holds request req-1's KV (position 0)").

` + exitCodeHelp("diff"),
		Example: `  # compare a producer's and a consumer's dumps
  $ kvaudit diff out/producer out/consumer

  # what a producer sent (vLLM's kv_transfer_params) against a consumer's dump
  $ kvaudit diff kv_transfer_params.json out/consumer --request req-0

  # the records each host wrote, gathered by globs (quoted: kvaudit expands them)
  $ kvaudit diff 'rec/host-*/producer' 'rec/host-*/consumer'
  $ kvaudit diff --producer hostA/rec --producer hostB/rec --consumer 'dec-*/rec'

  # the comparison, with the causes the NIXL logs of the pull give
  $ kvaudit diff kv/producer kv/consumer --transfers kv/nixl

  # payloads printed by checksum, a CI report, unverified loads accepted
  $ kvaudit checksum -o payload out/producer > payloads.json
  $ kvaudit diff payloads.json records/ -o junit --allow-unverified > diff.xml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			if opts.Producer, opts.Consumer, err = diffSides(cmd, cfg, args); err != nil {
				return err
			}
			if opts.Output, err = outputOf(cfg); err != nil {
				return err
			}
			opts.AllowedBy, _ = cfg.FromFile("allow-unverified")
			if opts.SGLangSent, err = verify.ParseSGLangChecksums(cfg.Strings("sglang-checksum")); err != nil {
				return usageErrorf("--sglang-checksum %v", err)
			}
			opts.Threads = cfg.Int("threads")
			opts.started = time.Now()
			opts.command = commandLine(opts.IO, cmd, args)
			if err := checkOutputFile("--html", opts.HTML, slices.Concat(opts.Producer, opts.Consumer, opts.Transfers)); err != nil {
				return err
			}
			// Before the work, not after it.
			if err := checkOutputFile("--junit", opts.JUnit, slices.Concat(opts.Producer, opts.Consumer, opts.Transfers)); err != nil {
				return err
			}
			if opts.Engine, err = newEngine(cfg, s.Err); err != nil {
				return err
			}
			if opts.MixKey, err = mixKeyOf(cfg); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return diffRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	addOutputFlag(cmd, "")
	f.StringSlice("producer", nil, "the producer as several paths (repeatable or comma-separated; dumps, directories, records or quoted globs), in place of PRODUCER")
	f.StringSlice("consumer", nil, "the consumer as several paths (repeatable or comma-separated; dumps, directories, records or quoted globs), in place of CONSUMER")
	f.StringSliceVar(&opts.Requests, "request", nil, "compare only this consumer request id (repeatable); names the request a bare payload is for")
	f.BoolVar(&opts.AllowUnverified, "allow-unverified", false, "exit 0 when nothing mismatches, even if some load is unverified")
	f.String("engine", "cpu", engineHelp)
	f.Int("threads", 0, "threads of the cpu engine (default GOMAXPROCS)")
	addCUDATimeoutFlag(f)
	f.BoolVar(&opts.NoDrill, "no-drill", false, "skip the drill-down of mismatches to layers, heads and tokens")
	f.IntVar(&opts.MaxDetails, "max-details", drill.DefaultMaxDetails, "drill-down details per request at most, each mismatching position keeping its first (-1: no cap)")
	f.BoolVar(&opts.AuditTail, "audit-tail", false, "also audit the consumer's dumps: every byte past the transferred range is zero")
	f.StringVar(&opts.JUnit, "junit", "", "also write the JUnit XML report to this file (the table, or -o, still printed)")
	f.StringVar(&opts.HTML, "html", "", htmlFlagHelp)
	f.BoolVar(&opts.Stored, "stored", false, "also check the consumer's blocks against the stored checksums in its manifests")
	f.StringSliceVar(&opts.Transfers, "transfers", nil, "also audit these NIXL logs (kvaudit-nixl-log/1 files, directories of them or quoted globs) against both sides' dumps, and name the cause of each mismatch they explain")
	f.StringSlice("sglang-checksum", nil, "SGLang dumps: the value SGLang's prefill sent for a consumer request, REQ=0xHEX (TP rank 0) or REQ@TP=0xHEX (repeatable), in place of the kv_checksum row in the consumer's manifest")
	addStrengthFlags(f, &opts.CompareOptions)
	f.BoolVar(&opts.Strict, "strict", false, "a loaded block the producer's checksums do not cover (a flat payload is judged on the overlap, as vLLM does) makes its group unverified")
	return cmd
}

// diffSides reads the two sides: --producer and --consumer (each
// repeatable) where given, the positional PRODUCER and CONSUMER otherwise,
// in that order.
func diffSides(cmd *cobra.Command, cfg *config, args []string) (producer, consumer []string, err error) {
	producer, consumer = cfg.Strings("producer"), cfg.Strings("consumer")
	rest := args
	if len(producer) == 0 && len(consumer) == 0 && len(args) != 2 {
		hint := ""
		if len(args) > 2 {
			hint = " (a side of several paths: quote a glob, 'rec/*', for kvaudit to expand, or repeat --producer and --consumer)"
		}
		return nil, nil, usageErrorf("%s %s; got %s%s", cmd.Name(), wantedArgs(cmd), givenArgs(args), hint)
	}
	take := func(side *[]string, name string) error {
		if len(*side) > 0 {
			return nil
		}
		if len(rest) == 0 {
			return usageErrorf("diff: no %s: give it as %s or --%s", name, strings.ToUpper(name), name)
		}
		*side, rest = rest[:1], rest[1:]
		return nil
	}
	if err := take(&producer, "producer"); err != nil {
		return nil, nil, err
	}
	if err := take(&consumer, "consumer"); err != nil {
		return nil, nil, err
	}
	if len(rest) > 0 {
		return nil, nil, usageErrorf("diff: %s: both sides are given already (--producer, --consumer or the arguments)", givenArgs(rest))
	}
	return producer, consumer, nil
}

// sideInput is a side as given: one argument (a path, a glob, payload
// text, "-"), or several paths.
func sideInput(values []string, stdin io.Reader) side.Input {
	if len(values) == 1 {
		return side.Input{Arg: values[0], Stdin: stdin}
	}
	return side.Input{Paths: values}
}

func diffRun(ctx context.Context, opts *DiffOptions) error {
	copts := opts.CompareOptions
	copts.Progress, copts.Step = verifyProgress(opts.IO)
	res, err := verify.Compare(ctx,
		sideInput(opts.Producer, opts.IO.In),
		sideInput(opts.Consumer, opts.IO.In),
		copts)
	var bare *verify.BarePayloadError
	switch {
	case errors.As(err, &bare):
		return usageErrorf("producer %s is one request's payload: name the consumer request it is for with --request (the consumer holds %d requests)", bare.Producer, bare.Requests)
	case errors.Is(err, verify.ErrAuditRecords):
		return usageErrorf("--audit-tail, --stored and --transfers: %v", err)
	case errors.Is(err, verify.ErrTransfersDumps):
		return usageErrorf("--transfers: %v", err)
	case errors.Is(err, verify.ErrMixKeySides):
		return usageErrorf("--mix-key: %v", err)
	case err != nil:
		return err
	}
	if err := sglangAudit(opts, res); err != nil {
		return err
	}
	err = report.RenderDiffAudits(opts.IO.Out, res.Diff, res.Audits, report.Format(opts.Output), report.DiffOptions{
		Style: tableStyle(opts.IO), AllowUnverified: opts.AllowUnverified,
	})
	if err != nil {
		return err
	}
	if err := writeDiffJUnit(opts, res); err != nil {
		return err
	}
	exit := resultExit(res, opts.AllowUnverified)
	if opts.HTML != "" {
		info := report.HTMLInfo{Command: opts.command, Producer: strings.Join(opts.Producer, " "), Consumer: strings.Join(opts.Consumer, " "),
			Exit: exitCode(exit), Version: versionString(), Time: opts.started}
		if n := allowedNote(opts, res); n != "" {
			info.Notes = append(info.Notes, n)
		}
		if err := writeReport(opts.IO, "report", opts.HTML, func(w io.Writer) error { return report.RenderDiffHTML(w, res, info) }); err != nil {
			return err
		}
	}
	allowedNotice(opts, res)
	strengthNotice(opts.IO, res)
	opts.IO.verdict = report.VerdictLine(res.Diff, res.Verdict())
	return exit
}

// writeDiffJUnit writes --junit FILE, if given: the comparison and its
// audits as JUnit XML, whatever -o prints.
func writeDiffJUnit(opts *DiffOptions, res *verify.Result) error {
	if opts.JUnit == "" {
		return nil
	}
	do := report.DiffOptions{AllowUnverified: opts.AllowUnverified, Elapsed: time.Since(opts.started)}
	return writeReport(opts.IO, "JUnit report", opts.JUnit, func(w io.Writer) error {
		return report.RenderDiffAudits(w, res.Diff, res.Audits, report.FormatJUnit, do)
	})
}

// resultExit maps a result to the command's: ExitMismatch, else
// ExitUnverified unless allowed, else nil.
func resultExit(res *verify.Result, allowUnverified bool) error {
	switch res.Verdict() {
	case verify.Mismatch:
		return &ResultError{Code: ExitMismatch, Msg: res.Summary()}
	case verify.Unverified:
		if !allowUnverified {
			return &ResultError{Code: ExitUnverified, Msg: res.Summary() + " (--allow-unverified accepts unverified loads)"}
		}
	}
	return nil
}
