//go:build !kvaudit_testhooks

package inject

import "context"

// chunkCopied runs after each chunk copyFile writes; an error stops the
// copy. It does nothing: a kvaudit built with -tags kvaudit_testhooks
// stalls there instead (copyhook_testhooks.go).
func chunkCopied(context.Context) error { return nil }
