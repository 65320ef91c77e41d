package verify

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/sglangsum"
	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/kvaudit/kvaudit/layout"
)

// SGLangAudit is SGLang's own check of a consumer (sglang-adler32,
// docs/sglang.md) beside kvaudit's: per request and rank, the value the
// decode recomputes, the value it is held to (the one sent, or the
// producer's), SGLang's verdict, where the bytes differ when the producer's
// dumps are given, and how SGLang's verdict and kvaudit's compare.
type SGLangAudit struct {
	Requests []*SGLangRequestAudit
	// Notes say what could not be compared and why.
	Notes []string
}

// Sources of the value a consumer's sglang-adler32 is held to.
const (
	sglangFromFlag     = "--sglang-checksum"
	sglangFromMetadata = "kv_checksum row"
	sglangFromProducer = "producer dump"
)

// SGLangRequestAudit is one consumer request on one rank.
type SGLangRequestAudit struct {
	Request      string
	PP           int
	TP           int
	StartSendIdx int
	NumTokens    int
	// Consumer is sglang-adler32 of the consumer's bytes: what SGLang's
	// decode computes.
	Consumer uint32
	// Producer is the producer's value over the same range, when its dumps
	// were given and lay the pool out as the consumer does.
	Producer *uint32
	// Expected is the value the consumer is held to, and ExpectedFrom
	// where it came from (SGLangFrom...); nil when there is none.
	Expected     *uint64
	ExpectedFrom string
	// Verdict is SGLang's: mismatch where its decode would abort the
	// request, unverified where it would skip the check (0 sent) or
	// nothing is known to hold it to.
	Verdict Verdict
	Reason  string
	// Diff is the first byte of the stream where producer and consumer
	// differ, and the counts of differing bytes (those in unused tail
	// slots, which hold no KV, apart).
	Diff           *SGLangByteDiff
	DifferingBytes int64
	TailBytes      int64
	// KVAudit is kvaudit's own verdict of the request (vLLM's definition
	// and the mix check), and Agreement says which saw what.
	KVAudit   Verdict
	Agreement string
}

// SGLangByteDiff pins a difference: the buffer (its kv_data_ptrs
// ordinal, layer and role), the page (its position in the request, and
// its id on each side), the token, the head (local to the rank) and the
// byte within the head's vector, the offset in the consumer's pool file,
// and both bytes.
type SGLangByteDiff struct {
	Buffer       int
	Layer        int
	Role         string
	PagePosition int
	Page         int64
	ProducerPage int64
	Token        int
	Head         int
	Byte         int
	FileOffset   int64
	Producer     byte
	Consumer     byte
	// Tail is whether the token is past num_tokens: an unused slot of the
	// last page, which SGLang hashes and kvaudit does not.
	Tail bool
}

// ParseSGLangChecksums reads --sglang-checksum values: REQ=0xHEX (the
// request's value on TP rank 0, or its only rank) or REQ@TP=0xHEX.
func ParseSGLangChecksums(vals []string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, v := range vals {
		k, hex, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want REQ=0xHEX or REQ@TP=0xHEX", v)
		}
		x, err := layout.ParseHex64(strings.ToLower(hex))
		if err != nil {
			return nil, fmt.Errorf("%q: %v", v, err)
		}
		if req, tp, ok := strings.Cut(k, "@"); ok {
			n, err := strconv.Atoi(tp)
			if err != nil || n < 0 || req == "" {
				return nil, fmt.Errorf("%q: %q is not REQ@TP with a TP rank", v, k)
			}
			k = req + "@" + strconv.Itoa(n)
		} else {
			k += "@0"
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%q: a second value for %s", v, k)
		}
		out[k] = x
	}
	return out, nil
}

// SGLangOptions are the inputs of CompareSGLang beyond the dumps.
type SGLangOptions struct {
	// Sent are values given by the user (ParseSGLangChecksums), which
	// take the place of the consumer's kv_checksum rows.
	Sent map[string]uint64
	// Diff is kvaudit's comparison of the same sides (nil: none), for
	// the agreement column.
	Diff *DiffResult
	// Threads of the Adler-32 (0: GOMAXPROCS).
	Threads int
}

// CompareSGLang runs SGLang's check on every request of the consumer's
// SGLang dumps: its value against the one sent (opts.Sent, else the
// dumps' kv_checksum rows, else the producer's value over the consumer's
// range), and, when the producer's SGLang dumps are given (prod may be
// nil), the byte where the two streams first differ. prod and cons are
// one side each.
func CompareSGLang(prod, cons []*layout.Dump, opts SGLangOptions) (*SGLangAudit, error) {
	a := &SGLangAudit{Requests: []*SGLangRequestAudit{}}
	type rank struct{ pp, tp int }
	byRank := map[rank]*layout.Dump{}
	for _, d := range prod {
		if d.Manifest.SGLang == nil {
			a.Notes = append(a.Notes, fmt.Sprintf("producer %s is not an SGLang dump: the consumer is held to the values sent only", d.Path))
			byRank = nil
			break
		}
		byRank[rank{d.Manifest.Parallel.PPRank, d.Manifest.Parallel.TPRank}] = d
	}
	used := map[string]bool{}
	for _, c := range cons {
		m := c.Manifest
		if m.SGLang == nil {
			return nil, fmt.Errorf("consumer %s is not an SGLang dump (no \"engine\": \"sglang\")", c.Path)
		}
		var p *layout.Dump
		if byRank != nil {
			p = byRank[rank{m.Parallel.PPRank, m.Parallel.TPRank}]
			if p != nil {
				if why := sglangComparable(p.Manifest, m); why != "" {
					a.Notes = append(a.Notes, fmt.Sprintf("producer %s and consumer %s: %s; SGLang's value is not comparable between them (PR #39729's layout signature skips such pairs)", p.Path, c.Path, why))
					p = nil
				}
			} else if len(prod) > 0 {
				a.Notes = append(a.Notes, fmt.Sprintf("consumer %s (pp %d tp %d): no producer rank of the same place", c.Path, m.Parallel.PPRank, m.Parallel.TPRank))
			}
		}
		for ri := range m.Requests {
			r := &m.Requests[ri]
			ra, err := sglangRequest(p, c, r, opts, used)
			if err != nil {
				return nil, err
			}
			a.Requests = append(a.Requests, ra)
		}
	}
	for k := range opts.Sent {
		if !used[k] {
			return nil, fmt.Errorf("--sglang-checksum %s: no such request and rank in the consumer", k)
		}
	}
	slices.SortStableFunc(a.Requests, func(x, y *SGLangRequestAudit) int {
		if c := strings.Compare(x.Request, y.Request); c != 0 {
			return c
		}
		return (x.PP<<16 + x.TP) - (y.PP<<16 + y.TP)
	})
	agreement(a, opts.Diff)
	return a, nil
}

// sglangComparable says why two SGLang ranks' values cannot be compared
// ("" when they can): another pool, page size, TP size or buffer list.
func sglangComparable(p, c *layout.Manifest) string {
	ps, cs := p.SGLang, c.SGLang
	switch {
	case ps.Pool != cs.Pool:
		return fmt.Sprintf("pools %s and %s", ps.Pool, cs.Pool)
	case ps.PageSize != cs.PageSize:
		return fmt.Sprintf("page sizes %d and %d", ps.PageSize, cs.PageSize)
	case p.Parallel.TPSize != c.Parallel.TPSize:
		return fmt.Sprintf("TP sizes %d and %d", p.Parallel.TPSize, c.Parallel.TPSize)
	case len(ps.Buffers) != len(cs.Buffers):
		return fmt.Sprintf("%d and %d buffers", len(ps.Buffers), len(cs.Buffers))
	}
	for i := range ps.Buffers {
		if ps.Buffers[i].ItemLen != cs.Buffers[i].ItemLen || ps.Buffers[i].Role != cs.Buffers[i].Role || ps.Buffers[i].Layer != cs.Buffers[i].Layer {
			return fmt.Sprintf("buffer %d differs (layer, role or item length)", i)
		}
	}
	return ""
}

func sglangRequest(p, c *layout.Dump, r *layout.Request, opts SGLangOptions, used map[string]bool) (*SGLangRequestAudit, error) {
	m := c.Manifest
	start := r.SGLang.StartSendIdx
	ra := &SGLangRequestAudit{Request: r.ID, PP: m.Parallel.PPRank, TP: m.Parallel.TPRank, StartSendIdx: start, NumTokens: r.NumTokens, Verdict: Unverified}
	csegs, err := sglangsum.Segments(c, r, start)
	if err != nil {
		return nil, err
	}
	citems, err := sglangsum.Items(csegs)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: request %q: %w", c.Path, r.ID, err)
	}
	if ra.Consumer, err = sglangsum.Adler32(csegs, opts.Threads); err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%s@%d", r.ID, ra.TP)
	if v, ok := opts.Sent[key]; ok {
		used[key] = true
		ra.Expected, ra.ExpectedFrom = &v, sglangFromFlag
	} else if v, ok := r.SGLang.Sent(); ok {
		ra.Expected, ra.ExpectedFrom = &v, sglangFromMetadata
	}
	var pitems []sglangsum.Item
	if p != nil {
		pid := r.ID
		if r.ProducerID != "" {
			pid = r.ProducerID
		}
		pr := p.Manifest.Request(pid)
		switch {
		case pr == nil:
			ra.Reason = fmt.Sprintf("the producer rank has no request %q", pid)
		case pr.NumTokens < r.NumTokens:
			ra.Reason = fmt.Sprintf("the producer holds %d tokens of it, the consumer %d", pr.NumTokens, r.NumTokens)
		default:
			// The prefill digests the range it sends: from the consumer's
			// start_send_idx to the consumer's end.
			q := *pr
			q.NumTokens = r.NumTokens
			q.BlockTable = map[string]layout.BlockIDs{}
			for k, bt := range pr.BlockTable {
				q.BlockTable[k] = bt[:min(len(bt), (r.NumTokens+m.SGLang.PageSize-1)/m.SGLang.PageSize)]
			}
			psegs, err := sglangsum.Segments(p, &q, start)
			if err != nil {
				return nil, err
			}
			if pitems, err = sglangsum.Items(psegs); err != nil {
				return nil, fmt.Errorf("producer %s: request %q: %w", p.Path, pid, err)
			}
			v, _ := sglangsum.Adler32(psegs, opts.Threads)
			ra.Producer = &v
			if ra.Expected == nil {
				e := uint64(v)
				ra.Expected, ra.ExpectedFrom = &e, sglangFromProducer
			}
			sglangBytes(ra, c, r, pitems, citems)
		}
	}
	switch {
	case ra.Expected == nil:
		if ra.Reason == "" {
			ra.Reason = "no value sent and no producer dump to recompute it from"
		}
	case *ra.Expected == 0:
		ra.Reason = "0 sent: SGLang skips the check (a health check, or the flag off on the prefill)"
	case *ra.Expected == uint64(ra.Consumer):
		ra.Verdict = Verified
	default:
		ra.Verdict = Mismatch
		ra.Reason = fmt.Sprintf("expected %#08x (%s), the consumer's bytes give %#08x: SGLang's decode aborts the request", *ra.Expected, ra.ExpectedFrom, ra.Consumer)
	}
	return ra, nil
}

// sglangBytes compares the producer's and the consumer's streams item by
// item (the same buffers and page count, checked by sglangComparable) and
// records the first differing byte and the counts.
func sglangBytes(ra *SGLangRequestAudit, c *layout.Dump, r *layout.Request, pitems, citems []sglangsum.Item) {
	m := c.Manifest
	ps := m.SGLang.PageSize
	npages := 0 // the KV pages: every KV buffer is read at each
	for _, it := range citems {
		if it.Buffer == 0 {
			npages++
		}
	}
	npages = max(npages, 1)
	for i := range min(len(pitems), len(citems)) {
		pd, cd := pitems[i].Data, citems[i].Data
		if bytes.Equal(pd, cd) {
			continue
		}
		b := m.SGLang.Buffers[citems[i].Buffer]
		slot := len(cd) / ps
		pos := i % npages
		if b.Role == layout.SGLangRoleState {
			pos = 0
		}
		for off := range cd {
			if pd[off] == cd[off] {
				continue
			}
			tok := ra.StartSendIdx + pos*ps + off/slot
			tail := b.Role != layout.SGLangRoleState && tok >= r.NumTokens
			ra.DifferingBytes++
			if tail {
				ra.TailBytes++
			}
			if ra.Diff != nil {
				continue
			}
			heads := 1
			if b.Role == layout.SGLangRoleK || b.Role == layout.SGLangRoleV {
				heads = sglangHeads(m, b.Layer)
			}
			vec := slot / heads
			ra.Diff = &SGLangByteDiff{
				Buffer: b.Ordinal, Layer: b.Layer, Role: b.Role, PagePosition: pos,
				Page: citems[i].Index, ProducerPage: pitems[i].Index,
				Token: tok, Head: (off % slot) / vec, Byte: (off % slot) % vec,
				FileOffset: b.Offset + citems[i].Index*b.ItemLen + int64(off),
				Producer:   pd[off], Consumer: cd[off], Tail: tail,
			}
		}
	}
}

// sglangHeads is the heads on this rank of layer number layer (1 when the
// manifest does not say).
func sglangHeads(m *layout.Manifest, layer int) int {
	for _, l := range m.Groups[0].Layers {
		if l.Source != nil && len(l.Source.Shape) == 5 && strings.Contains("."+l.Name+".", "."+strconv.Itoa(layer)+".") {
			return max(1, int(l.Source.Shape[3]))
		}
	}
	return 1
}

// agreement fills each request's kvaudit verdict and says which check saw
// what.
func agreement(a *SGLangAudit, d *DiffResult) {
	sg := map[string]Verdict{}
	for _, ra := range a.Requests {
		if ra.Verdict == Mismatch || sg[ra.Request] == "" || sg[ra.Request] == Verified && ra.Verdict == Unverified {
			sg[ra.Request] = ra.Verdict
		}
	}
	for _, ra := range a.Requests {
		kv := Unverified
		if d != nil {
			for _, rv := range d.Requests {
				if rv.ID == ra.Request {
					kv = rv.Verdict
				}
			}
		}
		ra.KVAudit = kv
		s := ra.Verdict
		switch {
		case d == nil:
			ra.Agreement = "kvaudit's checks were not run"
		case s == Mismatch && kv == Mismatch:
			ra.Agreement = "both caught it"
		case s == Mismatch && kv == Verified && ra.DifferingBytes > 0 && ra.DifferingBytes == ra.TailBytes:
			ra.Agreement = "SGLang only: the bytes differ only in unused tail slots past num_tokens, which SGLang hashes (whole pages) and which hold no KV; kvaudit's checks leave them out, so the request's KV arrived intact (a false alarm: SGLang aborts a good request)"
		case s == Mismatch && kv == Verified && ra.ExpectedFrom != sglangFromProducer && ra.Producer != nil && *ra.Producer == ra.Consumer:
			ra.Agreement = "SGLang only: the consumer equals the producer, but the value sent differs from both (the value, not the KV, is wrong: a stale or another request's metadata row)"
		case s == Mismatch && kv == Verified:
			ra.Agreement = "SGLang only: kvaudit verified the request's KV"
		case s == Mismatch:
			ra.Agreement = "SGLang only: kvaudit could not verify the request (" + string(kv) + ")"
		case s == Verified && kv == Mismatch:
			ra.Agreement = "kvaudit only: SGLang's Adler-32 came out the same although the KV differs (its two 16-bit sums cancel some multi-byte changes) on this rank"
			if sg[ra.Request] == Mismatch {
				ra.Agreement = "kvaudit; SGLang on another rank of the request"
			}
		case s == Verified && kv == Verified:
			ra.Agreement = "agree: verified"
		case kv == Mismatch:
			ra.Agreement = "kvaudit only: SGLang would not check it (" + ra.Reason + ")"
		default:
			ra.Agreement = "neither verified it"
		}
	}
}

// Mismatched reports whether SGLang's check fails a request.
func (a *SGLangAudit) Mismatched() bool {
	if a == nil {
		return false
	}
	for _, r := range a.Requests {
		if r.Verdict == Mismatch {
			return true
		}
	}
	return false
}

// summary names the requests SGLang's check fails.
func (a *SGLangAudit) summary() string {
	var ids []string
	for _, r := range a.Requests {
		if r.Verdict == Mismatch && !slices.Contains(ids, r.Request) {
			ids = append(ids, r.Request)
		}
	}
	return "SGLang's KV checksum: " + termtext.Requests(ids) + " (its decode would abort them)"
}
