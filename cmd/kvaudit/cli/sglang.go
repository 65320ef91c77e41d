package cli

import (
	"context"
	"fmt"
	"slices"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// sglangChecksumRun is `kvaudit checksum --scheme sglang-adler32`: SGLang's
// value of each request on each rank of the given SGLang dumps, beside the
// value the dump says was sent. A value that differs from a sent one
// exits 1, as SGLang's decode would abort the request.
func sglangChecksumRun(opts *ChecksumOptions) error {
	dumps, err := layout.OpenPaths(opts.Paths)
	if err != nil {
		return err
	}
	defer layout.CloseAll(dumps)
	var vals []checksum.SGLangValue
	used := map[string]bool{}
	for _, d := range dumps {
		if d.Manifest.SGLang == nil {
			return usageErrorf("--scheme %s: %q is not an SGLang dump (its manifest has no \"engine\": \"sglang\")", checksum.SchemeSGLangAdler32, d.Path)
		}
		v, err := checksum.SGLangValues(d, opts.Threads)
		if err != nil {
			return err
		}
		for _, x := range v {
			key := fmt.Sprintf("%s@%d", x.Request, x.TP)
			if s, ok := opts.SGLangSent[key]; ok {
				x.Sent = &s
				used[key] = true
			}
			if len(opts.Requests) == 0 || slices.Contains(opts.Requests, x.Request) {
				vals = append(vals, x)
			}
		}
	}
	for k := range opts.SGLangSent {
		if !used[k] {
			return usageErrorf("--sglang-checksum %s: no such request and rank in %v", k, opts.Paths)
		}
	}
	slices.SortStableFunc(vals, func(a, b checksum.SGLangValue) int {
		if a.Request != b.Request {
			if a.Request < b.Request {
				return -1
			}
			return 1
		}
		return (a.PP*65536 + a.TP) - (b.PP*65536 + b.TP)
	})
	if opts.Output == "json" {
		err = report.WriteJSON(opts.IO.Out, report.NewSGLangChecksumJSON(vals))
	} else {
		err = opts.IO.renderTables(opts.Output, report.SGLangChecksumTable(vals))
	}
	if err != nil {
		return err
	}
	bad := 0
	for _, v := range vals {
		if a := report.SGLangAgrees(v); a != nil && !*a {
			bad++
		}
	}
	if bad > 0 {
		return &ResultError{Code: ExitMismatch, Msg: fmt.Sprintf("mismatch: %d request value(s) differ from the kv_checksum sent (SGLang's decode would abort them)", bad)}
	}
	return nil
}

// sglangAudit adds SGLang's own check to a diff whose consumer is SGLang
// dumps (verify.CompareSGLang): against the values --sglang-checksum gives
// or the dumps' kv_checksum rows, and byte by byte against the producer
// when it is SGLang dumps too. A consumer of other dumps is left alone,
// unless --sglang-checksum asks for the check.
func sglangAudit(opts *DiffOptions, res *verify.Result) error {
	cons, err := layout.OpenPaths(opts.Consumer)
	if err != nil || len(cons) == 0 || cons[0].Manifest.SGLang == nil {
		if err == nil {
			layout.CloseAll(cons)
		}
		if len(opts.SGLangSent) > 0 {
			return usageErrorf("--sglang-checksum: the consumer %v is not SGLang dumps (\"engine\": \"sglang\")", opts.Consumer)
		}
		return nil
	}
	defer layout.CloseAll(cons)
	prod, err := layout.OpenPaths(opts.Producer)
	if err != nil {
		prod = nil // a payload or records: the values sent are all there is
	} else {
		defer layout.CloseAll(prod)
	}
	a, err := verify.CompareSGLang(prod, cons, verify.SGLangOptions{Sent: opts.SGLangSent, Diff: res.Diff, Threads: opts.Threads})
	if err != nil {
		if len(opts.SGLangSent) > 0 {
			return usageErrorf("%v", err)
		}
		return err
	}
	if res.Audits == nil {
		res.Audits = &verify.Audits{}
	}
	res.Audits.SGLang = a
	return nil
}

// sglangCampaignRun is `kvaudit campaign --engine sglang`: exit 1 when
// kvaudit misjudged a trial.
func sglangCampaignRun(ctx context.Context, opts *CampaignOptions) error {
	progress, finish := trialsProgress(opts.IO)
	res, err := inject.SGLangCampaign(ctx, inject.SGLangCampaignOptions{Trials: opts.Trials, Seed: opts.Seed, Dir: opts.Dir, Progress: progress})
	finish()
	if err != nil {
		return err
	}
	if opts.Output == "json" {
		err = report.WriteJSON(opts.IO.Out, report.NewSGLangCampaignJSON(res))
	} else {
		err = opts.IO.renderTables(opts.Output, report.SGLangCampaignTable(res))
	}
	if err != nil {
		return err
	}
	if !res.Pass {
		return &ResultError{Code: ExitMismatch, Msg: "sglang campaign: kvaudit misjudged some trials"}
	}
	opts.IO.verdict = "sglang campaign: pass"
	return nil
}
