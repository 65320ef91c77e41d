package verify_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// TestSpecDocReasons: every fixed reason the code reports appears in
// docs/spec.md exactly as the code writes it (§4 and §9).
func TestSpecDocReasons(t *testing.T) {
	specDoc := filepath.Join("..", "docs", "spec.md")
	b, err := os.ReadFile(specDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	reasons := append(slices.Clone(layout.Reasons),
		verify.ReasonNoChecksums, verify.ReasonInvalidChecksums, verify.ReasonNotEveryWorker,
		verify.ReasonOneSide, verify.ReasonFingerprint, verify.ReasonMissingReplica,
		verify.ReasonNoBlockInCommon, verify.ReasonBlockSizes, verify.ReasonInsideProducerBlock,
		verify.ReasonNoLoadedGroup, verify.ReasonNotCovered, verify.LeftOutSkipped)
	for _, r := range reasons {
		if !strings.Contains(doc, "`"+r+"`") {
			t.Errorf("%s does not give the reason %q verbatim", specDoc, r)
		}
	}
	// Line breaks inside a reason are allowed in prose, as markdown joins
	// them.
	joined := strings.Join(strings.Fields(doc), " ")
	for _, r := range []string{verify.LeftOutSplitLess, verify.LeftOutProducerOnly} {
		if !strings.Contains(joined, "`"+r+"`") {
			t.Errorf("%s does not give the reason %q verbatim", specDoc, r)
		}
	}
}
