package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/scrub"
)

// ScrubOptions are the settings of `kvaudit scrub`.
type ScrubOptions struct {
	IO *Streams
	// Paths are the stores (directories, or single files) as given.
	Paths  []string
	Format string
	Output string
	// HTML, when set, is a file to write the HTML report to as well.
	HTML            string
	AllowUnverified bool
	Threads         int
	command         string
	started         time.Time
}

// NewCmdScrub builds `kvaudit scrub`. runF replaces the run function in
// tests.
func NewCmdScrub(s *Streams, runF func(context.Context, *ScrubOptions) error) *cobra.Command {
	opts := &ScrubOptions{IO: s}
	names := []string{string(scrub.Auto)}
	for _, f := range scrub.Formats {
		names = append(names, string(f))
	}
	cmd := &cobra.Command{
		Use:   "scrub PATH...",
		Short: "Check KV stores at rest against the checksums the engines stored, and name every bad file or record",
		Long: `Scrub reads KV offload stores and checks every file or record against the
checksum its engine stored beside it, without writing, renaming or deleting
anything under PATH (the engines delete a file whose check fails; a scrub
keeps the evidence and names it):

  vllm-fs        vLLM's FS offload tier (PR #57912): the xattr
                 user.vllm.kv_crc32c, CRC-32C of the whole block file
  lmcache-fs     LMCache's FS L2 adapter, checksum="crc32": the payload, then
                 "LMC1" and its zlib CRC-32 (or, under O_DIRECT, that
                 trailer opening one more zero-padded block)
  lmcache-frame  LMCache's checksum serde (PR #4558): a version byte, the
                 chunk-hash fingerprint and the payload's xxh3_64
  mooncake-ssd   Mooncake's SSD offload (PR #2932): the CRC-32C of each
                 kv_cache.data record, located through kv_cache.meta

Every file or record is verified, mismatch or unverified, with its path,
offset, length, algorithm, expected and actual value, and what its name
says it holds (model, rank, group, block or chunk hash, key). --format auto
recognises each directory's store by its names and content, and says
which it used. PATH is walked: only regular files are read, symlinks are
not followed, and no read leaves PATH. docs/scrub.md has the formats.

` + exitCodeHelp("scrub"),
		Example: `  # a store of each format, then scrub them
  $ kvaudit synth --out kv --preset llama --store lmcache-fs
  $ kvaudit scrub kv/store

  # one bad byte in one file: named, with its expected and actual CRC
  $ kvaudit inject kv/store --fault store-byte-flip --seed 1 --out bad
  $ kvaudit scrub bad -o json

  # in CI after a fault test: JUnit, one test case per file, and the map
  $ kvaudit scrub /mnt/kv/lmcache -o junit --html scrub.html > scrub.xml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			opts.Paths = args
			if opts.Output, err = outputOf(cfg); err != nil {
				return err
			}
			if _, err := scrub.ParseFormat(opts.Format); err != nil {
				return &UsageError{err}
			}
			if err := checkOutputFile("--html", opts.HTML, opts.Paths); err != nil {
				return err
			}
			opts.started = time.Now()
			opts.command = commandLine(opts.IO, cmd, args)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return scrubRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	addOutputFlag(cmd, "")
	f.StringVar(&opts.Format, "format", string(scrub.Auto), "the store's format: "+orList(names)+" (auto: recognised per directory)")
	f.StringVar(&opts.HTML, "html", "", htmlFlagHelp)
	f.BoolVar(&opts.AllowUnverified, "allow-unverified", false, "exit 0 when nothing mismatches, even if some file or record has no stored checksum")
	f.IntVar(&opts.Threads, "threads", 0, "files read at once (default GOMAXPROCS)")
	return cmd
}

func scrubRun(ctx context.Context, opts *ScrubOptions) error {
	// A bar of the bytes read, of every file under the paths (a store's
	// own files: a few may be skipped, so it is full once the scrub is
	// done).
	var total int64
	if opts.IO.ErrTerminal {
		total = filesBytes(opts.Paths)
	}
	bar := newProgress(opts.IO, total, "scrubbing")
	res, err := scrub.Scrub(ctx, opts.Paths, scrub.Options{Format: scrub.Format(opts.Format), Threads: opts.Threads, Progress: bar.Callback()})
	if err == nil {
		bar.Set(total)
	}
	bar.Finish()
	if err != nil {
		return err
	}
	if err := report.RenderScrub(opts.IO.Out, res, report.Format(opts.Output), tableStyle(opts.IO), time.Since(opts.started)); err != nil {
		return err
	}
	exit := scrubExit(res, opts.AllowUnverified)
	if opts.HTML != "" {
		info := report.HTMLInfo{Command: opts.command, Exit: exitCode(exit), Version: versionString(), Time: opts.started}
		if err := writeReport(opts.IO, "report", opts.HTML, func(w io.Writer) error { return report.RenderScrubHTML(w, res, info) }); err != nil {
			return err
		}
	}
	opts.IO.verdict = res.Summary()
	return exit
}

// scrubExit maps a scrub to the command's exit: ExitMismatch for any
// mismatch, ExitUnverified for any unverified entry (unless allowed),
// else nil.
func scrubExit(res *scrub.Result, allowUnverified bool) error {
	switch res.Verdict() {
	case scrub.Mismatch:
		return &ResultError{Code: ExitMismatch, Msg: res.Summary()}
	case scrub.Unverified:
		if !allowUnverified {
			return &ResultError{Code: ExitUnverified, Msg: fmt.Sprintf("%s (--allow-unverified accepts them)", res.Summary())}
		}
	}
	return nil
}
