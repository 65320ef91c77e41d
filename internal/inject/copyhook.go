//go:build !kvaudit_testhooks

package inject

import "context"

// chunkCopied runs after each chunk copyFile writes; an error stops the
// copy. It does nothing: a kvaudit built with -tags kvaudit_testhooks
// stalls there when KVAUDIT_TEST_HOLD_COPY is set (copyhook_testhooks.go).
func chunkCopied(context.Context) error { return nil }
