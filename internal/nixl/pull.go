package nixl

import (
	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/layout"
)

// PullTokens is the number of prompt tokens a consumer pulls of a request
// of numTokens tokens, as vLLM's NIXL connector counts them
// (_get_remote_prefill_token_count, docs/spec.md §13): all but the last
// max(1 on a hybrid model with state groups, lookahead-1) tokens, which
// the consumer recomputes; all of a request that short.
func PullTokens(numTokens int, hybrid bool, lookahead int) int {
	back := max(0, lookahead-1)
	if hybrid {
		back = max(back, 1)
	}
	if back > 0 && numTokens > back {
		return numTokens - back
	}
	return numTokens
}

// Hybrid says whether a dump's model has a state (Mamba) group: vLLM's
// connector then pulls one token less (PullTokens).
func Hybrid(d *layout.Dump) bool {
	for _, g := range d.Manifest.Groups {
		if g.Kind == layout.KindMamba {
			return true
		}
	}
	return false
}

// Converted says whether the destination converts what it receives (a
// kernel block of other tokens, or pages of another order: vLLM permutes
// them on receive), so that a pair is compared per chunk of tokens.
func Converted(d, s *addrmap.Region) bool {
	return d.KernelTokens != s.KernelTokens || d.PageOrder() != s.PageOrder()
}

// LogExt is the extension of a log file in a directory of logs.
const LogExt = ".jsonl"
