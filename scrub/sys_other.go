//go:build !unix

package scrub

const (
	oNonblock = 0
	oNofollow = 0
)
