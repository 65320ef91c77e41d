package sglangsum

import (
	"fmt"

	"github.com/kvaudit/kvaudit/layout"
)

// Segments returns request r's stream on the rank of dump d from
// token start on (start on a page boundary, at most r.NumTokens): every
// KV buffer of the pool at the request's pages, then the state buffers at
// its state indices. start is the request's start_send_idx for the value
// it was sent, or the consumer's for a producer checked against it.
func Segments(d *layout.Dump, r *layout.Request, start int) ([]Segment, error) {
	m := d.Manifest
	p := m.SGLang
	if p == nil || r.SGLang == nil {
		return nil, fmt.Errorf("dump %q is not an SGLang dump (no \"engine\": \"sglang\")", d.Path)
	}
	if start < 0 || start > r.NumTokens || start%p.PageSize != 0 {
		return nil, fmt.Errorf("dump %q: request %q: start_send_idx %d is not a page boundary in 0..%d", d.Path, r.ID, start, r.NumTokens)
	}
	q := *r
	sg := *r.SGLang
	sg.StartSendIdx = start
	q.SGLang = &sg
	pages := m.SGLangPages(&q)
	data := d.SGLangData()
	var kv, state Segment
	kv.Indices = pages
	state.Indices = r.SGLang.StateIndices
	for i, b := range p.Buffers {
		buf := Buffer{Data: data[i], ItemLen: int(b.ItemLen)}
		if b.Role == layout.SGLangRoleState {
			state.Buffers = append(state.Buffers, buf)
		} else {
			kv.Buffers = append(kv.Buffers, buf)
		}
	}
	segs := []Segment{kv}
	if len(state.Buffers) > 0 && len(state.Indices) > 0 {
		segs = append(segs, state)
	}
	return segs, nil
}
