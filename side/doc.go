// Package side opens and checks one side of a transfer, with no verdict:
// Open is the one way from paths, a command-line argument or payload bytes
// to an opened side (dumps, records, or what a producer sent: a payload,
// vLLM's kv_transfer_params); Merge sums the ranks' records into
// whole-model checks (docs/spec.md §2); Checksum and Records checksum a
// side's dumps; PayloadRequest and NewPayload turn payloads into producer
// checks and back; RepeatedBlocks audits a side's block tables; Info says
// what a side was. Package verify compares two sides.
//
// Checksum gives one side's whole-model checks (its ranks checksummed and
// merged, every rank present unless ChecksumOptions.Partial), and Records
// each rank's partial sums for merging elsewhere:
//
//	res, err := side.Checksum(ctx, side.Input{Paths: []string{"kv/producer"}}, side.ChecksumOptions{})
//	...
//	if err := res.Unchecked(); err != nil { ... } // every group skipped
package side
