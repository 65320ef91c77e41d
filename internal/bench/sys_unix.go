//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package bench

import (
	"runtime"
	"syscall"
)

func cpuModel() string { return "" }

func loadAverage() float64 { return -1 }

func resetPeakRSS() string { return "getrusage maxrss since the process started" }

// peakRSS returns getrusage's ru_maxrss in bytes (bytes on darwin,
// kilobytes elsewhere).
func peakRSS() uint64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return uint64(ru.Maxrss)
	}
	return uint64(ru.Maxrss) << 10
}
