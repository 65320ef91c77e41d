package memlimit

import "golang.org/x/sys/unix"

// physical returns the machine's memory (sysctl hw.memsize).
func physical() int64 {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil || n > 1<<62 {
		return 0
	}
	return int64(n)
}
