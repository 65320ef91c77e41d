package inject_test

import (
	"context"
	"testing"

	"github.com/kvaudit/kvaudit/internal/inject"
)

// TestSGLangCampaign runs a short SGLang campaign and checks what each
// check must catch: kvaudit every fault that changes KV and none that
// does not; SGLang's Adler-32 every single-byte change and tail write and
// the wrong sent value, none of the +d/-2d/+d or 65521-apart patterns (its
// two sums do not move), with every single-byte fault pinned at its byte.
func TestSGLangCampaign(t *testing.T) {
	res, err := inject.SGLangCampaign(context.Background(), inject.SGLangCampaignOptions{Trials: 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pass || len(res.Pairs) != 5 {
		t.Fatalf("pass %v, pairs %v", res.Pass, res.Pairs)
	}
	for _, k := range res.Kinds {
		if k.NotApplicable > 0 || k.Trials != 4 {
			t.Errorf("%s: %d trials, %d not applicable", k.Kind.Name, k.Trials, k.NotApplicable)
		}
		wantKV := 0
		if k.Kind.KVAuditDetects {
			wantKV = k.Trials
		}
		if k.KVAudit != wantKV || k.Wrong != 0 {
			t.Errorf("%s: kvaudit caught %d of %d (want %d): %v", k.Kind.Name, k.KVAudit, k.Trials, wantKV, k.Failures)
		}
		want := map[string]int{"bit-flip": k.Trials, "tail-write": k.Trials, "sent-off-by-one": k.Trials, "adler-null": 0, "adler-65521": 0}
		if w, ok := want[k.Kind.Name]; ok && k.SGLang != w {
			t.Errorf("%s: SGLang caught %d of %d, want %d", k.Kind.Name, k.SGLang, k.Trials, w)
		}
		if (k.Kind.Name == "bit-flip" || k.Kind.Name == "tail-write") && k.Pinned != k.Trials {
			t.Errorf("%s: %d of %d pinned at the changed byte", k.Kind.Name, k.Pinned, k.Trials)
		}
	}
}
