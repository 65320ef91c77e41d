package checksum

import (
	"fmt"

	"github.com/kvaudit/kvaudit/internal/sglangsum"
	"github.com/kvaudit/kvaudit/layout"
)

// SchemeSGLangAdler32 names SGLang's own KV checksum (docs/sglang.md): zlib
// Adler-32 of one byte stream per request and TP rank, the value SGLang's
// prefill sends in slot 0 of the request's kv_checksum metadata row and
// its decode recomputes (sgl-project/sglang PR #39500).
const SchemeSGLangAdler32 = "sglang-adler32"

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

// SGLangValues computes sglang-adler32 of every request of an SGLang dump
// over the range its start_send_idx gives, on threads workers (GOMAXPROCS
// when 0).
func SGLangValues(d *layout.Dump, threads int) ([]SGLangValue, error) {
	m := d.Manifest
	var out []SGLangValue
	for ri := range m.Requests {
		r := &m.Requests[ri]
		segs, err := sglangsum.Segments(d, r, r.SGLang.StartSendIdx)
		if err != nil {
			return nil, err
		}
		items, err := sglangsum.Items(segs)
		if err != nil {
			return nil, fmt.Errorf("dump %q: request %q: %w", d.Path, r.ID, err)
		}
		v := SGLangValue{Request: r.ID, PP: m.Parallel.PPRank, TP: m.Parallel.TPRank, StartSendIdx: r.SGLang.StartSendIdx, NumTokens: r.NumTokens}
		for _, it := range items {
			v.Bytes += int64(len(it.Data))
		}
		v.Value = sglangsum.ItemsAdler32(items, threads)
		if s, ok := r.SGLang.Sent(); ok {
			v.Sent = &s
		}
		out = append(out, v)
	}
	return out, nil
}
