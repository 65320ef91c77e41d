// Package verify decides the verdict: does the consumer hold what the
// producer sent? It opens both sides (dumps, records, or what a producer
// sent: a payload, vLLM's kv_transfer_params), checksums their dumps
// (package checksum) and merges the ranks' records into whole-model checks
// (Merge, docs/spec.md §2), turns payloads into producer checks, pairs the
// requests, applies the verdict rules and fixed reasons of docs/spec.md §9
// (Diff), has every mismatch drilled down to layers, heads and tokens
// (package drill), and runs the consumer audits (the tail audit, stored
// checksums).
//
// One call compares a producer's payload with a consumer's dumps:
//
//	res, err := verify.Compare(ctx,
//		verify.Input{Payload: kvTransferParamsJSON},
//		verify.Input{Paths: []string{"kv/consumer"}},
//		verify.CompareOptions{Requests: []string{"req-0"}})
//	...
//	fmt.Println(res.Verdict(), res.Summary()) // verified, mismatch or unverified
//
// Checksum gives one side's whole-model checks (its ranks checksummed and
// merged, every rank present unless ChecksumOptions.Partial), and Records each
// rank's partial sums for merging elsewhere:
//
//	res, err := verify.Checksum(ctx, verify.Input{Paths: []string{"kv/producer"}}, verify.ChecksumOptions{})
//	...
//	if err := res.Unchecked(); err != nil { ... } // every group skipped
//
// CheckStored checks a consumer's blocks against the stored checksums in
// its manifests, and Open is the one way from paths, an argument or
// payload bytes to an opened side. Package report renders a Result.
package verify
