// Package checksum is kvaudit's KV cache checksum: the definition of
// docs/spec.md §1 to §7 (per (group, block position) values that do not
// depend on TP, PP, memory layout or block size) and the engines that
// evaluate it (Reference, literal; Fast, parallel and allocation-free, with
// generic and AVX2 sum kernels), the two piece numberings, fingerprints,
// and the tag of a stored checksum (§10).
//
// Its unit of work is one rank: NewPlan lays out what a rank's dump
// contributes to each block checksum, an Engine runs the plan, and
// RankRecord and Records return each rank's partial sums as records
// (wire.Record):
//
//	dumps, err := layout.OpenSide([]string{"kv/producer/rank-0-0.safetensors"})
//	...
//	recs, err := checksum.Records(ctx, dumps, checksum.Options{})
//	...
//	fmt.Println(recs[0].Requests[0].Groups[0].Values) // one value per position and replica key
//
// Package verify merges the ranks' records into whole-model checks and
// judges a consumer against its producer; package wire writes and reads
// records and payloads.
package checksum
