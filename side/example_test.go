package side_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/wire"
)

// Checksum every rank of a TP2 producer; then one rank per host, as
// records merged on another machine; and one rank alone, which is
// refused unless partial sums are allowed.
func ExampleChecksum() {
	dir, _ := os.MkdirTemp("", "kvaudit-example-")
	defer os.RemoveAll(dir)
	paths, _ := synth.Write(dir, synth.Config{Preset: "llama", Seed: 7, TP: 2})
	ctx := context.Background()

	res, err := side.Checksum(ctx, side.Input{Paths: paths}, side.ChecksumOptions{})
	if err != nil {
		panic(err)
	}
	r := res.Checks.Requests[0]
	fmt.Printf("%s group %d from position %d: %x\n", r.ID, r.Groups[0].ID, r.Groups[0].Start, r.Groups[0].Checks[0])

	// Each host writes its rank's record; any machine merges them.
	var files []string
	for i, p := range paths {
		recs, err := side.Records(ctx, side.Input{Paths: []string{p}}, side.RecordsOptions{})
		if err != nil {
			panic(err)
		}
		b, _ := wire.MarshalRecord(recs[0])
		f := filepath.Join(dir, fmt.Sprintf("rank-%d.record.json", i))
		os.WriteFile(f, b, 0o644)
		files = append(files, f)
	}
	res, err = side.Checksum(ctx, side.Input{Paths: files}, side.ChecksumOptions{Requests: []string{"req-0"}})
	if err != nil {
		panic(err)
	}
	r = res.Checks.Requests[0]
	fmt.Printf("%s group %d from position %d: %x (records)\n", r.ID, r.Groups[0].ID, r.Groups[0].Start, r.Groups[0].Checks[0])

	_, err = side.Checksum(ctx, side.Input{Paths: paths[:1]}, side.ChecksumOptions{})
	fmt.Println(err)
	res, _ = side.Checksum(ctx, side.Input{Paths: paths[:1]}, side.ChecksumOptions{Partial: true})
	fmt.Println(res.Checks.Complete, res.Checks.Requests[0].Unverified)
	// Output:
	// req-0 group 0 from position 0: [bcc6295bacdf458f ae6063d8a014329a 5dd337444c6578f5]
	// req-0 group 0 from position 0: [bcc6295bacdf458f ae6063d8a014329a 5dd337444c6578f5] (records)
	// got 1 of 2 ranks (tp 2 x pp 1): give every rank of the side, or allow partial sums (ChecksumOptions.Partial)
	// false [not every worker reported its checksums]
}
