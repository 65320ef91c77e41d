package checksum

import (
	"fmt"

	"github.com/kvaudit/kvaudit/layout"
)

// SGLangValue is one request's sglang-adler32 on one rank of an SGLang
// dump, beside the value SGLang sent for it (the dump's kv_checksum, slot
// 0 of the request's metadata row).
type SGLangValue struct {
	Request string `json:"request"`
	PP      int    `json:"pp"`
	TP      int    `json:"tp"`
	// StartSendIdx is the first token of the range the value covers.
	StartSendIdx int `json:"start_send_idx"`
	NumTokens    int `json:"num_tokens"`
	// Value is what kvaudit computes from the dump's bytes.
	Value uint32 `json:"value"`
	// Sent is the value in the dump's kv_checksum row (nil when the dump
	// has none; 0 when none was sent).
	Sent *uint64 `json:"sent,omitempty"`
	// Bytes is the stream's length.
	Bytes int64 `json:"bytes"`
}

// SGLangSegments returns request r's stream on the rank of dump d from
// token start on (start on a page boundary, at most r.NumTokens): every
// KV buffer of the pool at the request's pages, then the state buffers at
// its state indices. start is the request's start_send_idx for the value
// it was sent, or the consumer's for a producer checked against it.
func SGLangSegments(d *layout.Dump, r *layout.Request, start int) ([]SGLangSegment, error) {
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
	var kv, state SGLangSegment
	kv.Indices = pages
	state.Indices = r.SGLang.StateIndices
	for i, b := range p.Buffers {
		buf := SGLangBuffer{Data: data[i], ItemLen: int(b.ItemLen)}
		if b.Role == layout.SGLangRoleState {
			state.Buffers = append(state.Buffers, buf)
		} else {
			kv.Buffers = append(kv.Buffers, buf)
		}
	}
	segs := []SGLangSegment{kv}
	if len(state.Buffers) > 0 && len(state.Indices) > 0 {
		segs = append(segs, state)
	}
	return segs, nil
}

// SGLangValues computes sglang-adler32 of every request of an SGLang dump
// over the range its start_send_idx gives, on threads workers (GOMAXPROCS
// when 0).
func SGLangValues(d *layout.Dump, threads int) ([]SGLangValue, error) {
	m := d.Manifest
	var out []SGLangValue
	for ri := range m.Requests {
		r := &m.Requests[ri]
		segs, err := SGLangSegments(d, r, r.SGLang.StartSendIdx)
		if err != nil {
			return nil, err
		}
		items, err := SGLangItems(segs)
		if err != nil {
			return nil, fmt.Errorf("dump %q: request %q: %w", d.Path, r.ID, err)
		}
		v := SGLangValue{Request: r.ID, PP: m.Parallel.PPRank, TP: m.Parallel.TPRank, StartSendIdx: r.SGLang.StartSendIdx, NumTokens: r.NumTokens}
		for _, it := range items {
			v.Bytes += int64(len(it.Data))
		}
		v.Value = sglangItemsAdler32(items, threads)
		if s, ok := r.SGLang.Sent(); ok {
			v.Sent = &s
		}
		out = append(out, v)
	}
	return out, nil
}
