// Package verify decides the verdict: does the consumer hold what the
// producer sent? It opens both sides through package side (dumps,
// records, or what a producer sent: a payload, vLLM's kv_transfer_params),
// which checksums and merges them into whole-model checks; verify pairs
// the requests, applies the verdict rules and fixed reasons of
// docs/spec.md §9 (Diff), has every mismatch drilled down to layers, heads
// and tokens (package drill), gives hints on pairings that look like
// mistakes, and runs the consumer audits (the tail audit, stored
// checksums, the transfer audit).
//
// One call compares a producer's payload with a consumer's dumps:
//
//	res, err := verify.Compare(ctx,
//		side.Input{Payload: kvTransferParamsJSON},
//		side.Input{Paths: []string{"kv/consumer"}},
//		verify.CompareOptions{Requests: []string{"req-0"}})
//	...
//	fmt.Println(res.Verdict(), res.Summary()) // verified, mismatch or unverified
//
// CheckStored checks a consumer's blocks against the stored checksums in
// its manifests. Package report renders a Result.
package verify
