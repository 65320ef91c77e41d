package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/internal/synthstore"
	"github.com/kvaudit/kvaudit/scrub"
)

// storeFlagHelp is the help of synth --store.
const storeFlagHelp = "also write the side's KV as an engine's offload store under DIR/store/FORMAT: vllm-fs, lmcache-fs, lmcache-frame, mooncake-ssd or all (kvaudit scrub reads them; docs/scrub.md)"

// checkStoreFormat checks a --store value.
func checkStoreFormat(v string) error {
	if v == "all" || slices.Contains(scrub.Formats, scrub.Format(v)) {
		return nil
	}
	return usageErrorf("--store %q: want one of vllm-fs, lmcache-fs, lmcache-frame, mooncake-ssd or all", v)
}

// writeSynthStore writes the synthesized side's KV as the store (or
// stores) --store names, under Out/store/FORMAT.
func writeSynthStore(opts *SynthOptions) error {
	blocks, err := synthstore.Blocks(opts.Config)
	if err != nil {
		return err
	}
	formats := scrub.Formats
	if opts.Store != "all" {
		formats = []scrub.Format{scrub.Format(opts.Store)}
	}
	for _, f := range formats {
		dir := filepath.Join(opts.Out, "store", string(f))
		files, warnings, err := scrub.WriteStore(dir, f, blocks)
		if err != nil {
			return err
		}
		for _, w := range warnings {
			fmt.Fprintf(opts.IO.Err, "kvaudit: warning: %s\n", w)
		}
		fmt.Fprintf(opts.IO.Err, "wrote a %s store of %d blocks (%d files) under %s\n", f, len(blocks), len(files), dir)
	}
	return nil
}

// injectStoreRun writes a store fault (inject.InjectStore): its input is
// one store directory.
func injectStoreRun(ctx context.Context, opts *InjectOptions) error {
	if len(opts.Paths) != 1 {
		return usageErrorf("a store fault (%s) takes one store directory, not %d paths", opts.Kind, len(opts.Paths))
	}
	if err := checkOutsideInputs(opts.Out, opts.Paths, opts.Force); err != nil {
		return err
	}
	f, err := inject.InjectStore(ctx, opts.Paths[0], opts.Out, opts.Options)
	var na *inject.NotApplicableError
	if errors.As(err, &na) {
		return fmt.Errorf("%w (kvaudit inject --help lists what each kind needs)", err)
	}
	if err != nil {
		return err
	}
	if opts.Output == "json" {
		return report.WriteJSON(opts.IO.Out, f)
	}
	return opts.IO.renderTables(opts.Output, faultTable(f, opts.Out))
}
