package side

// The load-level reasons a side's request is unverified (docs/spec.md §9),
// reported verbatim; package verify holds the others.
const (
	ReasonNoChecksums      = "the producer sent no checksums"
	ReasonInvalidChecksums = "the producer's checksums are invalid"
	ReasonNotEveryWorker   = "not every worker reported its checksums"
)
