// Package memlimit says how much memory this process may use, so that a
// command can refuse work that would not fit before allocating it (a Go
// runtime out-of-memory crash cannot be caught, and exits 2, kvaudit's
// "unverified").
package memlimit

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Bytes returns the memory this process may use: the least of the
// machine's physical memory, the memory limit of its cgroup (v2
// memory.max, v1 memory.limit_in_bytes) and Go's soft memory limit
// (GOMEMLIMIT, debug.SetMemoryLimit), or 0 when none of them is known.
func Bytes() int64 {
	limit := int64(math.MaxInt64)
	if n := physical(); n > 0 {
		limit = n
	}
	if n := cgroupLimit(); n > 0 {
		limit = min(limit, n)
	}
	if n := debug.SetMemoryLimit(-1); n > 0 {
		limit = min(limit, n)
	}
	if limit == math.MaxInt64 {
		return 0
	}
	return limit
}

// cgroupLimit returns the memory limit of the process's cgroup, 0 when
// there is none or it cannot be read.
func cgroupLimit() int64 {
	var files []string
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if p, ok := strings.CutPrefix(line, "0::"); ok {
				files = append(files, "/sys/fs/cgroup"+strings.TrimSuffix(p, "/")+"/memory.max")
			}
		}
	}
	files = append(files, "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil && n > 0 && n < 1<<62 {
			return n
		}
		return 0 // "max", or v1's "no limit"
	}
	return 0
}

// Format writes a byte count for people: "23.4 GiB", "512 B".
func Format(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(n, 'f', 0, 64) + " B"
	}
	return strconv.FormatFloat(n, 'f', 1, 64) + " " + units[i]
}
