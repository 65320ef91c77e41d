package verify

// Internals the external tests reach.
type DiffOptions = diffOptions

var DiffWith = diffWith

const (
	LeftOutProducerOnly = leftOutProducerOnly
	LeftOutSkipped      = leftOutSkipped
	LeftOutSplitLess    = leftOutSplitLess
	SGLangFromFlag      = sglangFromFlag
	SGLangFromMetadata  = sglangFromMetadata
)
