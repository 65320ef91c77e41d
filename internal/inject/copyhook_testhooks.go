//go:build kvaudit_testhooks

package inject

import (
	"context"
	"os"
)

// chunkCopied, when KVAUDIT_TEST_HOLD_COPY is set, holds every copy after
// its first chunk until ctx is cancelled, then stops it: a kvaudit built
// with -tags kvaudit_testhooks is interrupted mid-copy whenever a test
// signals it (TestInterrupt in cmd/kvaudit). Only tests build with the
// tag.
func chunkCopied(ctx context.Context) error {
	if os.Getenv("KVAUDIT_TEST_HOLD_COPY") == "" {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}
