package transfer

import (
	"context"
	"io"

	"github.com/kvaudit/kvaudit/layout"
)

// AuditReader audits one log read from r (name names it), as Audit audits
// files: for the benchmark's generated logs.
func AuditReader(ctx context.Context, r io.Reader, name string, producer, consumer []*layout.Dump, opts Options) (*Result, error) {
	a := newAuditor(producer, consumer, opts)
	err := layout.Guard("dump data while auditing transfers", func() error {
		if err := a.readFrom(ctx, r, name); err != nil {
			return err
		}
		return a.finish(ctx)
	})
	if err != nil {
		return nil, err
	}
	return a.res, nil
}
