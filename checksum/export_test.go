package checksum

// Internals the external tests reach.
var SGLangPages = sglangPages
var BlockNumbered = blockNumbered

type ReadCapError = readCapError

var Adler32 = adler32Sum
var RequestNumbered = requestNumbered
