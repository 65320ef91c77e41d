//go:build unix

package layout

import "syscall"

// oNonblock opens a FIFO for reading without waiting for a writer, so that
// it can be refused instead of blocking.
const oNonblock = syscall.O_NONBLOCK
