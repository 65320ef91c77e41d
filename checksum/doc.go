// Package checksum computes kvaudit's KV cache checksums: the definition of
// SPEC sections 1 to 7 (per (group, block position) values that do not
// depend on TP, PP, memory layout or block size), the engines that evaluate
// it (Reference, literal; Fast, parallel and allocation-free), per-rank
// records and their merge into whole-model checks, fingerprints, and the
// producer payload.
//
// Ten lines get a side's checks:
//
//	dumps, err := layout.OpenSide(paths)
//	...
//	side, err := checksum.Compute(ctx, dumps, checksum.Options{})
//	...
//	for _, r := range side.Requests { fmt.Println(r.ID, r.Groups[0].Checks[0]) }
package checksum
