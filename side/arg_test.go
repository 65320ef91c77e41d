package side

import (
	"testing"

	"github.com/kvaudit/kvaudit/wire"
)

// TestPayloadText: real payloads (either form), their JSON and a
// truncated payload are payload text; mistyped paths and words are not.
func TestPayloadText(t *testing.T) {
	var yes []string
	for _, form := range []wire.PayloadForm{wire.FormNested, wire.FormFlat} {
		s := encodedPayload(t, form)
		yes = append(yes, s, s[:len(s)-5], " "+s+"\n")
	}
	yes = append(yes, `{"kv_checksums": null}`)
	for _, s := range yes {
		if !payloadText(s) {
			t.Errorf("%q: not taken as payload text", s)
		}
	}
	for _, s := range []string{"producerdumps", "consumer", "out/consumer", "kv", "", "prodcuer/rank-0-0.safetensors", "kvdump-extra", "kOVidmVyaWZpZWQ="} {
		if payloadText(s) {
			t.Errorf("%q: taken as payload text", s)
		}
	}
}
