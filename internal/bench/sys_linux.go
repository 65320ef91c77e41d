package bench

import (
	"os"
	"strconv"
	"strings"
)

// cpuModel returns the CPU's model name from /proc/cpuinfo.
func cpuModel() string {
	for _, line := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverage returns the 1-minute load average, -1 when unknown.
func loadAverage() float64 {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// resetPeakRSS resets the process's VmHWM (writing 5 to
// /proc/self/clear_refs) and says what peakRSS will report.
func resetPeakRSS() string {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return "VmHWM since the process started (resetting it failed)"
	}
	return "VmHWM while measuring"
}

// peakRSS returns VmHWM from /proc/self/status in bytes, 0 when unknown.
func peakRSS() uint64 {
	for _, line := range strings.Split(readFile("/proc/self/status"), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseUint(f[0], 10, 64)
				if err == nil {
					return n << 10
				}
			}
		}
	}
	return 0
}
