package cli

import (
	"fmt"
	"path/filepath"
	"slices"

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
	blocks, err := scrub.SynthBlocks(opts.Config)
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
