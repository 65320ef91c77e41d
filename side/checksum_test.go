package side

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/wire"
)

// TestChecksum: a whole side's checks equal those computed from the
// logical KV (synth.Expected); a subset of ranks is refused unless
// partial sums are allowed; requests are kept in the order asked; each
// rank's records, given back as record files, merge to the same checks.
func TestChecksum(t *testing.T) {
	dir := t.TempDir()
	cfg := synth.Config{Preset: "llama", TP: 2, PP: 2, Requests: 3, Seed: 5}
	paths, err := synth.Write(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := synth.Expected(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	side := Input{Paths: paths}
	res, err := Checksum(ctx, side, ChecksumOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkAgainst := func(what string, c *Checks, ids []string) {
		t.Helper()
		if !c.Complete || len(c.Requests) != len(ids) {
			t.Fatalf("%s: complete %v, %d requests, want %d", what, c.Complete, len(c.Requests), len(ids))
		}
		for i, r := range c.Requests {
			if r.ID != ids[i] {
				t.Errorf("%s: request %d is %s, want %s", what, i, r.ID, ids[i])
			}
			if len(r.Groups) != len(want[r.ID]) {
				t.Fatalf("%s: request %s: %d groups, want %d", what, r.ID, len(r.Groups), len(want[r.ID]))
			}
			for _, g := range r.Groups {
				for k, check := range g.Checks {
					if fmt.Sprint(check) != fmt.Sprint(want[r.ID][g.ID].Values) {
						t.Errorf("%s: request %s group %d check %d: %x, want %x", what, r.ID, g.ID, k, check, want[r.ID][g.ID].Values)
					}
				}
			}
		}
	}
	checkAgainst("whole side", res.Checks, []string{"req-0", "req-1", "req-2"})
	if len(res.Records) != 4 {
		t.Errorf("%d records, want one per rank (4)", len(res.Records))
	}
	if err := res.Unchecked(); err != nil {
		t.Errorf("Unchecked: %v", err)
	}

	// Requests, in the order asked; an unknown one is an error.
	res, err = Checksum(ctx, side, ChecksumOptions{Requests: []string{"req-2", "req-0"}, BlockValues: true})
	if err != nil {
		t.Fatal(err)
	}
	checkAgainst("two requests", res.Checks, []string{"req-2", "req-0"})
	if res.Checks.Requests[0].Groups[0].ChecksBlock == nil {
		t.Error("BlockValues: no block-numbered values")
	}
	if _, err := Checksum(ctx, side, ChecksumOptions{Requests: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown request: %v", err)
	}

	// One rank of four.
	one := Input{Paths: paths[:1]}
	var inc *IncompleteError
	if _, err := Checksum(ctx, one, ChecksumOptions{}); !errors.As(err, &inc) || inc.Got != 1 || inc.TPSize != 2 || inc.PPSize != 2 || len(inc.Missing) != 3 {
		t.Errorf("one rank of four: %v (%+v)", err, inc)
	} else if inc.Ranks() != "1 of 4 ranks (tp 2 x pp 2)" {
		t.Errorf("Ranks() = %q", inc.Ranks())
	}
	res, err = Checksum(ctx, one, ChecksumOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Checks.Complete || len(res.Checks.Requests) != 3 || len(res.Checks.Requests[0].Unverified) == 0 {
		t.Errorf("partial sums: complete %v, requests %d, unverified %v", res.Checks.Complete, len(res.Checks.Requests), res.Checks.Requests[0].Unverified)
	}

	// Records: one per rank, block-numbered values included, not merged
	// (one rank will do); written out and given back, they merge to the
	// side's checks.
	var files []string
	for i, p := range paths {
		recs, err := Records(ctx, Input{Paths: []string{p}}, RecordsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 {
			t.Fatalf("%s: %d records", p, len(recs))
		}
		b, err := wire.MarshalRecord(recs[0])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"values_block"`) {
			t.Errorf("%s: the record lacks values_block", p)
		}
		f := filepath.Join(dir, fmt.Sprintf("rank%d.record.json", i))
		writeFile(t, f, b)
		files = append(files, f)
	}
	res, err = Checksum(ctx, Input{Paths: files}, ChecksumOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkAgainst("records", res.Checks, []string{"req-0", "req-1", "req-2"})
	// Dumps and records of different ranks merge too.
	res, err = Checksum(ctx, Input{Paths: append([]string{paths[0]}, files[1:]...)}, ChecksumOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkAgainst("dump and records", res.Checks, []string{"req-0", "req-1", "req-2"})
}

// TestUnchecked: the reasons nothing could be checksummed, in group order.
func TestUnchecked(t *testing.T) {
	for _, c := range []struct {
		name   string
		checks Checks
		want   string
	}{
		{"a group checksummed", Checks{Skipped: map[int]string{1: "x"}, Requests: []*RequestChecks{{ID: "a"}, {ID: "b", Groups: []*GroupChecks{{ID: 0}}}}}, ""},
		{"no request", Checks{Skipped: map[int]string{}}, "nothing checksummed: the side holds no request"},
		{"every group skipped", Checks{Skipped: map[int]string{2: "state of unknown shape", 0: "no layer"}, Requests: []*RequestChecks{{ID: "a"}}},
			"nothing checksummed: group 0 skipped: no layer; group 2 skipped: state of unknown shape"},
		{"no block", Checks{Requests: []*RequestChecks{{ID: "a"}}}, "nothing checksummed: no request has a block in a checksummed group"},
	} {
		err := (&Checksums{Checks: &c.checks}).Unchecked()
		var nc *nothingChecksummedError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (!errors.As(err, &nc) || err.Error() != c.want):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
