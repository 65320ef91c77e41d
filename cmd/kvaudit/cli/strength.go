package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/kvaudit/kvaudit/verify"
)

// addStrengthFlags adds the comparison's strength flags (docs/spec.md
// §14): --require-mix and --mix-key.
func addStrengthFlags(f *pflag.FlagSet, opts *verify.CompareOptions) {
	f.BoolVar(&opts.RequireMix, "require-mix", false, "a group compared by vLLM's checksum alone (a side without kvaudit's mix check: a flat payload, vLLM's kv_transfer_params, the cuda engine) is unverified (exit 2)")
	f.String("mix-key", "", "the key of kvaudit's mix check when both sides are dumps (default: a random key per run, in -o json as mix_key): that mix_key reproduces a run; 'published' (or 0) is the key records and payloads carry")
}

// mixKeyOf reads --mix-key: nil when not set (a random key per run),
// else the key ("published" is 0).
func mixKeyOf(cfg *config) (*uint64, error) {
	s := strings.TrimSpace(cfg.String("mix-key"))
	if s == "" {
		return nil, nil
	}
	if s == "published" {
		k := checksum.PublishedMixKey
		return &k, nil
	}
	k, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return nil, usageErrorf("%s %q: want a key as diff -o json's mix_key gives it (0x and hex digits), or published", cfg.Source("mix-key"), s)
	}
	return &k, nil
}

// strengthNotice says on stderr that a comparison verified by vLLM's
// checksum alone had that strength only (report.VLLMOnlyNotice), as -q's
// line and the other outputs do.
func strengthNotice(s *Streams, res *verify.Result) {
	if s.Quiet {
		return // -q's line says it
	}
	if n := report.VLLMOnlyNotice(res.Diff, res.Verdict()); n != "" {
		fmt.Fprintf(s.Err, "kvaudit: note: %s\n", termtext.Line(n))
	}
}

// runnerNotice says on stderr what the cpu engine recomputed of the cuda
// runner's results (report.RunnerCheckNote), for commands whose output
// does not (checksum); nothing for the cpu engines or under -q.
func runnerNotice(s *Streams, e checksum.Engine) {
	ce, ok := e.(checksum.CheckedEngine)
	if !ok || s.Quiet {
		return
	}
	c := ce.Checked()
	fmt.Fprintf(s.Err, "kvaudit: note: %s\n", termtext.Line(report.RunnerCheckNote(&c)))
}
