package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/report"
)

// CampaignOptions are the settings of `kvaudit campaign`: the library's
// options, with the flags bound to their fields, and the command's own.
type CampaignOptions struct {
	IO *Streams
	// Paths are producer and consumer sides, alternately (none: the
	// synthesized pairs).
	Paths  []string
	Output string
	// JUnit, when set, is a file to write the JUnit report to as well;
	// HTML the HTML report (--html FILE).
	JUnit string
	HTML  string
	// command is the command line, for the HTML report.
	command string
	// Engine is whose pairs: "" (vLLM's layouts) or sglang (SGLang pools,
	// inject.SGLangCampaign).
	Engine string
	inject.CampaignOptions
}

// NewCmdCampaign builds `kvaudit campaign`. runF replaces the run function
// in tests.
func NewCmdCampaign(s *Streams, runF func(context.Context, *CampaignOptions) error) *cobra.Command {
	opts := &CampaignOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "campaign [PRODUCER CONSUMER]...",
		Short: "Inject many seeded faults of every kind and measure detection and localisation",
		Long: `Campaign proves the checks work: for every fault kind it runs --trials
seeded trials, each injecting one fault into a consumer (or the producer's
payload), checksumming, comparing with the producer, drilling down and
auditing (tail audit, stored checksums), and judging the outcome against
the fault's fault.json: detected by the expected detector, localised exactly
(group, consumer positions, replica checks, drill-down layer/head/hint,
audit findings), missed, or a false positive. Every pair is also compared
untouched (a clean control), and past-num-tokens writes are a control that
must never be flagged.

Without arguments it synthesizes its own pairs over every preset with a mix
of TP (1->2, 2->1, 1->4), PP, layouts, formats and producer/consumer block
sizes, and prepares each consumer the way a connector that keeps its
invariants leaves it (tails zeroed, a block allocated past the last token,
stored checksums). With arguments, each PRODUCER CONSUMER pair of sides is used as
it is (kinds a pair cannot take are counted as not applicable). Trials run
in parallel in-process; each writes and recomputes only the consumer ranks
its fault changes. The inputs are never written.

--trials counts trials per kind. The table's pairs column says on how
many of the campaign's pairs a kind's trials ran (each trial picks one the
kind applies to; the store-* kinds run on one small side per store format);
caught by vLLM's checksum counts the trials vLLM's checksum alone would have
caught. The command exits 1 when a detectable fault was missed or
mislocalised or a control was flagged.

` + exitCodeHelp("campaign"),
		Example: `  # every kind, 20 trials each, over the synthesized pairs
  $ kvaudit campaign

  # the full run, as JUnit for CI
  $ kvaudit campaign --trials 200 -o junit > campaign.xml

  # SGLang pools: what kvaudit and what SGLang's own Adler-32 catch
  $ kvaudit campaign --engine sglang --trials 50

  # two kinds on your own producer and consumer dumps
  $ kvaudit campaign --fault bit-flip --fault stale-block out/producer out/consumer`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			if len(args)%2 != 0 {
				return usageErrorf("campaign takes sides in pairs, PRODUCER CONSUMER...; got %s", givenArgs(args))
			}
			opts.Paths = args
			if err := opts.resolve(cfg); err != nil {
				return err
			}
			opts.command = commandLine(opts.IO, cmd, args)
			switch opts.Engine = cfg.String("engine"); opts.Engine {
			case "vllm":
				opts.Engine = ""
			case "sglang":
				if len(args) > 0 || len(opts.Kinds) > 0 || opts.HTML != "" || opts.JUnit != "" || (opts.Output != "table" && opts.Output != "json" && opts.Output != "markdown") {
					return usageErrorf("--engine sglang runs over its own synthesized SGLang pairs and kinds: no sides, --fault, --html or --junit; -o table, json or markdown")
				}
			default:
				return usageErrorf("--engine %q: want vllm or sglang", opts.Engine)
			}
			if err := checkOutputFile("--html", opts.HTML, args); err != nil {
				return err
			}
			// Before the campaign, not after it.
			if err := checkOutputFile("--junit", opts.JUnit, args); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return campaignRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Trials, "trials", 20, "trials per fault kind")
	f.Uint64Var(&opts.Seed, "seed", 1, "seed of the campaign (and of the synthesized KV)")
	f.StringSlice("fault", nil, "fault kind to run (repeatable, or comma-separated; default every kind)")
	addOutputFlag(cmd, "")
	f.StringVar(&opts.JUnit, "junit", "", "also write the JUnit XML report to this file (the table, or -o, still printed)")
	f.StringVar(&opts.HTML, "html", "", htmlFlagHelp)
	f.IntVar(&opts.Workers, "threads", 0, "trials run at once (default GOMAXPROCS)")
	f.StringSlice("faults", nil, "")
	_ = f.MarkDeprecated("faults", "use --fault")
	f.Int("workers", 0, "")
	_ = f.MarkDeprecated("workers", "use --threads")
	f.String("engine", "vllm", "whose caches: vllm (its layouts; every fault kind) or sglang (SGLang pools, MHA and MLA, page sizes 1 and 16, TP 1 and 2; a column for what SGLang's own Adler-32 catches)")
	f.StringVar(&opts.Dir, "dir", "", "directory for the campaign's scratch files, removed afterwards (default the system's temporary directory)")
	return cmd
}

// resolve completes the options from the command's settings (the bound
// fields already hold the resolved values: config.apply): the output, the
// kinds and the deprecated --workers are parsed and checked.
func (o *CampaignOptions) resolve(cfg *config) error {
	var err error
	if o.Output, err = outputOf(cfg); err != nil {
		return err
	}
	if cfg.Changed("workers") {
		o.Workers = cfg.Int("workers")
	}
	if o.Trials < 1 {
		return usageErrorf("--trials %d: want at least 1", o.Trials)
	}
	for _, name := range append(cfg.Strings("fault"), cfg.Strings("faults")...) {
		k, err := inject.ParseKind(strings.TrimSpace(name))
		if err != nil {
			return &UsageError{fmt.Errorf("--fault: %w", err)}
		}
		o.Kinds = append(o.Kinds, k)
	}
	return nil
}

// trialsProgress is a campaign's progress: a bar of its trials, made at
// the first trial's end (the campaign knows their number then), nil when
// stderr is not a terminal. finish removes the bar.
func trialsProgress(s *Streams) (onTrial func(done, total int), finish func()) {
	if !s.ErrTerminal {
		return nil, func() {}
	}
	var bar *progress
	var mu sync.Mutex
	onTrial = func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if bar == nil {
			bar = newCountProgress(s, int64(total), "trials")
		}
		bar.Set(int64(done))
	}
	finish = func() {
		mu.Lock()
		defer mu.Unlock()
		bar.Finish()
	}
	return onTrial, finish
}

func campaignRun(ctx context.Context, opts *CampaignOptions) error {
	if opts.Engine == "sglang" {
		return sglangCampaignRun(ctx, opts)
	}
	c := opts.CampaignOptions
	for i := 0; i+1 < len(opts.Paths); i += 2 {
		c.Pairs = append(c.Pairs, inject.Pair{
			Name:     opts.Paths[i] + " > " + opts.Paths[i+1],
			Producer: []string{opts.Paths[i]}, Consumer: []string{opts.Paths[i+1]},
		})
	}
	var finish func()
	c.Progress, finish = trialsProgress(opts.IO)
	started := time.Now()
	res, err := inject.Campaign(ctx, c)
	finish() // an interrupted campaign leaves no bar behind
	if err != nil {
		return err
	}
	if err := report.RenderCampaign(opts.IO.Out, res, report.Format(opts.Output), tableStyle(opts.IO)); err != nil {
		return err
	}
	if opts.JUnit != "" {
		if err := writeReport(opts.IO, "JUnit report", opts.JUnit, func(w io.Writer) error { return report.WriteCampaignJUnit(w, res) }); err != nil {
			return err
		}
	}
	opts.IO.verdict = "campaign: pass"
	var exit error
	if !res.Pass {
		var failed []string
		for _, k := range res.Kinds {
			if k.Failed() {
				failed = append(failed, string(k.Kind))
			}
		}
		for _, p := range res.Pairs {
			if !p.Verified {
				failed = append(failed, "clean "+p.Name)
			}
		}
		exit = &ResultError{Code: ExitMismatch, Msg: "campaign failed: " + strings.Join(failed, ", ")}
	}
	if opts.HTML != "" {
		info := report.HTMLInfo{Command: opts.command, Exit: exitCode(exit), Version: versionString(), Time: started}
		if err := writeReport(opts.IO, "report", opts.HTML, func(w io.Writer) error { return report.RenderCampaignHTML(w, res, info) }); err != nil {
			return err
		}
	}
	return exit
}
