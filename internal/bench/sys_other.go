//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package bench

func cpuModel() string { return "" }

func loadAverage() float64 { return -1 }

func resetPeakRSS() string { return "unknown on this system" }

func peakRSS() uint64 { return 0 }
