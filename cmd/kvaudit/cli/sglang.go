package cli

import (
	"fmt"
	"slices"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/report"
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
	for _, d := range dumps {
		if d.Manifest.SGLang == nil {
			return usageErrorf("--scheme %s: %q is not an SGLang dump (its manifest has no \"engine\": \"sglang\")", checksum.SchemeSGLangAdler32, d.Path)
		}
		v, err := checksum.SGLangValues(d, opts.Threads)
		if err != nil {
			return err
		}
		for _, x := range v {
			if len(opts.Requests) == 0 || slices.Contains(opts.Requests, x.Request) {
				vals = append(vals, x)
			}
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
