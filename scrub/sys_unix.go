//go:build unix

package scrub

import "syscall"

// oNonblock opens a FIFO without waiting for a writer, so that it is
// refused instead of blocking; oNofollow refuses a symlink.
const (
	oNonblock = syscall.O_NONBLOCK
	oNofollow = syscall.O_NOFOLLOW
)
