package inject_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/internal/synthstore"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/scrub"
)

var storeKinds = []inject.Kind{inject.StoreByteFlip, inject.StoreCRC, inject.StoreTruncate, inject.StoreMissingChecksum}

// TestStoreFaults: each store kind on a store of each format writes a
// copy in which kvaudit scrub finds exactly the entry fault.json names,
// with the status and problem it says, every other entry verified; the
// store itself is unchanged; an lmcache-frame store takes no
// store-missing-checksum.
func TestStoreFaults(t *testing.T) {
	blocks, err := synthstore.Blocks(synth.Config{Preset: "tiny", Requests: 2, Tokens: 5, BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range scrub.Formats {
		store := filepath.Join(t.TempDir(), string(format))
		if _, warnings, err := scrub.WriteStore(store, format, blocks); err != nil || len(warnings) > 0 {
			t.Skip(err, warnings)
		}
		before := testfiles.HashTree(t, store)
		for _, k := range storeKinds {
			for seed := range uint64(3) {
				out := filepath.Join(t.TempDir(), "bad")
				f, err := inject.InjectStore(context.Background(), store, out, inject.Options{Kind: k, Seed: seed})
				if format == scrub.LMCacheFrame && k == inject.StoreMissingChecksum {
					if !errors.As(err, new(*inject.NotApplicableError)) {
						t.Errorf("%s on %s: %v", k, format, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s on %s: %v", k, format, err)
				}
				onDisk, err := inject.ReadFault(filepath.Join(out, inject.FaultFile))
				if err != nil || onDisk.Store == nil || len(onDisk.Expect.Store) != 1 || onDisk.Input != inject.InputStore || onDisk.Detector != inject.DetectScrub {
					t.Fatalf("%s on %s: fault.json %+v (%v)", k, format, onDisk, err)
				}
				res, err := scrub.Scrub(context.Background(), []string{out}, scrub.Options{})
				if err != nil {
					t.Fatal(err)
				}
				want := f.Expect.Store[0]
				bad := 0
				for _, e := range res.Entries {
					rel, _ := filepath.Rel(out, e.Path)
					if rel == want.File && e.Offset == want.Offset {
						if string(e.Status) != want.Status || e.Problem != want.Problem {
							t.Errorf("%s on %s seed %d: %s is %s %s (%s), want %s %s", k, format, seed, rel, e.Status, e.Problem, e.Reason, want.Status, want.Problem)
						}
						bad++
					} else if e.Status != scrub.Verified {
						t.Errorf("%s on %s seed %d: %s at %d also %s (%s)", k, format, seed, rel, e.Offset, e.Status, e.Reason)
					}
				}
				if bad != 1 || string(res.Verdict()) != f.Expect.Verdict {
					t.Errorf("%s on %s seed %d: verdict %s, want %s (%d entries named)", k, format, seed, res.Verdict(), f.Expect.Verdict, bad)
				}
			}
		}
		testfiles.AssertUnchanged(t, store, before)
	}
}

// TestStoreCampaign: a campaign of the store kinds catches and names each
// in every trial.
func TestStoreCampaign(t *testing.T) {
	res, err := inject.Campaign(context.Background(), inject.CampaignOptions{Trials: 4, Seed: 9, Kinds: storeKinds, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Kinds) != len(storeKinds) {
		t.Fatalf("%d kinds", len(res.Kinds))
	}
	for _, k := range res.Kinds {
		if k.Trials != 4 || k.NotApplicable != 0 || k.Detected != 4 || k.Localised != 4 || k.Failed() {
			t.Errorf("%s: %+v", k.Kind, k)
		}
	}
	if !res.Pass {
		t.Error("the campaign did not pass")
	}
}
