//go:build kvaudit_testprogress

package cli

import "time"

// A kvaudit built with -tags kvaudit_testprogress draws its progress bars
// and status lines at once and redraws them every few milliseconds, so
// that a test on a pseudo-terminal sees bars even for small inputs
// (TestProgressTerminal in cmd/kvaudit). Only tests build with the tag.
func init() {
	progressDelay = 0
	progressTick = 2 * time.Millisecond
	progressThrottle = 0
}
