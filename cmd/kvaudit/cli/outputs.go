package cli

import (
	"errors"
	"fmt"

	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/kvaudit/kvaudit/verify"
)

// checkOutsideInputs refuses an output directory that is one of the input
// paths, lies inside an input directory, or is the directory holding an
// input (a file, or a directory: --out s for the side s/producer, where
// the outputs would read as part of a side): kvaudit never writes among
// the files it reads. With replacing (an output directory replaced whole,
// inject --force) an input anywhere inside out is refused too. Globs among
// the inputs are expanded first, links resolved (safeio.CheckOutputDir,
// the output rule of every command).
func checkOutsideInputs(out string, inputs []string, replacing bool) error {
	return outputRefused("--out", safeio.CheckOutputDir(out, inputs, replacing))
}

// outputRefused words a refusal of the output rule (a *safeio.OutputError)
// for the flag that named the output, as a usage error (exit 3); other
// errors are returned as they are.
func outputRefused(flag string, err error) error {
	var oe *safeio.OutputError
	if !errors.As(err, &oe) {
		return err
	}
	switch oe.Why {
	case "is":
		return usageErrorf("%s %q is the input %q: kvaudit never writes over an input (write outputs elsewhere)", flag, oe.Path, oe.Input)
	case "holds":
		return usageErrorf("%s %q holds the input %q: write outputs elsewhere", flag, oe.Path, oe.Input)
	case "would replace":
		return usageErrorf("the input %q is inside %s %q, which would be replaced: write outputs elsewhere", oe.Input, flag, oe.Path)
	}
	return usageErrorf("%s %q is inside the input %q: write outputs elsewhere", flag, oe.Path, oe.Input)
}

// allowedNotice says on stderr when the configuration file, not a flag,
// turns an unverified load into exit 0 (allowedNote).
func allowedNotice(opts *DiffOptions, res *verify.Result) {
	if n := allowedNote(opts, res); n != "" {
		fmt.Fprintf(opts.IO.Err, "kvaudit: note: %s\n", termtext.Line(n))
	}
}

// allowedNote says that the configuration file, not a flag, turns an
// unverified load into exit 0; "" when it does not.
func allowedNote(opts *DiffOptions, res *verify.Result) string {
	if opts.AllowUnverified && opts.AllowedBy != "" && res.Verdict() == verify.Unverified {
		return "an unverified load exits 0 because " + opts.AllowedBy + " sets allow-unverified"
	}
	return ""
}
