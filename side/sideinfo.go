package side

import (
	"cmp"
	"fmt"
	"slices"
)

// SideInfo says what one side of a comparison was, for a report: its
// form, its ranks and the files read.
type SideInfo struct {
	// Form is "dumps", "records", "dumps and records" or "payload".
	Form string
	// TPSize and PPSize are the side's parallel sizes (0 for a payload);
	// Ranks are the ranks read, as "pp P tp T", in rank order.
	TPSize, PPSize int
	Ranks          []string
	// Files are the dumps and record files read (none for a payload).
	Files []string
	// PayloadForm is "flat" (block-numbered values, vLLM's published
	// form) or "nested" for a payload, "" otherwise.
	PayloadForm string
}

// Info describes the side.
func (s *Source) Info() SideInfo {
	if s.payload {
		form := "nested"
		if s.Flat() {
			form = "flat"
		}
		return SideInfo{Form: "payload", PayloadForm: form}
	}
	var in SideInfo
	type rank struct{ pp, tp int }
	var ranks []rank
	add := func(pp, tp, ppSize, tpSize int) {
		in.PPSize, in.TPSize = max(in.PPSize, ppSize), max(in.TPSize, tpSize)
		if r := (rank{pp, tp}); !slices.Contains(ranks, r) {
			ranks = append(ranks, r)
		}
	}
	for _, d := range s.Dumps {
		p := d.Manifest.Parallel
		add(p.PPRank, p.TPRank, p.PPSize, p.TPSize)
		in.Files = append(in.Files, d.Path)
	}
	for _, r := range s.Records {
		add(r.PPRank, r.TPRank, r.PPSize, r.TPSize)
	}
	in.Files = append(in.Files, s.recordFiles...)
	slices.SortFunc(ranks, func(a, b rank) int { return cmp.Or(cmp.Compare(a.pp, b.pp), cmp.Compare(a.tp, b.tp)) })
	for _, r := range ranks {
		in.Ranks = append(in.Ranks, fmt.Sprintf("pp %d tp %d", r.pp, r.tp))
	}
	switch {
	case len(s.Dumps) > 0 && len(s.Records) > 0:
		in.Form = "dumps and records"
	case len(s.Records) > 0:
		in.Form = "records"
	default:
		in.Form = "dumps"
	}
	return in
}
