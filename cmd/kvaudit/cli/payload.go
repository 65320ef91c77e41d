package cli

import (
	"fmt"
	"io"

	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/wire"
)

// writePayloads prints what a producer sends for each request of side c:
// one JSON object mapping request id to the base64 payload of its check 0
// in the given form (`kvaudit checksum -o payload`, docs/spec.md §12).
// `kvaudit diff` reads the object back and pairs its entries by id. A side
// missing ranks has no payload.
func writePayloads(w io.Writer, c *side.Checks, form wire.PayloadForm) error {
	if !c.Complete {
		return usageErrorf("-o payload: a producer sends checksums only when every rank reported: give all %d ranks", c.TPSize*c.PPSize)
	}
	out := make(map[string]string, len(c.Requests))
	for _, r := range c.Requests {
		p, err := side.NewPayload(c, r, form)
		if err != nil {
			return err
		}
		text, err := wire.EncodePayloadBase64(p)
		if err != nil {
			return fmt.Errorf("request %q: %w", r.ID, err)
		}
		out[r.ID] = text
	}
	return report.WriteJSON(w, out)
}
