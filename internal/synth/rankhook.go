//go:build !kvaudit_testhooks

package synth

import "context"

// rankWritten runs after WriteContext writes each rank; an error stops
// it. It does nothing: a kvaudit built with -tags kvaudit_testhooks
// stalls there when KVAUDIT_TEST_HOLD_SYNTH is set (rankhook_testhooks.go).
func rankWritten(context.Context) error { return nil }
