//go:build kvaudit_testhooks

package cli

import (
	"os"
	"time"
)

// A kvaudit built with -tags kvaudit_testhooks and run with
// KVAUDIT_TEST_FAST_PROGRESS set draws its progress bars and status lines
// at once and redraws them every few milliseconds, so that a test on a
// pseudo-terminal sees bars even for small inputs (TestProgressTerminal in
// cmd/kvaudit). Only tests build with the tag.
func init() {
	if os.Getenv("KVAUDIT_TEST_FAST_PROGRESS") == "" {
		return
	}
	progressDelay = 0
	progressTick = 2 * time.Millisecond
	progressThrottle = 0
}
