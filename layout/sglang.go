package layout

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/parse"
)

// EngineSGLang is the manifest's engine for a dump of SGLang's KV pools
// (docs/sglang.md, docs/dump-format.md "SGLang dumps").
const EngineSGLang = "sglang"

// SGLang pool classes a dump may come from (sgl-project/sglang
// python/sglang/srt/mem_cache/memory_pool.py).
const (
	SGLangMHAPool = "MHATokenToKVPool"
	SGLangMLAPool = "MLATokenToKVPool"
)

// SGLang buffer roles: an MHA pool's K and V buffers, an MLA pool's one
// latent buffer, a state buffer (Mamba rows, SWA or DSA pages) after them.
const (
	SGLangRoleK     = "k"
	SGLangRoleV     = "v"
	SGLangRoleKV    = "kv"
	SGLangRoleState = "state"
)

// SGLangPool describes the buffers SGLang registers for transfer on this
// rank (KVArgs.kv_data_ptrs, then the state buffers), laid out in one raw
// file of the dump directory.
type SGLangPool struct {
	// Pool is the pool class: MHATokenToKVPool or MLATokenToKVPool.
	Pool string `json:"pool"`
	// PageSize is the allocator's page size (tokens per page).
	PageSize int `json:"page_size"`
	// File is the raw file that holds the buffers.
	File string `json:"file"`
	// Buffers are in kv_data_ptrs order, state buffers last.
	Buffers []SGLangBufferInfo `json:"buffers"`
}

// SGLangBufferInfo is one buffer: its ordinal in kv_data_ptrs (its index
// here), the layer and role it holds, where it lies in the pool file, and
// its item length (bytes per page, kv_item_lens: buffer[0].nbytes *
// page_size for KV buffers).
type SGLangBufferInfo struct {
	Ordinal int    `json:"ordinal"`
	Layer   int    `json:"layer"`
	Role    string `json:"role"`
	Offset  int64  `json:"offset"`
	Size    int64  `json:"size"`
	ItemLen int64  `json:"item_len"`
}

// SGLangRequest is what SGLang knows of a request on this rank beyond its
// pages, which are the block table of the dump's one group (SGLang's
// req_to_token read at every page_size-th slot, divided by page_size):
// the row of req_to_token itself when the exporter gives it, the first
// token sent, the state indices the state buffers are read at, and the
// value the prefill sent (slot 0 of its kv_checksum metadata row). The
// token range SGLang checksums ends at the request's num_tokens (its
// end_idx: min(extend end, input length)).
type SGLangRequest struct {
	ReqPoolIdx *int `json:"req_pool_idx,omitempty"`
	// ReqToToken is req_to_token[req_pool_idx, 0:num_tokens] (in the
	// dump's page numbering).
	ReqToToken []int64 `json:"req_to_token,omitempty"`
	// EnginePages are the pool's own ids of the request's pages when the
	// exporter copied only the requests' pages and renumbered them (the
	// value does not depend on where pages sit).
	EnginePages []int64 `json:"engine_pages,omitempty"`
	// StartSendIdx is the first token sent (the suffix-only form digests
	// [start_send_idx, num_tokens)); 0 for the whole range, PR #39500's.
	StartSendIdx int     `json:"start_send_idx,omitempty"`
	StateIndices []int64 `json:"state_indices,omitempty"`
	// KVChecksum is kv_checksum[metadata_buffer_index, 0]: what the
	// prefill sent (nil when the dump does not have it; 0 means none was
	// sent: a health check, or the flag off).
	KVChecksum string `json:"kv_checksum,omitempty"`
}

// Sent returns the kv_checksum value and whether the dump has one (the
// manifest is validated, so a present value parses).
func (r *SGLangRequest) Sent() (uint64, bool) {
	if r == nil || r.KVChecksum == "" {
		return 0, false
	}
	v, err := ParseHex64(r.KVChecksum)
	return v, err == nil
}

// SetSent sets the kv_checksum value.
func (r *SGLangRequest) SetSent(v uint64) { r.KVChecksum = Hex64(v).String() }

// SGLangPages returns request r's pages in an SGLang dump (the block
// table of its one group) from start_send_idx on: the pages its value
// covers. It is nil for another engine's dump.
func (m *Manifest) SGLangPages(r *Request) []int64 {
	if m.SGLang == nil || len(m.Groups) != 1 || r.SGLang == nil {
		return nil
	}
	bt := r.BlockTable[strconv.Itoa(m.Groups[0].ID)]
	skip := min(r.SGLang.StartSendIdx/m.SGLang.PageSize, len(bt))
	return sglangInts(bt[skip:])
}

// validateSGLang checks the engine and SGLang fields of a manifest.
func (m *Manifest) validateSGLang(bad func(string, string, ...any) error) error {
	switch m.Engine {
	case "":
		if m.SGLang != nil {
			return bad("sglang", "an SGLang pool needs \"engine\": \"sglang\"")
		}
		for ri := range m.Requests {
			if m.Requests[ri].SGLang != nil {
				return bad(fmt.Sprintf("requests[%d].sglang", ri), "SGLang request fields need \"engine\": \"sglang\"")
			}
		}
		return nil
	case EngineSGLang:
	default:
		return bad("engine", "unknown engine %q (want sglang, or no engine for a vLLM dump)", m.Engine)
	}
	p := m.SGLang
	if p == nil {
		return bad("sglang", "missing: an SGLang dump describes its pool")
	}
	switch p.Pool {
	case SGLangMHAPool, SGLangMLAPool:
	default:
		return bad("sglang.pool", "unknown pool %q (want %s or %s)", p.Pool, SGLangMHAPool, SGLangMLAPool)
	}
	if p.PageSize < 1 || p.PageSize > 1<<20 {
		return bad("sglang.page_size", "%d is not in 1..2^20", p.PageSize)
	}
	if p.File == "" {
		return bad("sglang.file", "missing: the raw file holding the buffers")
	}
	if len(p.Buffers) == 0 {
		return bad("sglang.buffers", "no buffers")
	}
	state := false
	var kvLayers []int
	for i, b := range p.Buffers {
		f := fmt.Sprintf("sglang.buffers[%d]", i)
		if b.Ordinal != i {
			return bad(f+".ordinal", "%d: buffers are listed in kv_data_ptrs order, so buffer %d has ordinal %d", b.Ordinal, i, i)
		}
		if b.Layer < 0 || b.Layer > 1<<20 {
			return bad(f+".layer", "%d is not in 0..2^20", b.Layer)
		}
		if b.Offset < 0 || b.Size < 0 || b.Offset > 1<<62-b.Size {
			return bad(f+".offset", "offset %d and size %d do not give a range in a file", b.Offset, b.Size)
		}
		if b.ItemLen < 1 || b.ItemLen > b.Size {
			return bad(f+".item_len", "%d is not in 1..size (%d)", b.ItemLen, b.Size)
		}
		if b.Size%b.ItemLen != 0 {
			return bad(f+".size", "%d is not a whole number of %d-byte items", b.Size, b.ItemLen)
		}
		switch b.Role {
		case SGLangRoleState:
			state = true
			continue
		case SGLangRoleK, SGLangRoleV:
			if p.Pool != SGLangMHAPool {
				return bad(f+".role", "%q: an %s has one kv buffer per layer", b.Role, p.Pool)
			}
		case SGLangRoleKV:
			if p.Pool != SGLangMLAPool {
				return bad(f+".role", "\"kv\": an %s has k and v buffers", p.Pool)
			}
		default:
			return bad(f+".role", "unknown role %q (want k, v, kv or state)", b.Role)
		}
		if state {
			return bad(f+".role", "KV buffer after a state buffer: state buffers come last")
		}
		if b.Size/b.ItemLen != int64(m.NumBlocks) {
			return bad(f+".size", "%d bytes are %d pages of %d bytes, but num_blocks is %d", b.Size, b.Size/b.ItemLen, b.ItemLen, m.NumBlocks)
		}
		kvLayers = append(kvLayers, b.Layer)
	}
	if p.Pool == SGLangMHAPool {
		// K of each layer, then V of the same layers in the same order.
		if len(kvLayers)%2 != 0 || !slices.Equal(kvLayers[:len(kvLayers)/2], kvLayers[len(kvLayers)/2:]) {
			return bad("sglang.buffers", "an MHA pool lists K of its layers then V of the same layers (kv_data_ptrs order), got layers %v", kvLayers)
		}
		for i, b := range p.Buffers[:len(kvLayers)] {
			if want := []string{SGLangRoleK, SGLangRoleV}[i*2/len(kvLayers)]; b.Role != want {
				return bad(fmt.Sprintf("sglang.buffers[%d].role", i), "%q: an MHA pool lists K of every layer, then V", b.Role)
			}
		}
	}
	if len(m.Groups) != 1 {
		return bad("groups", "an SGLang dump has one group (its pool's layers), got %d", len(m.Groups))
	}
	if want := map[string]string{SGLangMHAPool: KindFullAttention, SGLangMLAPool: KindMLA}[p.Pool]; m.Groups[0].Kind != want {
		return bad("groups[0].kind", "%q: an %s's group is %s", m.Groups[0].Kind, p.Pool, want)
	}
	if m.Groups[0].BlockSize != p.PageSize {
		return bad("groups[0].block_size", "%d, but the page size is %d: SGLang's blocks are its pages", m.Groups[0].BlockSize, p.PageSize)
	}
	for ri := range m.Requests {
		r := &m.Requests[ri]
		if r.SGLang == nil {
			return bad(fmt.Sprintf("requests[%d].sglang", ri), "missing: each request of an SGLang dump gives its first token sent and the value sent (an empty object when neither)")
		}
		if err := validateSGLangRequest(m, r, ri, state, bad); err != nil {
			return err
		}
	}
	return nil
}

func validateSGLangRequest(m *Manifest, r *Request, ri int, state bool, bad func(string, string, ...any) error) error {
	s, ps := r.SGLang, m.SGLang.PageSize
	rf := fmt.Sprintf("requests[%d].sglang", ri)
	if s.StartSendIdx < 0 || s.StartSendIdx > r.NumTokens {
		return bad(rf+".start_send_idx", "%d is not in 0..num_tokens (%d)", s.StartSendIdx, r.NumTokens)
	}
	if s.StartSendIdx%ps != 0 {
		return bad(rf+".start_send_idx", "%d is not on a page boundary (page size %d)", s.StartSendIdx, ps)
	}
	key := strconv.Itoa(m.Groups[0].ID)
	bt, ok := r.BlockTable[key]
	btf := fmt.Sprintf("requests[%d].block_table[%q]", ri, key)
	if !ok {
		return bad(btf, "missing: an SGLang request's pages are its block table")
	}
	if want := (r.NumTokens + ps - 1) / ps; len(bt) != want {
		return bad(btf, "%d pages for %d tokens at page size %d, want %d", len(bt), r.NumTokens, ps, want)
	}
	for i, p := range bt {
		if p == NoBlock {
			return bad(fmt.Sprintf("%s[%d]", btf, i), "null page: SGLang's pages are all allocated")
		}
	}
	if s.ReqToToken != nil {
		if len(s.ReqToToken) != r.NumTokens {
			return bad(rf+".req_to_token", "%d slots, want num_tokens (%d)", len(s.ReqToToken), r.NumTokens)
		}
		for i, slot := range s.ReqToToken {
			// SGLang reads every page_size-th slot; a paged allocator
			// hands out whole pages, so the other slots follow it.
			if want := int64(bt[i/ps])*int64(ps) + int64(i%ps); slot != want {
				return bad(fmt.Sprintf("%s.req_to_token[%d]", rf, i), "slot %d, but token %d is slot %d of page %d (the block table)", slot, i, i%ps, bt[i/ps])
			}
		}
	}
	if s.KVChecksum != "" {
		if _, err := ParseHex64(s.KVChecksum); err != nil {
			return bad(rf+".kv_checksum", "%v", err)
		}
	}
	if s.EnginePages != nil {
		if len(s.EnginePages) != len(bt) {
			return bad(rf+".engine_pages", "%d pages, but the block table has %d", len(s.EnginePages), len(bt))
		}
		for i, p := range s.EnginePages {
			if p < 0 {
				return bad(fmt.Sprintf("%s.engine_pages[%d]", rf, i), "page %d is negative", p)
			}
		}
	}
	if s.ReqPoolIdx != nil && *s.ReqPoolIdx < 0 {
		return bad(rf+".req_pool_idx", "%d is negative", *s.ReqPoolIdx)
	}
	if len(s.StateIndices) > 0 && !state {
		return bad(rf+".state_indices", "the pool has no state buffers")
	}
	for _, sb := range m.SGLang.Buffers {
		if sb.Role != SGLangRoleState {
			continue
		}
		for i, idx := range s.StateIndices {
			if idx < 0 || idx >= sb.Size/sb.ItemLen {
				return bad(fmt.Sprintf("%s.state_indices[%d]", rf, i), "index %d out of range of state buffer %d (%d items)", idx, sb.Ordinal, sb.Size/sb.ItemLen)
			}
		}
	}
	return nil
}

func sglangInts(b BlockIDs) []int64 {
	out := make([]int64, len(b))
	for i, v := range b {
		out[i] = int64(v)
	}
	return out
}

// SGLangData returns the bytes of each buffer of the dump's SGLang pool,
// in kv_data_ptrs order (nil for a dump of another engine).
func (d *Dump) SGLangData() [][]byte { return d.sglang }

// openSGLang maps the pool file of an SGLang dump and checks that every
// buffer lies in it.
func (o *opener) openSGLang() error {
	p := o.d.Manifest.SGLang
	if p == nil {
		return nil
	}
	f, err := o.rawFile(p.File)
	if err != nil {
		return &parse.Error{Format: parse.Dump, File: o.manifestFile, Field: "sglang.file", Err: err}
	}
	for i, b := range p.Buffers {
		if b.Offset+b.Size > int64(len(f.Data)) {
			return &parse.Error{Format: parse.Dump, File: o.manifestFile, Field: fmt.Sprintf("sglang.buffers[%d]", i), Err: fmt.Errorf("bytes %d..%d are past the end of %q (%d bytes)", b.Offset, b.Offset+b.Size, f.Path, len(f.Data))}
		}
		o.d.sglang = append(o.d.sglang, f.Data[b.Offset:b.Offset+b.Size])
	}
	return nil
}
