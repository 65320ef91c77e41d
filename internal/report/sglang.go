package report

import (
	"fmt"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// SGLangValueJSON is one request's sglang-adler32 on one rank, as
// `kvaudit checksum --scheme sglang-adler32 -o json` writes it. Values are
// 0x and 8 hex digits (Adler-32 is 32 bits; SGLang carries it in a uint64
// slot whose upper half is 0).
type SGLangValueJSON struct {
	Request      string `json:"request"`
	PP           int    `json:"pp"`
	TP           int    `json:"tp"`
	StartSendIdx int    `json:"start_send_idx"`
	NumTokens    int    `json:"num_tokens"`
	Bytes        int64  `json:"bytes"`
	Value        string `json:"value"`
	// Sent is the dump's kv_checksum (slot 0 of the metadata row), absent
	// when the dump has none.
	Sent string `json:"sent,omitempty"`
	// Agrees is whether Value equals Sent: absent without a sent value or
	// when the sent value is 0 (SGLang's "none sent", which it skips).
	Agrees *bool `json:"agrees,omitempty"`
}

// SGLangChecksumJSON is the JSON output of `kvaudit checksum --scheme
// sglang-adler32`.
type SGLangChecksumJSON struct {
	Format string            `json:"format"`
	Scheme string            `json:"scheme"`
	Values []SGLangValueJSON `json:"values"`
}

// SGLangHex writes an Adler-32 value as 0x and 8 hex digits, and a sent
// uint64 wider than 32 bits in full.
func SGLangHex(v uint64) string {
	if v>>32 != 0 {
		return fmt.Sprintf("0x%016x", v)
	}
	return fmt.Sprintf("0x%08x", v)
}

// SGLangAgrees says whether value v agrees with what was sent: nil when
// nothing comparable was sent.
func SGLangAgrees(v checksum.SGLangValue) *bool {
	if v.Sent == nil || *v.Sent == 0 {
		return nil
	}
	ok := *v.Sent == uint64(v.Value)
	return &ok
}

// NewSGLangChecksumJSON builds the JSON output of the values.
func NewSGLangChecksumJSON(vals []checksum.SGLangValue) SGLangChecksumJSON {
	out := SGLangChecksumJSON{Format: "kvaudit-sglang-checksums/1", Scheme: checksum.SchemeSGLangAdler32, Values: []SGLangValueJSON{}}
	for _, v := range vals {
		j := SGLangValueJSON{Request: v.Request, PP: v.PP, TP: v.TP, StartSendIdx: v.StartSendIdx, NumTokens: v.NumTokens, Bytes: v.Bytes, Value: SGLangHex(uint64(v.Value)), Agrees: SGLangAgrees(v)}
		if v.Sent != nil {
			j.Sent = SGLangHex(*v.Sent)
		}
		out.Values = append(out.Values, j)
	}
	return out
}

// SGLangChecksumTable is the table of `kvaudit checksum --scheme
// sglang-adler32`: per request and rank, the tokens covered, the bytes
// read, kvaudit's value and the one sent, and whether they agree.
func SGLangChecksumTable(vals []checksum.SGLangValue) *Table {
	t := &Table{
		Title:  "sglang-adler32 (SGLang's KV checksum, per request and rank)",
		Header: []string{"request", "rank", "tokens", "bytes", "value", "sent", "verdict"},
		Whole:  []string{"request"},
	}
	for _, v := range vals {
		sent, verdict := "", Cell{Text: "-", Tone: Dim}
		if v.Sent != nil {
			sent = SGLangHex(*v.Sent)
		}
		switch a := SGLangAgrees(v); {
		case a == nil && v.Sent != nil:
			verdict = Cell{Text: "none sent (0: skipped, as SGLang does)", Tone: Warn}
		case a != nil && *a:
			verdict = Cell{Text: "match", Tone: Good}
		case a != nil:
			verdict = Cell{Text: "MISMATCH", Tone: Bad}
		}
		t.Add(C("%s", v.Request), C("pp %d tp %d", v.PP, v.TP), C("%d..%d", v.StartSendIdx, v.NumTokens), C("%d", v.Bytes), C("%s", SGLangHex(uint64(v.Value))), C("%s", sent), verdict)
	}
	t.Notes = append(t.Notes, "value: zlib Adler-32 of the rank's buffers in kv_data_ptrs order, each at the request's pages (whole pages), as SGLang's --disaggregation-enable-kv-checksum computes it (docs/sglang.md)")
	return t
}

// InspectSGLangJSON is what `kvaudit inspect` shows of an SGLang dump:
// the pool, its buffers in kv_data_ptrs order, and per request the pages,
// the token range the value covers and the value sent.
type InspectSGLangJSON struct {
	Pool     string                     `json:"pool"`
	PageSize int                        `json:"page_size"`
	File     string                     `json:"file"`
	Buffers  []layout.SGLangBufferInfo  `json:"buffers"`
	Requests []InspectSGLangRequestJSON `json:"requests"`
}

// InspectSGLangRequestJSON is one request of an SGLang dump.
type InspectSGLangRequestJSON struct {
	ID           string  `json:"id"`
	Pages        []int64 `json:"pages"`
	StartSendIdx int     `json:"start_send_idx"`
	NumTokens    int     `json:"num_tokens"`
	Sent         string  `json:"sent,omitempty"`
}

func newInspectSGLang(m *layout.Manifest) *InspectSGLangJSON {
	p := m.SGLang
	if p == nil {
		return nil
	}
	out := &InspectSGLangJSON{Pool: p.Pool, PageSize: p.PageSize, File: p.File, Buffers: p.Buffers, Requests: []InspectSGLangRequestJSON{}}
	for i := range m.Requests {
		r := &m.Requests[i]
		all := *r
		sg := *r.SGLang
		sg.StartSendIdx = 0
		all.SGLang = &sg
		rj := InspectSGLangRequestJSON{ID: r.ID, Pages: m.SGLangPages(&all), StartSendIdx: r.SGLang.StartSendIdx, NumTokens: r.NumTokens}
		if s, ok := r.SGLang.Sent(); ok {
			rj.Sent = SGLangHex(s)
		}
		out.Requests = append(out.Requests, rj)
	}
	return out
}

func sglangInspectTable(d InspectDumpJSON) *Table {
	s := d.SGLang
	t := &Table{
		Title:  fmt.Sprintf("%s: SGLang %s, page size %d, buffers in kv_data_ptrs order (%s)", d.Path, s.Pool, s.PageSize, s.File),
		Header: []string{"ordinal", "layer", "role", "offset", "size", "item_len", "pages"},
	}
	for _, b := range s.Buffers {
		t.Add(C("%d", b.Ordinal), C("%d", b.Layer), C("%s", b.Role), C("%d", b.Offset), C("%s", formatBytes(b.Size)), C("%d", b.ItemLen), C("%d", b.Size/b.ItemLen))
	}
	for _, r := range s.Requests {
		sent := "no kv_checksum"
		if r.Sent != "" {
			sent = "kv_checksum sent " + r.Sent
		}
		t.Notes = append(t.Notes, fmt.Sprintf("request %s: pages %v, tokens %d..%d checksummed, %s", r.ID, r.Pages, r.StartSendIdx, r.NumTokens, sent))
	}
	return t
}

// SGLangAuditJSON is SGLang's check in `kvaudit diff -o json` ("sglang"):
// values as 0x and 8 hex digits (a sent value wider than 32 bits in full).
type SGLangAuditJSON struct {
	Requests []SGLangRequestAuditJSON `json:"requests"`
	Notes    []string                 `json:"notes,omitempty"`
}

// SGLangRequestAuditJSON is one consumer request on one rank.
type SGLangRequestAuditJSON struct {
	Request        string              `json:"request"`
	PP             int                 `json:"pp"`
	TP             int                 `json:"tp"`
	StartSendIdx   int                 `json:"start_send_idx"`
	NumTokens      int                 `json:"num_tokens"`
	Consumer       string              `json:"consumer"`
	Producer       string              `json:"producer,omitempty"`
	Expected       string              `json:"expected,omitempty"`
	ExpectedFrom   string              `json:"expected_from,omitempty"`
	Verdict        string              `json:"verdict"`
	Reason         string              `json:"reason,omitempty"`
	Diff           *SGLangByteDiffJSON `json:"first_difference,omitempty"`
	DifferingBytes int64               `json:"differing_bytes"`
	TailBytes      int64               `json:"tail_bytes"`
	KVAudit        string              `json:"kvaudit"`
	Agreement      string              `json:"agreement"`
}

// SGLangByteDiffJSON is verify.SGLangByteDiff in JSON.
type SGLangByteDiffJSON struct {
	Buffer       int    `json:"buffer"`
	Layer        int    `json:"layer"`
	Role         string `json:"role"`
	PagePosition int    `json:"page_position"`
	Page         int64  `json:"page"`
	ProducerPage int64  `json:"producer_page"`
	Token        int    `json:"token"`
	Head         int    `json:"head"`
	Byte         int    `json:"byte"`
	FileOffset   int64  `json:"file_offset"`
	ProducerByte string `json:"producer_byte"`
	ConsumerByte string `json:"consumer_byte"`
	Tail         bool   `json:"tail"`
}

// NewSGLangAuditJSON converts an SGLang audit for JSON.
func NewSGLangAuditJSON(a *verify.SGLangAudit) *SGLangAuditJSON {
	out := &SGLangAuditJSON{Requests: []SGLangRequestAuditJSON{}, Notes: a.Notes}
	for _, r := range a.Requests {
		j := SGLangRequestAuditJSON{
			Request: r.Request, PP: r.PP, TP: r.TP, StartSendIdx: r.StartSendIdx, NumTokens: r.NumTokens,
			Consumer: SGLangHex(uint64(r.Consumer)), ExpectedFrom: r.ExpectedFrom, Verdict: string(r.Verdict), Reason: r.Reason,
			DifferingBytes: r.DifferingBytes, TailBytes: r.TailBytes, KVAudit: string(r.KVAudit), Agreement: r.Agreement,
		}
		if r.Producer != nil {
			j.Producer = SGLangHex(uint64(*r.Producer))
		}
		if r.Expected != nil {
			j.Expected = SGLangHex(*r.Expected)
		}
		if d := r.Diff; d != nil {
			j.Diff = &SGLangByteDiffJSON{Buffer: d.Buffer, Layer: d.Layer, Role: d.Role, PagePosition: d.PagePosition, Page: d.Page,
				ProducerPage: d.ProducerPage, Token: d.Token, Head: d.Head, Byte: d.Byte, FileOffset: d.FileOffset,
				ProducerByte: fmt.Sprintf("0x%02x", d.Producer), ConsumerByte: fmt.Sprintf("0x%02x", d.Consumer), Tail: d.Tail}
		}
		out.Requests = append(out.Requests, j)
	}
	return out
}

// SGLangAuditTable is the table of SGLang's check in `kvaudit diff`: per
// request and rank, the value the decode computes, the one it is held to,
// SGLang's verdict beside kvaudit's, and where the bytes first differ.
func SGLangAuditTable(a *verify.SGLangAudit) *Table {
	t := &Table{
		Title:  "SGLang's KV checksum (sglang-adler32) beside kvaudit's checks",
		Header: []string{"request", "rank", "consumer", "expected", "sglang", "kvaudit", "first difference", "which saw what"},
		Whole:  []string{"request"},
		Drop:   []string{"first difference"},
		Prose:  []string{"which saw what"},
	}
	tone := map[verify.Verdict]Tone{verify.Verified: Good, verify.Mismatch: Bad, verify.Unverified: Warn}
	for _, r := range a.Requests {
		exp := "-"
		if r.Expected != nil {
			exp = SGLangHex(*r.Expected) + " (" + r.ExpectedFrom + ")"
		}
		diff := ""
		if d := r.Diff; d != nil {
			where := "token"
			if d.Tail {
				where = "unused tail slot, token"
			}
			diff = fmt.Sprintf("buffer %d (layer %d %s), page %d (position %d; producer page %d), %s %d, head %d, byte %d: %#02x -> %#02x at %s offset %d; %d byte(s) differ, %d in tail slots",
				d.Buffer, d.Layer, d.Role, d.Page, d.PagePosition, d.ProducerPage, where, d.Token, d.Head, d.Byte, d.Producer, d.Consumer, "pool file", d.FileOffset, r.DifferingBytes, r.TailBytes)
		}
		t.Add(C("%s", r.Request), C("pp %d tp %d", r.PP, r.TP), C("%s", SGLangHex(uint64(r.Consumer))), C("%s", exp),
			Cell{Text: string(r.Verdict), Tone: tone[r.Verdict]}, Cell{Text: string(r.KVAudit), Tone: tone[r.KVAudit]}, C("%s", diff), C("%s", r.Agreement))
	}
	for _, r := range a.Requests {
		if r.Reason != "" && r.Verdict != verify.Verified {
			t.Notes = append(t.Notes, fmt.Sprintf("%s (pp %d tp %d): %s", r.Request, r.PP, r.TP, r.Reason))
		}
	}
	t.Notes = append(t.Notes, a.Notes...)
	return t
}

// SGLangCampaignJSON is `kvaudit campaign --engine sglang -o json`.
type SGLangCampaignJSON struct {
	Format string                   `json:"format"`
	Seed   uint64                   `json:"seed"`
	Trials int                      `json:"trials"`
	Pairs  []string                 `json:"pairs"`
	Pass   bool                     `json:"pass"`
	Kinds  []SGLangCampaignKindJSON `json:"kinds"`
}

// SGLangCampaignKindJSON is one kind's row.
type SGLangCampaignKindJSON struct {
	Kind           string         `json:"kind"`
	Description    string         `json:"description"`
	KVAuditDetects bool           `json:"kvaudit_must_detect"`
	Trials         int            `json:"trials"`
	NotApplicable  int            `json:"not_applicable"`
	KVAudit        int            `json:"caught_by_kvaudit"`
	SGLang         int            `json:"caught_by_sglang"`
	Pinned         int            `json:"pinned_by_sglang_diff"`
	Wrong          int            `json:"misjudged_by_kvaudit"`
	Failures       []string       `json:"failures,omitempty"`
	Pairs          map[string]int `json:"pairs"`
}

// NewSGLangCampaignJSON converts a campaign's result.
func NewSGLangCampaignJSON(r *inject.SGLangCampaignResult) SGLangCampaignJSON {
	out := SGLangCampaignJSON{Format: "kvaudit-sglang-campaign/1", Seed: r.Seed, Trials: r.Trials, Pairs: r.Pairs, Pass: r.Pass}
	for _, k := range r.Kinds {
		out.Kinds = append(out.Kinds, SGLangCampaignKindJSON{Kind: k.Kind.Name, Description: k.Kind.Description, KVAuditDetects: k.Kind.KVAuditDetects,
			Trials: k.Trials, NotApplicable: k.NotApplicable, KVAudit: k.KVAudit, SGLang: k.SGLang, Pinned: k.Pinned, Wrong: k.Wrong,
			Failures: k.Failures, Pairs: k.Pairs})
	}
	return out
}

// SGLangCampaignTable is the table of `kvaudit campaign --engine sglang`:
// per kind, what kvaudit's checks and what SGLang's own Adler-32 caught.
func SGLangCampaignTable(r *inject.SGLangCampaignResult) *Table {
	t := &Table{
		Title:  fmt.Sprintf("SGLang campaign: %d trials per kind over %d pairs (seed %d)", r.Trials, len(r.Pairs), r.Seed),
		Header: []string{"kind", "trials", "kvaudit", "SGLang's Adler-32", "pinned", "what it is"},
		Drop:   []string{"pinned"},
		Prose:  []string{"what it is"},
	}
	for _, k := range r.Kinds {
		kv := Cell{Text: fmt.Sprintf("%d/%d", k.KVAudit, k.Trials), Tone: Good}
		if k.Wrong > 0 {
			kv.Tone = Bad
		}
		if !k.Kind.KVAuditDetects {
			kv.Text += " (intact KV: must verify)"
		}
		sg := Cell{Text: fmt.Sprintf("%d/%d", k.SGLang, k.Trials)}
		switch {
		case k.Kind.KVAuditDetects && k.SGLang < k.Trials:
			sg.Tone = Bad
		case !k.Kind.KVAuditDetects && k.SGLang > 0:
			sg.Tone = Warn
		}
		t.Add(C("%s", k.Kind.Name), C("%d", k.Trials), kv, sg, C("%d", k.Pinned), C("%s", k.Kind.Description))
	}
	t.Notes = append(t.Notes, "pairs: "+strings.Join(r.Pairs, ", "),
		"SGLang's Adler-32: the trials its decode would abort; tail-write and sent-off-by-one change no KV (SGLang aborts intact requests), adler-null and adler-65521 change KV its two 16-bit sums cannot see",
		"pinned: trials whose first differing byte kvaudit's SGLang comparison pins at the byte the fault changed first")
	for _, k := range r.Kinds {
		for _, f := range k.Failures {
			t.Notes = append(t.Notes, k.Kind.Name+": "+f)
		}
	}
	return t
}

// sglangSuite is the JUnit suite of SGLang's check: one case per request
// and rank, failed where SGLang's decode would abort the request, skipped
// where SGLang would not check it.
func sglangSuite(a *verify.SGLangAudit) junitSuite {
	s := junitSuite{Name: "SGLang KV checksum (sglang-adler32)"}
	for _, r := range a.Requests {
		c := junitCase{Name: fmt.Sprintf("%s pp %d tp %d", r.Request, r.PP, r.TP), Classname: "sglang-adler32"}
		text := r.Agreement
		if d := r.Diff; d != nil {
			text += fmt.Sprintf("\nfirst difference: buffer %d (layer %d %s), page %d (position %d), token %d, head %d, byte %d, pool file offset %d (tail slot: %v); %d byte(s) differ, %d in tail slots",
				d.Buffer, d.Layer, d.Role, d.Page, d.PagePosition, d.Token, d.Head, d.Byte, d.FileOffset, d.Tail, r.DifferingBytes, r.TailBytes)
		}
		switch r.Verdict {
		case verify.Mismatch:
			c.Failure = &junitOutcome{Message: r.Reason, Type: "sglang-adler32 mismatch", Text: text}
		case verify.Unverified:
			c.Skipped = &junitOutcome{Message: r.Reason}
		}
		s.Cases = append(s.Cases, c)
	}
	return s
}
