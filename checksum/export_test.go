package checksum

// Internals the external tests reach.
var BlockNumbered = blockNumbered

type ReadCapError = readCapError

var RequestNumbered = requestNumbered
