package layout

// Internals the external tests reach.

const (
	ReasonCompressed        = reasonCompressed
	ReasonHeadSlots         = reasonHeadSlots
	ReasonHostResident      = reasonHostResident
	ReasonKernelBlocks      = reasonKernelBlocks
	ReasonNoLayerNumber     = reasonNoLayerNumber
	ReasonNumBlocks         = reasonNumBlocks
	ReasonPieces            = reasonPieces
	ReasonReplication       = reasonReplication
	ReasonSharedLayerNumber = reasonSharedLayerNumber
	ReasonStateWidth        = reasonStateWidth
	ReasonTooManyHeads      = reasonTooManyHeads
)
