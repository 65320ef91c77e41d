package sglangsum

// Internals the external tests reach.
var (
	Pages      = sglangPages
	Adler32Sum = adler32Sum
)
