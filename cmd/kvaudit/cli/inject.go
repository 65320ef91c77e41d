package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

// InjectOptions are the settings of `kvaudit inject`: the library's
// options, with the flags bound to their fields, and the command's own.
type InjectOptions struct {
	IO    *Streams
	Paths []string
	Out   string
	// ProducerPaths are the producer's dumps (--producer), which the
	// transfer-log kinds read.
	ProducerPaths []string
	// Output is table or markdown (a summary) or json (fault.json).
	Output string
	inject.Options
}

// NewCmdInject builds `kvaudit inject`. runF replaces the run function in
// tests.
func NewCmdInject(s *Streams, runF func(context.Context, *InjectOptions) error) *cobra.Command {
	opts := &InjectOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "inject DUMP|DIR... --fault KIND --out DIR",
		Short: "Write a corrupted copy of a side and fault.json: what changed and what should catch it",
		Long:  injectLong(),
		Example: `  # flip one bit somewhere in a consumer, then see diff find it
  $ kvaudit inject out/consumer --fault bit-flip --seed 7 --out bad
  $ kvaudit diff out/producer bad

  # swap two heads of layer 1 in request req-0's block at position 2
  $ kvaudit inject out/consumer --fault swap-heads --request req-0 --layer 1 --position 2 --out bad

  # an unzeroed tail on a consumer whose connector zeroes tails, found by the tail audit only
  $ kvaudit inject out/consumer --fault stale-tail --zero-tails --extra-blocks 1 --out bad
  $ kvaudit diff out/producer bad --audit-tail

  # a tampered payload
  $ kvaudit inject out/producer --fault payload-flip --out bad
  $ kvaudit diff bad/payloads.json out/consumer

  # a lapsed lease in a NIXL log of the pull (bad holds the consumer as the READ left it, and bad/nixl)
  $ kvaudit inject kv/consumer --fault xfer-lapsed-lease --transfers kv/nixl --producer kv/producer --out bad
  $ kvaudit diff kv/producer bad --transfers bad/nixl`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			opts.Paths = args
			if err := opts.resolve(cfg); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return injectRun(cmd.Context(), opts)
		},
	}
	addInjectFlags(cmd, opts)
	return cmd
}

// injectLong is inject's help: what it writes, and every kind with what
// it models and what catches it.
func injectLong() string {
	// The names in a column as wide as the longest (a name of 16 or more
	// characters ran into its description); the help's wrapping
	// (wrapHelp) hangs a long description under its column.
	width := len("none")
	for _, k := range inject.Kinds() {
		width = max(width, len(k))
	}
	kinds := []string{}
	for _, k := range inject.Kinds() {
		in, _ := inject.InfoOf(k)
		kinds = append(kinds, fmt.Sprintf("  %-*s  %s (%s)", width, in.Kind, in.Models, in.Detector))
	}
	kinds = append(kinds, fmt.Sprintf("  %-*s  %s", width, "none", "no change: a clean copy (a control)"))
	return `Inject copies a side (its dumps, or the producer's payloads for payload
faults) into --out with one seeded fault, the way KV transfers go wrong, and
writes --out/fault.json: the kind, the seed, the rank, tensor and file, the
exact byte ranges that differ from the input, the (group, block position)s
affected, the detector expected to catch it (checksum, co-resident,
tail-audit, stored, payload, none) and what each detector must report. The
input is never written and the copy never shares storage with it: every
file is copied (streamed), the fault planned on the copy and patched into
it, in a temporary directory beside --out that is renamed to --out when
complete; an interrupted injection leaves nothing at --out. --out must not
exist or be empty; --force replaces a previous injection's output (a
directory holding fault.json), nothing else.

Targets (--request, repeatable, --group, --layer, --head, --position, --rank
PP:TP or TP) narrow where the fault goes; the seed picks the rest.

--zero-tails, --extra-blocks N and --add-stored first turn the side into the
consumer the audits expect (tails zeroed, N blocks allocated past each
request's last token, stored checksums of an offload tier); fault.json's
byte ranges are then relative to that prepared copy. --fault none with them
writes just the prepared copy.

Kinds:
` + strings.Join(kinds, "\n") + `

` + exitCodeHelp("inject")
}

// addInjectFlags adds inject's flags, bound to the options' fields where
// the flag's type is the field's; resolve parses the others.
func addInjectFlags(cmd *cobra.Command, o *InjectOptions) {
	f := cmd.Flags()
	f.StringSlice("fault", nil, "fault kind (see above; one)")
	f.StringVar(&o.Out, "out", "", "directory to write the copy and fault.json into (created; must not exist or be empty)")
	f.BoolVar(&o.Force, "force", false, "replace --out if it holds a previous kvaudit inject output (fault.json)")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of every choice the targets leave open")
	f.StringSlice("request", nil, "target request id (repeatable: the seed picks one of them)")
	f.Int("group", -1, "target group id")
	f.StringVar(&o.Target.Layer, "layer", "", "target layer name or number")
	f.Int("head", -1, "target global KV head (a global state row for state faults)")
	f.Int("position", -1, "target block position")
	f.String("rank", "", "target rank: TP or PP:TP")
	f.IntVar(&o.Bits, "bits", 1, "bits to flip (bit-flip, replica-diverge, state-flip, payload-flip; cancelling-flips: an even number of top bits, 2 or 4 at random below 2)")
	f.BoolVar(&o.Prepare.ZeroTails, "zero-tails", false, "first zero every slot no request's tokens occupy (a connector that zeroes tails)")
	f.IntVar(&o.Prepare.ExtraBlocks, "extra-blocks", 0, "first append N unused blocks past each request's last token")
	f.BoolVar(&o.Prepare.Stored, "add-stored", false, "first give full blocks block hashes and stored checksums (an offload tier)")
	f.Bool("stored", false, "")
	_ = f.MarkDeprecated("stored", "use --add-stored (--stored checks stored checksums in checksum and diff)")
	f.String("payload-form", "nested", "form of the payloads payload faults write: nested or flat")
	f.StringSliceVar(&o.Transfers, "transfers", nil, "transfer-log faults: the NIXL logs of the pull into the side (files or directories)")
	f.StringSliceVar(&o.ProducerPaths, "producer", nil, "transfer-log faults: the producer's dumps the logs read from")
	addOutputFlag(cmd, "table and markdown: a summary; json: fault.json")
	f.String("engine", "cpu", engineHelp)
	f.Int("threads", 0, "threads of the cpu engine (default GOMAXPROCS)")
	addCUDATimeoutFlag(f)
}

// resolve completes the options from the command's settings (the bound
// fields already hold the resolved values: config.apply): the settings
// whose flag is not the field's type are parsed and checked.
func (o *InjectOptions) resolve(cfg *config) error {
	if o.Out == "" {
		return usageErrorf("--out is required")
	}
	var err error
	if o.Output, err = outputOf(cfg); err != nil {
		return err
	}
	faults := cfg.Strings("fault")
	if len(faults) == 0 {
		kinds := faultNames()[1:] // none is said apart
		return usageErrorf("--fault is required: one of %s (or none, for a clean copy)", strings.Join(kinds, ", "))
	}
	if len(faults) > 1 {
		return usageErrorf("--fault %s: inject writes one fault (kvaudit campaign runs several kinds)", strings.Join(faults, ","))
	}
	if o.Kind, err = inject.ParseKind(strings.Join(faults, "")); err != nil {
		return &UsageError{fmt.Errorf("--fault: %w", err)}
	}
	if o.Bits < 1 {
		return usageErrorf("--bits %d: want at least 1", o.Bits)
	}
	if err := o.resolveTarget(cfg); err != nil {
		return err
	}
	if o.PayloadForm, err = wire.ParsePayloadForm(cfg.String("payload-form")); err != nil {
		return &UsageError{err}
	}
	if cfg.Bool("stored") {
		o.Prepare.Stored = true
	}
	if o.Prepare.ExtraBlocks < 0 {
		return usageErrorf("--extra-blocks %d is negative", o.Prepare.ExtraBlocks)
	}
	if o.Engine, err = newEngine(cfg, o.IO.Err); err != nil {
		return err
	}
	o.Step = func(what string) func() { return longStep(o.IO, what) }
	return nil
}

// resolveTarget parses the targets: --request (several: the seed picks
// one of them), --group, --head and --position (-1, their default, is no
// target) and --rank.
func (o *InjectOptions) resolveTarget(cfg *config) error {
	t := &o.Target
	switch requests := cfg.Strings("request"); len(requests) {
	case 0:
	case 1:
		t.Request = requests[0]
	default:
		o.Positions = func(request string, _, _ int) bool { return slices.Contains(requests, request) }
	}
	for _, x := range []struct {
		flag string
		dst  **int
	}{{"group", &t.Group}, {"head", &t.Head}, {"position", &t.Position}} {
		if cfg.Changed(x.flag) || cfg.Int(x.flag) >= 0 {
			v := cfg.Int(x.flag)
			if v < 0 {
				return usageErrorf("--%s %d is negative", x.flag, v)
			}
			*x.dst = &v
		}
	}
	if r := cfg.String("rank"); r != "" {
		var err error
		if t.Rank, err = parseRank(r); err != nil {
			return err
		}
	}
	return nil
}

// parseRank reads "TP" or "PP:TP".
func parseRank(s string) (*inject.Rank, error) {
	pp, tp, ok := strings.Cut(s, ":")
	if !ok {
		pp, tp = "0", s
	}
	p, err1 := strconv.Atoi(pp)
	t, err2 := strconv.Atoi(tp)
	if err1 != nil || err2 != nil || p < 0 || t < 0 {
		return nil, usageErrorf("--rank %q: want TP or PP:TP (non-negative integers)", s)
	}
	return &inject.Rank{PP: p, TP: t}, nil
}

// injectRun checks the arguments, opens the side and makes the one
// library call (inject.Inject, which prepares the side first when asked),
// then prints fault.json or its summary.
func injectRun(ctx context.Context, opts *InjectOptions) error {
	if info, _ := inject.InfoOf(opts.Kind); info.Input == inject.InputStore {
		return injectStoreRun(ctx, opts)
	}
	dumps, err := layout.OpenPaths(opts.Paths)
	if err != nil {
		return err
	}
	defer layout.CloseAll(dumps)
	if len(opts.ProducerPaths) > 0 {
		prod, err := layout.OpenPaths(opts.ProducerPaths)
		if err != nil {
			return fmt.Errorf("producer: %w", err)
		}
		defer layout.CloseAll(prod)
		opts.Producer = prod
	}
	inputs := append(append(slices.Clone(opts.Paths), opts.ProducerPaths...), opts.Transfers...)
	if err := checkOutsideInputs(opts.Out, inputs, opts.Force); err != nil {
		return err
	}
	o := opts.Options
	// A bar of the side's bytes copied (twice when the side is prepared
	// first), in place of the steps' status lines.
	var total int64
	if opts.IO.ErrTerminal {
		total = filesBytes(opts.Paths)
	}
	if o.Prepare.Asks() {
		total *= 2
	}
	bar := newProgress(opts.IO, total, "injecting "+string(o.Kind))
	if bar != nil {
		o.Progress, o.Step = bar.Callback(), nil
	}
	f, err := inject.Inject(ctx, dumps, opts.Out, o)
	if err == nil {
		bar.Set(total) // done, whatever was copied
	}
	bar.Finish()
	var na *inject.NotApplicableError
	if errors.As(err, &na) {
		return fmt.Errorf("%w (kvaudit inject --help lists what each kind needs)", err)
	}
	if err != nil {
		return injectFlagError(err)
	}
	if opts.Output == "json" {
		return report.WriteJSON(opts.IO.Out, f)
	}
	return opts.IO.renderTables(opts.Output, faultTable(f, opts.Out))
}

// filesBytes is the bytes of the regular files at paths and under them.
func filesBytes(paths []string) int64 {
	var n int64
	for _, p := range paths {
		_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					n += info.Size()
				}
			}
			return nil
		})
	}
	return n
}

// injectFlags are the flags of inject's options (inject.OptionError).
var injectFlags = map[string]string{
	"Target.Request": "--request", "Target.Group": "--group", "Target.Rank": "--rank",
	"Target.Layer": "--layer", "Target.Head": "--head", "Target.Position": "--position",
	"Bits": "--bits", "ExtraBlocks": "--extra-blocks",
}

// injectFlagError names the flag of an option inject rejects.
func injectFlagError(err error) error {
	var oe *inject.OptionError
	if errors.As(err, &oe) {
		if flag, ok := injectFlags[oe.Option]; ok {
			return usageErrorf("%s %s: %s", flag, oe.Value, oe.Msg)
		}
	}
	return err
}

// faultTable is a fault's summary (Fault.Summary) as a table.
func faultTable(f *inject.Fault, out string) *report.Table {
	t := &report.Table{
		Title: fmt.Sprintf("kvaudit inject: %s (seed %d) into %s", f.Kind, f.Seed, out),
		Notes: []string{"fault.json lists every changed byte range and what each detector must report"},
	}
	for _, l := range f.Summary() {
		t.Add(report.C("%s", l.Name), report.C("%s", l.Text))
	}
	return t
}
