package verify

import "github.com/kvaudit/kvaudit/side"

// Fixed reasons a load or a group is unverified (docs/spec.md §9), reported
// verbatim, and the reasons a group is left out of a verdict.
const (
	ReasonNoChecksums         = side.ReasonNoChecksums
	ReasonInvalidChecksums    = side.ReasonInvalidChecksums
	ReasonNotEveryWorker      = side.ReasonNotEveryWorker
	ReasonOneSide             = "a group is checksummed by one side only"
	ReasonFingerprint         = "a group holds other layers, block size or dtype on the producer"
	ReasonMissingReplica      = "a replica was not checksummed"
	ReasonNoBlockInCommon     = "a group has no block in common"
	ReasonBlockSizes          = "block sizes are not multiples of each other"
	ReasonInsideProducerBlock = "the first loaded block starts inside a producer block"
	ReasonNoLoadedGroup       = "no loaded group can be checksummed"
	// ReasonNotCovered is --strict's: a loaded block the producer's
	// checksums do not cover, or that could not be compared.
	ReasonNotCovered = "a loaded block is not compared"
	// ReasonVLLMOnly is --require-mix's: a group compared by vLLM's
	// checksum alone, without kvaudit's mix check (docs/spec.md §14).
	ReasonVLLMOnly = "compared by vLLM's checksum only"

	leftOutSkipped      = "skipped on both sides"
	leftOutProducerOnly = "checksummed by the producer only: the consumer did not load it (ignored, as vLLM does)"
	leftOutSplitLess    = "state without a TP split is not comparable across TP sizes"
)
