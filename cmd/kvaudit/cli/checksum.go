package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
)

// ChecksumOptions are the settings of `kvaudit checksum`: the checksum's
// own (side.ChecksumOptions, its flags bound to the fields) and the
// command's.
type ChecksumOptions struct {
	side.ChecksumOptions
	IO     *Streams
	Paths  []string
	Output string
	// OutDir, for -o record, receives one file per rank.
	OutDir string
	// Force lets -o record --out replace existing record files.
	Force bool
	// PayloadForm is the form -o payload writes.
	PayloadForm wire.PayloadForm
	// Numbering is the numbering of -o table and json (docs/spec.md §1).
	Numbering checksum.Numbering
	// Stored emits (and checks) the offload tier's stored checksums
	// instead of the checks.
	Stored bool
	// Scheme is the checksum computed: "" (kvaudit's, vLLM's definition)
	// or sglang-adler32 (SGLang's own, of SGLang dumps; docs/sglang.md).
	Scheme string
	// Threads is the cpu engine's worker count (0: GOMAXPROCS), read by
	// --scheme sglang-adler32.
	Threads int
	// SGLangSent are --sglang-checksum values, which take the place of
	// the dumps' kv_checksum rows (verify.ParseSGLangChecksums).
	SGLangSent map[string]uint64
}

// NewCmdChecksum builds `kvaudit checksum`. runF replaces the run function
// in tests.
func NewCmdChecksum(s *Streams, runF func(context.Context, *ChecksumOptions) error) *cobra.Command {
	opts := &ChecksumOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "checksum DUMP|DIR|RECORD...",
		Short: "Checksum the requests of KV cache dumps, per group and block position",
		Long: `Checksum computes, for every request of the given ranks, one value per KV
cache group and block position, with the definition of vLLM's KV checksums:
independent of TP, PP, memory layout and block size, so a producer and a
consumer of any configuration compute the same numbers.

Give every rank of one side (dumps, directories holding them, or records
that other hosts computed with --partial -o record) to get whole-model
checks: check 0 is what a producer sends, and there is one check per replica
of replicated heads. With --partial, a subset of ranks is allowed and
-o record writes each rank's partial sums for merging elsewhere.

Pieces are numbered from the request's first token by default; --numbering
block restarts them at every block, as vLLM's published KV checksum code
does (its values; -o payload --payload-form flat sends them). One pass over
the KV gives both. A side of which nothing could be checksummed (every group
skipped) exits 2 with the reasons.

` + exitCodeHelp("checksum"),
		Example: `  # checksum every rank of a producer
  $ kvaudit checksum out/producer

  # SGLang's own value per request and rank, beside the one its prefill sent
  $ kvaudit checksum --scheme sglang-adler32 out/consumer

  # one host per rank: write its record, then merge the records anywhere
  $ kvaudit checksum --partial -o record --out records/ out/producer/rank-0-1.safetensors
  $ kvaudit checksum -o json records/

  # one request, with the literal reference engine
  $ kvaudit checksum --engine ref --request req-0 out/consumer`,
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
			if opts.PayloadForm, err = wire.ParsePayloadForm(cfg.String("payload-form")); err != nil {
				return usageErrorf("--payload-form: %v", err)
			}
			if opts.Numbering, err = checksum.ParseNumbering(cfg.String("numbering")); err != nil {
				return usageErrorf("--numbering: %v", err)
			}
			if opts.Output != "record" {
				if src, ok := cfg.Explicit("out"); ok {
					return usageErrorf("%s: only -o record writes files (got -o %s, which prints to stdout)", src, opts.Output)
				}
				opts.OutDir = "" // a top-level out: in kvaudit.yaml, for synth or inject
			}
			switch opts.Scheme = cfg.String("scheme"); opts.Scheme {
			case "kvaudit":
				opts.Scheme = ""
			case checksum.SchemeSGLangAdler32:
				if opts.Output != "table" && opts.Output != "json" && opts.Output != "markdown" {
					return usageErrorf("--scheme %s: -o %q: want table, json or markdown", opts.Scheme, opts.Output)
				}
				opts.Threads = cfg.Int("threads")
				if opts.SGLangSent, err = verify.ParseSGLangChecksums(cfg.Strings("sglang-checksum")); err != nil {
					return usageErrorf("--sglang-checksum %v", err)
				}
			default:
				return usageErrorf("--scheme %q: want kvaudit or %s", opts.Scheme, checksum.SchemeSGLangAdler32)
			}
			if src, ok := cfg.Explicit("sglang-checksum"); ok && opts.Scheme == "" {
				return usageErrorf("%s: only --scheme %s compares with values SGLang sent", src, checksum.SchemeSGLangAdler32)
			}
			opts.BlockValues = opts.Numbering == checksum.NumberBlock || (opts.Output == "payload" && opts.PayloadForm == wire.FormFlat)
			if opts.Engine, err = newEngine(cfg, s.Err); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			err = checksumRun(cmd.Context(), opts)
			if err == nil {
				runnerNotice(s, opts.Engine)
			}
			return err
		},
	}
	f := cmd.Flags()
	addOutputFlag(cmd, "record: each rank's partial sums; payload: a JSON map of request id to the base64 payload a producer sends")
	f.String("payload-form", "nested", "with -o payload: nested (request-numbered), or flat (vLLM's published form: block-numbered values, fingerprints with the block size)")
	f.String("numbering", "request", "piece numbering of -o table, markdown and json: request (from the request's first token) or block (from each block's first token, as vLLM's published code)")
	f.BoolVar(&opts.Partial, "partial", false, "allow a subset of the side's ranks (partial sums)")
	f.StringSliceVar(&opts.Requests, "request", nil, "checksum only this request id (repeatable)")
	f.String("engine", "cpu", engineHelp)
	f.Int("threads", 0, "threads of the cpu engine (default GOMAXPROCS)")
	addCUDATimeoutFlag(f)
	f.StringVar(&opts.OutDir, "out", "", "with -o record: directory to write rank-<pp>-<tp>.record.json files into (not a side's own directory)")
	f.BoolVar(&opts.Force, "force", false, "with -o record --out: replace existing record files")
	f.String("scheme", "kvaudit", "the checksum: kvaudit (vLLM's definition, per group and block position) or "+checksum.SchemeSGLangAdler32+" (SGLang's Adler-32 per request and rank, of SGLang dumps; -o table, json or markdown)")
	f.StringSlice("sglang-checksum", nil, "with --scheme "+checksum.SchemeSGLangAdler32+": the value SGLang's prefill sent for a request, REQ=0xHEX (TP rank 0) or REQ@TP=0xHEX (repeatable), in place of the kv_checksum row in the dump's manifest")
	f.BoolVar(&opts.Stored, "stored", false, "emit each full block's stored checksum (rank-local, tagged with its block hash) and check it against the manifest's stored_checksums; -o table, json or markdown")
	return cmd
}

func checksumRun(ctx context.Context, opts *ChecksumOptions) error {
	if opts.Stored {
		return storedRun(ctx, opts)
	}
	if opts.Scheme == checksum.SchemeSGLangAdler32 {
		return sglangChecksumRun(opts)
	}
	in := side.Input{Paths: opts.Paths}
	progress := func(_ string, dumps []*layout.Dump, requests []string) (func(int64), func()) {
		bar := newChecksumProgress(opts.IO, dumps, requests, "checksum")
		return bar.Callback(), bar.Finish
	}
	if opts.Output == "record" {
		if opts.OutDir != "" {
			// The output directory, before the work.
			if err := checkOutsideInputs(opts.OutDir, opts.Paths, false); err != nil {
				return err
			}
			if err := safeio.CheckOutDir(opts.OutDir); err != nil {
				return err
			}
		}
		recs, err := side.Records(ctx, in, side.RecordsOptions{Engine: opts.Engine, Requests: opts.Requests, Progress: progress})
		if err != nil {
			return err
		}
		return writeRecords(opts, recs)
	}
	copts := opts.ChecksumOptions
	copts.Progress = progress
	res, err := side.Checksum(ctx, in, copts)
	var incomplete *side.IncompleteError
	if errors.As(err, &incomplete) {
		return usageErrorf("got %s: give every rank of the side, or --partial for partial sums", incomplete.Ranks())
	}
	if err != nil {
		return err
	}
	c := res.Checks
	switch opts.Output {
	case "json":
		out := report.NewChecksumsJSONNumbered(c, opts.Numbering)
		out.Repeated = report.NewRepeatedBlocksJSON(res.Repeated)
		err = report.WriteJSON(opts.IO.Out, out)
	case "payload":
		err = writePayloads(opts.IO.Out, c, opts.PayloadForm)
	default:
		tables := []*report.Table{report.ChecksumsTableNumbered(c, opts.Numbering)}
		if len(res.Repeated) > 0 {
			tables = append(tables, report.RepeatedTable(res.Repeated))
		}
		err = opts.IO.renderTables(opts.Output, tables...)
	}
	if err != nil {
		return err
	}
	if err := res.Failed(); err != nil {
		// An audit finding: a block given at two positions of a request.
		return &ResultError{Code: ExitMismatch, Msg: string(verify.Mismatch) + ": " + err.Error()}
	}
	if err := res.Unchecked(); err != nil {
		return &ResultError{Code: ExitUnverified, Msg: err.Error()}
	}
	return nil
}

// writeRecords writes each rank's record: to stdout, one JSON document
// after the other, or with --out to one file per rank.
func writeRecords(opts *ChecksumOptions, recs []*wire.Record) error {
	for _, rec := range recs {
		b, err := wire.MarshalRecord(rec)
		if err != nil {
			return err
		}
		if opts.OutDir == "" {
			if _, err := opts.IO.Out.Write(b); err != nil {
				return err
			}
			continue
		}
		if err := checkOutsideInputs(opts.OutDir, opts.Paths, false); err != nil {
			return err
		}
		if err := safeio.MkdirOut(opts.OutDir); err != nil {
			return err
		}
		p := filepath.Join(opts.OutDir, fmt.Sprintf("rank-%d-%d.record.json", rec.PPRank, rec.TPRank))
		if err := safeio.WriteFile(p, b, opts.Force); err != nil {
			return err
		}
		wrote(opts.IO, "", p)
	}
	return nil
}

// storedRun is kvaudit checksum --stored: each full block's stored
// checksum and, where the manifests list stored checksums, whether they
// match (exit 1 if one differs).
func storedRun(ctx context.Context, opts *ChecksumOptions) error {
	if opts.Output != "table" && opts.Output != "json" && opts.Output != "markdown" {
		return usageErrorf("--stored: -o %q: want table, json or markdown", opts.Output)
	}
	_, step := verifyProgress(opts.IO)
	res, err := verify.CheckStored(ctx, side.Input{Paths: opts.Paths}, verify.StoredOptions{Engine: opts.Engine, Requests: opts.Requests, Step: step})
	if errors.Is(err, verify.ErrStoredRecords) {
		return usageErrorf("--stored: %v", err)
	}
	if err != nil {
		return err
	}
	if opts.Output == "json" {
		err = report.WriteJSON(opts.IO.Out, report.NewStoredJSON(res.Audits.Stored))
	} else {
		err = opts.IO.renderTables(opts.Output, report.StoredTable(res.Audits.Stored))
	}
	if err != nil {
		return err
	}
	opts.IO.verdict = "stored checksums: " + string(res.Verdict())
	if res.Verdict() == verify.Unverified {
		// Nothing stored to compare: exit 2, as diff --stored.
		return &ResultError{Code: ExitUnverified, Msg: res.Summary()}
	}
	return resultExit(res, false)
}
