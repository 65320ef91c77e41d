package inject

import "fmt"

// Controls: changes nothing may report.

// Control kinds. None is no kind of fault: it is not in Kinds, and
// injecting it writes a clean copy.
const (
	PastNumTokens Kind = "past-num-tokens"
	None          Kind = "none"
)

var pastNumTokens = kindDef{
	kind:     PastNumTokens,
	models:   "decode or draft writes past num_tokens (must not be reported)",
	detector: DetectNone,
	control:  true,
	plan:     dumpPlan((*planner).pastNumTokens),
}

var none = kindDef{
	kind:     None,
	models:   "nothing: a clean copy",
	detector: DetectNone,
	control:  true,
	plan: dumpPlan(func(p *planner) error {
		p.f.Description = "no change: a clean copy of the side"
		p.f.Expect.Details, p.f.Expect.Tail, p.f.Expect.Stored = []DetailExpect{}, []AuditPlace{}, []AuditPlace{}
		return nil
	}),
}

// pastNumTokens writes a decode's next tokens' KV past num_tokens on one
// rank, from the first free slot on: the checksum excludes it, and the
// tail audit, a load-time check, is not judged.
func (p *planner) pastNumTokens() error {
	w, err := p.writePastTokens(true)
	if err != nil {
		return err
	}
	rg := w.rg
	p.f.Description = fmt.Sprintf("wrote KV of tokens %d..%d (past num_tokens) into block id %d (position %d) of request %q group %d in %d cache(s) on rank %s; the checksum excludes them (the tail audit, a load-time check, would report them)",
		rg.pos*rg.g.BlockSize+rg.lo, rg.pos*rg.g.BlockSize+rg.hi-1, w.block, rg.pos, rg.id, rg.g.ID, len(w.cs), p.ranks.rankOf(w.di))
	return nil
}
