//go:build unix

package mapped

import "syscall"

// oNonblock opens a FIFO for reading without waiting for a writer, so that
// it can be refused instead of blocking.
const oNonblock = syscall.O_NONBLOCK
