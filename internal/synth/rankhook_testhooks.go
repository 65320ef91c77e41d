//go:build kvaudit_testhooks

package synth

import (
	"context"
	"os"
)

// rankWritten, when KVAUDIT_TEST_HOLD_SYNTH is set, holds synth after its
// first rank until ctx is cancelled, then stops it: a kvaudit built with
// -tags kvaudit_testhooks is interrupted mid-synth whenever a test
// signals it (TestInterrupt in cmd/kvaudit). Only tests build with the
// tag.
func rankWritten(ctx context.Context) error {
	if os.Getenv("KVAUDIT_TEST_HOLD_SYNTH") == "" {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}
