package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/kvaudit/kvaudit/verify"
)

// checkOutsideInputs refuses an output directory that is one of the input
// paths, lies inside an input directory, or is the directory holding an
// input (a file, or a directory: --out s for the side s/producer, where
// the outputs would read as part of a side): kvaudit never writes among
// the files it reads. With replacing (an output directory replaced whole,
// inject --force) an input anywhere inside out is refused too.
func checkOutsideInputs(out string, inputs []string, replacing bool) error {
	o, err := realPath(out)
	if err != nil {
		return err
	}
	for _, in := range inputs {
		p, err := realPath(in)
		if err != nil {
			return err
		}
		dir := p
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			dir = filepath.Dir(p)
		}
		if o == dir || strings.HasPrefix(o+string(filepath.Separator), dir+string(filepath.Separator)) {
			return usageErrorf("--out %q is inside the input %q: write outputs elsewhere", out, in)
		}
		if replacing && strings.HasPrefix(p, o+string(filepath.Separator)) {
			return usageErrorf("the input %q is inside --out %q, which would be replaced: write outputs elsewhere", in, out)
		}
		if o == filepath.Dir(p) {
			return usageErrorf("--out %q holds the input %q: write outputs elsewhere", out, in)
		}
	}
	return nil
}

// realPath is path made absolute with its symlinks resolved, as far as it
// exists (an output directory may not exist yet).
func realPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest), nil
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// allowedNotice says on stderr when the configuration file, not a flag,
// turns an unverified load into exit 0.
func allowedNotice(opts *DiffOptions, res *verify.Result) {
	if opts.AllowUnverified && opts.AllowedBy != "" && res.Verdict() == verify.Unverified {
		fmt.Fprintf(opts.IO.Err, "kvaudit: note: an unverified load exits 0 because %s sets allow-unverified\n", termtext.Line(opts.AllowedBy))
	}
}
