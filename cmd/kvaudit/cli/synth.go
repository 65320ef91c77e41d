package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/parse"
)

// SynthOptions are the settings of `kvaudit synth`.
type SynthOptions struct {
	IO     *Streams
	Out    string
	Config synth.Config
	// Store, when set, also writes the side's KV as that store format
	// (or every one: "all") under Out/store/ (synth_store.go).
	Store string
}

// NewCmdSynth builds `kvaudit synth`.
func NewCmdSynth(s *Streams, runF func(context.Context, *SynthOptions) error) *cobra.Command {
	opts := &SynthOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "synth --out DIR",
		Short: "Write deterministic synthetic KV cache dumps of model presets",
		Long: `Synth writes every rank of a synthetic producer or consumer under
DIR/<role>/rank-<pp>-<tp>: a model preset in any layout, TP and PP split,
block size and kernel block size. The KV itself depends only on the seed,
the request, the layer, the global head and the token position, so a
producer and a consumer written with the same seed hold the same KV and
verify whatever their configurations; block ids, unused blocks and slots
past the last token differ between configurations.

Presets: ` + strings.Join(synth.Presets, ", ") + `. The state presets
(Mamba2 and gated delta net hybrids, Mamba1) write state layers whose
conv state is dim-first or channels-last, in bfloat16 or float32.

With --transfers, a consumer synthesized beside a producer in the same
DIR also gets its ranks' NIXL logs of a correct pull from that producer,
DIR/nixl/AGENT.jsonl (kvaudit-nixl-log/1), with the descriptors vLLM's
NIXL connector builds: per layer and K/V page, per kernel block, head
slices across TP sizes, pages cut into chunks of the producer's blocks; the
consumer's slots past the last token are zeroed, as vLLM leaves them.
Every dump gets device addresses and an agent name, so that the logs
resolve to its cells (kvaudit transfers).

Each file is written under a temporary name and renamed into place when
complete; existing files are replaced only with --force.
Layouts: ` + strings.Join(synth.Layouts, ", ") + `.`,
		Example: `  # a TP1 producer in the FlashAttention layout
  $ kvaudit synth --out out --preset llama --role producer

  # a Mamba2 hybrid at TP 4, channels-last fp32 conv state (B and C replicated)
  $ kvaudit synth --out out --preset mamba2-hybrid --tp 4 --conv-layout channels-last --conv-dtype float32

  # a TP2 consumer in the HND layout with 32-token blocks and a 16-token prefix hit
  $ kvaudit synth --out out --preset llama --role consumer --tp 2 --layout hnd --block-size 32 --prefix-tokens 16

  # SGLang pools: a TP2 MHA producer with 16-token pages, and its consumer
  $ kvaudit synth --out sg --engine sglang --preset llama --tp 2
  $ kvaudit synth --out sg --engine sglang --preset llama --tp 2 --role consumer

  # a producer, then a TP2 consumer and the NIXL logs of its pull from it
  $ kvaudit synth --out kv --preset llama --layout hnd
  $ kvaudit synth --out kv --preset llama --layout hnd --role consumer --tp 2 --transfers`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			opts.Out = cfg.String("out")
			if opts.Out == "" {
				return usageErrorf("--out is required")
			}
			opts.Config = synth.Config{
				Preset: cfg.String("preset"), Layers: cfg.Int("layers"), TP: cfg.Int("tp"), PP: cfg.Int("pp"),
				Layout: cfg.String("layout"), BlockSize: cfg.Int("block-size"), KernelBlockSize: cfg.Int("kernel-block-size"),
				NumBlocks: cfg.Int("num-blocks"), Requests: cfg.Int("requests"), Tokens: cfg.Int("tokens"),
				PrefixTokens: cfg.Int("prefix-tokens"), Seed: cfg.Uint64("seed"), Role: cfg.String("role"),
				Format: cfg.String("format"), ConvLayout: cfg.String("conv-layout"), ConvDtype: cfg.String("conv-dtype"),
				NoStateSplit: cfg.Bool("no-state-split"), Force: cfg.Bool("force"), Transfers: cfg.Bool("transfers"),
				Planner: cfg.String("planner"),
				Engine:  cfg.String("engine"),
			}
			if opts.Config, err = opts.Config.Normalize(); err != nil {
				return synthFlagError(err)
			}
			if opts.Store = cfg.String("store"); opts.Store != "" {
				if err := checkStoreFormat(opts.Store); err != nil {
					return err
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return synthRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.String("out", "", "directory to write DIR/<role>/... into (required)")
	f.String("preset", "llama", "model preset: "+strings.Join(synth.Presets, ", "))
	f.Int("layers", 0, "number of layers (default: the preset's)")
	f.Int("tp", 1, "tensor-parallel size")
	f.Int("pp", 1, "pipeline-parallel size")
	f.String("layout", "flash", "tensor layout: "+strings.Join(synth.Layouts, ", "))
	f.Int("block-size", 0, "tokens per block (default: the preset's)")
	f.Int("kernel-block-size", 0, "tokens per kernel block (default: the block size)")
	f.Int("num-blocks", 0, "blocks in each cache (default: twice what the requests need, plus 3)")
	f.Int("requests", 0, "number of requests (default: the preset's)")
	f.Int("tokens", 0, "tokens per request (default: the preset's)")
	f.Int("prefix-tokens", 0, "a consumer's local prefix-cache hit (num_local_computed_tokens)")
	f.Uint64("seed", 1, "seed of the logical KV")
	f.String("role", "producer", "producer or consumer")
	f.String("format", "safetensors", "how ranks are written: "+strings.Join(synth.Formats, ", "))
	f.String("conv-layout", "dim-first", "state presets: conv state layout, "+strings.Join(synth.ConvLayouts, " or "))
	f.String("conv-dtype", "bfloat16", "state presets: conv state dtype, bfloat16 or float32")
	f.String("engine", "vllm", "whose cache: vllm (its layouts) or sglang (SGLang's MHATokenToKVPool or MLATokenToKVPool, presets tiny, llama and mla; pages of --block-size tokens; docs/sglang.md)")
	f.Bool("force", false, "replace existing rank files under DIR/<role> (never through a symlink)")
	f.Bool("no-state-split", false, "state presets: write state layers without their TP split (one slice per rank)")
	f.String("store", "", storeFlagHelp)
	f.Bool("transfers", false, "consumer: also write DIR/nixl/AGENT.jsonl, its ranks' NIXL logs of the pull from DIR/producer")
	f.String("planner", nixl.PlannerVLLM, "with --transfers, how the pull pairs blocks: vllm (as vLLM's NIXL connector does at 9aaf83ef5, end-trim included, misaligned where vLLM's is: docs/transfers.md) or exact (by token)")
	return cmd
}

func synthRun(ctx context.Context, opts *SynthOptions) error {
	created := synthCreates(opts.Out, opts.Config)
	for _, p := range created {
		safeio.Track(p) // an interrupted synth leaves nothing of its own behind
	}
	var err error
	defer func() {
		if err == nil { // on an interruption, Cleanup still has them
			for _, p := range created {
				safeio.Forget(p)
			}
		}
	}()
	cfg := opts.Config
	desc := "synthesizing " + cfg.Role
	var bar *progress
	if total, err := synth.TotalWork(cfg); err == nil && total > 0 {
		bar = newWorkProgress(opts.IO, total, desc)
		cfg.Progress = bar.Callback()
	}
	done := bar.Finish
	if bar == nil {
		done = longStep(opts.IO, fmt.Sprintf("%s (%s, tp %d, pp %d) into %s", desc, cfg.Preset, cfg.TP, cfg.PP, opts.Out))
	}
	var w *synth.Written
	w, err = synth.WriteSide(ctx, opts.Out, cfg)
	done()
	if err != nil {
		var np *nixl.NotPlannableError
		if errors.As(err, &np) {
			return &UsageError{err}
		}
		return err
	}
	paths := w.Dumps
	c := opts.Config
	fmt.Fprintf(opts.IO.Err, "wrote %d rank(s) of %s (%s, tp %d, pp %d, layout %s, block size %d, %d request(s) of %d tokens):\n",
		len(paths), c.Role, c.Preset, c.TP, c.PP, c.Layout, c.BlockSize, c.Requests, c.Tokens)
	for _, p := range paths {
		fmt.Fprintf(opts.IO.Err, "  %s\n", p)
	}
	if len(w.Logs) > 0 {
		fmt.Fprintf(opts.IO.Err, "wrote %d NIXL log(s) of the pull from the producer:\n", len(w.Logs))
		for _, p := range w.Logs {
			fmt.Fprintf(opts.IO.Err, "  %s\n", p)
		}
	}
	if opts.Store != "" {
		err = writeSynthStore(opts)
	}
	return err
}

// synthCreates lists what synth of c into out creates that does not
// exist yet: the first directory of out/<role> (or out/nixl, out/store)
// missing, and the rank files and directories out/<role> does not hold
// yet. An interrupted synth removes them (safeio.Track), and nothing
// else.
func synthCreates(out string, c synth.Config) []string {
	var paths []string
	missing := func(p string) bool {
		_, err := os.Lstat(p)
		return errors.Is(err, fs.ErrNotExist)
	}
	// newDir is the first directory of dir's path that is missing ("" if
	// none is).
	newDir := func(dir string) string {
		first := ""
		for d := filepath.Clean(dir); missing(d); d = filepath.Dir(d) {
			first = d
			if filepath.Dir(d) == d {
				break
			}
		}
		return first
	}
	role := filepath.Join(out, c.Role)
	for _, dir := range []string{role, filepath.Join(out, "nixl"), filepath.Join(out, "store")} {
		if d := newDir(dir); d != "" && !slices.Contains(paths, d) {
			paths = append(paths, d)
		}
	}
	for pp := range c.PP {
		for tp := range c.TP {
			for _, name := range []string{fmt.Sprintf("rank-%d-%d", pp, tp), fmt.Sprintf("rank-%d-%d.safetensors", pp, tp)} {
				if p := filepath.Join(role, name); missing(p) && !slices.Contains(paths, role) && newDir(role) == "" {
					paths = append(paths, p)
				}
			}
		}
	}
	return paths
}

// synthFlags are the flags of synth.Config's fields (the Field of a
// *parse.Error of parse.SynthConfig).
var synthFlags = map[string]string{
	"Layers": "--layers", "TP": "--tp", "PP": "--pp", "BlockSize": "--block-size",
	"KernelBlockSize": "--kernel-block-size", "NumBlocks": "--num-blocks", "Requests": "--requests",
	"Tokens": "--tokens", "PrefixTokens": "--prefix-tokens",
}

// synthFlagError reports a configuration synth rejects with its flag.
func synthFlagError(err error) error {
	if fe := parse.As(err, parse.SynthConfig); fe != nil {
		if flag, ok := synthFlags[fe.Field]; ok {
			return usageErrorf("%s %s", flag, fe.Msg)
		}
	}
	return &UsageError{err}
}
