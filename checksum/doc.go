// Package checksum computes kvaudit's KV cache checksums: the definition of
// docs/spec.md §1 to §7 (per (group, block position) values that do not
// depend on TP, PP, memory layout or block size), the engines that evaluate
// it (Reference, literal; Fast, parallel and allocation-free), per-rank
// records and their merge into whole-model checks, fingerprints, and the
// producer payload.
//
// A few lines compare a producer with a consumer:
//
//	prod, err := checksum.ComputePaths(ctx, []string{"kv/producer"}, checksum.Options{})
//	...
//	cons, err := checksum.ComputePaths(ctx, []string{"kv/consumer"}, checksum.Options{})
//	...
//	res := checksum.Diff(prod, cons)
//	fmt.Println(res.Verdict) // verified, mismatch or unverified
//
// Compute takes dumps already opened with layout.OpenSide, and package
// drill explains a mismatch from both sides' dumps. Package verify does all
// of it in one call, from dumps, records or a producer's payload.
package checksum
