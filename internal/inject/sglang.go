package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/sglangsum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// SGLangKind is a fault of an SGLang campaign: a change to a consumer's
// pool bytes (or its sent value) and whether kvaudit's checks must see it.
type SGLangKind struct {
	Name string
	// What the fault does, for the report.
	Description string
	// KVAuditDetects is whether the fault changes the request's KV, so
	// that kvaudit's checks must fail it (false: they must verify it).
	KVAuditDetects bool
	// MHA: the fault needs K and V buffers.
	MHA bool
}

// SGLangKinds are the faults of `kvaudit campaign --engine sglang`.
var SGLangKinds = []SGLangKind{
	{"bit-flip", "one bit of one byte of a token's K, V or latent", true, false},
	{"byte-noise", "1 to 8 bytes of one token's vector replaced by random bytes", true, false},
	{"zero-page", "one of the request's pages of one buffer zeroed", true, false},
	{"page-swap", "two of the request's pages swapped in one buffer", true, false},
	{"kv-swap", "one page's K and V swapped (one layer)", true, true},
	{"adler-null", "three consecutive bytes of a token changed by +d, -2d, +d (d in 1..8)", true, false},
	{"pm1-4", "four consecutive bytes of a token each changed by +1 or -1 at random (of the 16 patterns, +-(+1,-1,-1,+1) cancel in both sums: Adler-32 misses 1 in 8)", true, false},
	{"adler-65521", "+d at one byte of the stream and -d at the byte 65521 further on (both in tokens)", true, false},
	{"tail-write", "a byte of an unused slot past num_tokens in the last page changed (no KV there)", false, false},
	{"sent-off-by-one", "the kv_checksum sent is the right value + 1 (SGLang's own mismatch test)", false, false},
}

// SGLangCampaignOptions control an SGLang campaign.
type SGLangCampaignOptions struct {
	Trials int // per kind (0: 10)
	Seed   uint64
	// Dir holds the scratch files ("": the system's temporary directory).
	Dir string
	// Progress, when set, is called after each trial.
	Progress func(done, total int)
}

// SGLangKindResult sums the trials of one kind.
type SGLangKindResult struct {
	Kind SGLangKind
	// Trials ran; NotApplicable found no pair or place for the fault.
	Trials, NotApplicable int
	// KVAudit counts the trials kvaudit's checks failed, SGLang those
	// SGLang's Adler-32 failed (its decode aborting the request), Pinned
	// those whose first difference SGLang's comparison pinned at the
	// byte the fault changed first.
	KVAudit, SGLang, Pinned int
	// Wrong counts the trials kvaudit judged against the kind's
	// expectation (a KV change it verified, or intact KV it failed).
	Wrong    int
	Failures []string
	Pairs    map[string]int
}

// SGLangCampaignResult is an SGLang campaign's outcome.
type SGLangCampaignResult struct {
	Seed   uint64
	Trials int
	Pairs  []string
	Kinds  []SGLangKindResult
	// Pass is false when kvaudit misjudged a trial or a clean pair.
	Pass bool
}

// sglangPairs are the synthesized pairs: MHA and MLA, page sizes 1 and
// 16, TP 1 and 2.
func sglangPairs(seed uint64) []synth.Config {
	return []synth.Config{
		{Preset: "llama", Layers: 2, BlockSize: 16, Tokens: 40, TP: 1, Seed: seed},
		{Preset: "llama", Layers: 2, BlockSize: 16, Tokens: 40, TP: 2, Seed: seed},
		{Preset: "tiny", Layers: 2, BlockSize: 1, Tokens: 9, TP: 2, Seed: seed},
		{Preset: "mla", Layers: 2, BlockSize: 16, Tokens: 40, TP: 1, Seed: seed},
		{Preset: "mla", Layers: 2, BlockSize: 1, Tokens: 40, TP: 2, Seed: seed},
	}
}

func sglangPairName(c synth.Config) string {
	return fmt.Sprintf("%s ps%d tp%d", c.Preset, c.BlockSize, c.TP)
}

type sglangPair struct {
	name       string
	prod, cons []string
}

// SGLangCampaign synthesizes SGLang pairs, injects Trials faults of each
// SGLangKinds kind into copies of their consumers, and runs kvaudit's
// comparison and SGLang's check on each: what each catches.
func SGLangCampaign(ctx context.Context, opts SGLangCampaignOptions) (*SGLangCampaignResult, error) {
	if opts.Trials <= 0 {
		opts.Trials = 10
	}
	scratch, err := safeio.TempDir(opts.Dir, "kvaudit-sglang-campaign-")
	if err != nil {
		return nil, err
	}
	defer safeio.RemoveTemp(scratch)
	res := &SGLangCampaignResult{Seed: opts.Seed, Trials: opts.Trials, Pass: true}
	var pairs []sglangPair
	for i, c := range sglangPairs(opts.Seed) {
		dir := filepath.Join(scratch, "pair-"+strconv.Itoa(i))
		c.Engine = "sglang"
		c.Role = "producer"
		p, err := synth.WriteContext(ctx, dir, c)
		if err != nil {
			return nil, err
		}
		c.Role = "consumer"
		q, err := synth.WriteContext(ctx, dir, c)
		if err != nil {
			return nil, err
		}
		sp := sglangPair{name: sglangPairName(c), prod: p, cons: q}
		_, a, err := sglangJudge(ctx, sp.prod, sp.cons)
		if err != nil {
			return nil, err
		}
		if a.Mismatched() {
			return nil, fmt.Errorf("sglang campaign: pair %s does not verify untouched", sp.name)
		}
		pairs = append(pairs, sp)
		res.Pairs = append(res.Pairs, sp.name)
	}
	total, done := len(SGLangKinds)*opts.Trials, 0
	for ki, k := range SGLangKinds {
		kr := SGLangKindResult{Kind: k, Pairs: map[string]int{}}
		for trial := range opts.Trials {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			rng := rand.New(rand.NewPCG(opts.Seed, uint64(ki)<<32|uint64(trial)))
			ran := false
			for attempt := range len(pairs) {
				sp := pairs[(trial+ki+attempt)%len(pairs)]
				ok, err := sglangTrial(ctx, sp, k, rng, filepath.Join(scratch, fmt.Sprintf("t-%d-%d", ki, trial)), &kr)
				if err != nil {
					return nil, fmt.Errorf("sglang campaign: %s on %s: %w", k.Name, sp.name, err)
				}
				if ok {
					kr.Pairs[sp.name]++
					ran = true
					break
				}
			}
			if !ran {
				kr.NotApplicable++
			}
			done++
			if opts.Progress != nil {
				opts.Progress(done, total)
			}
		}
		if kr.Wrong > 0 {
			res.Pass = false
		}
		res.Kinds = append(res.Kinds, kr)
	}
	return res, nil
}

// sglangJudge runs kvaudit's comparison and SGLang's check.
func sglangJudge(ctx context.Context, prod, cons []string) (*verify.Result, *verify.SGLangAudit, error) {
	res, err := verify.Compare(ctx, side.Input{Paths: prod}, side.Input{Paths: cons}, verify.CompareOptions{})
	if err != nil {
		return nil, nil, err
	}
	p, err := layout.OpenPaths(prod)
	if err != nil {
		return nil, nil, err
	}
	defer layout.CloseAll(p)
	c, err := layout.OpenPaths(cons)
	if err != nil {
		return nil, nil, err
	}
	defer layout.CloseAll(c)
	a, err := verify.CompareSGLang(p, c, verify.SGLangOptions{Diff: res.Diff, Threads: 1})
	return res, a, err
}

// sglangTrial copies the pair's consumer into dir, injects the fault into
// one rank's request, and judges; false when the fault cannot be placed in
// this pair.
func sglangTrial(ctx context.Context, sp sglangPair, k SGLangKind, rng *rand.Rand, dir string, kr *SGLangKindResult) (bool, error) {
	var cons []string
	for _, c := range sp.cons {
		dst := filepath.Join(dir, filepath.Base(c))
		if err := os.CopyFS(dst, os.DirFS(c)); err != nil {
			return false, err
		}
		cons = append(cons, dst)
	}
	defer os.RemoveAll(dir)
	rank := cons[rng.IntN(len(cons))]
	d, err := layout.Open(rank)
	if err != nil {
		return false, err
	}
	m := d.Manifest
	r := &m.Requests[rng.IntN(len(m.Requests))]
	segs, err := sglangsum.Segments(d, r, r.SGLang.StartSendIdx)
	if err != nil {
		d.Close()
		return false, err
	}
	items, err := sglangsum.Items(segs)
	d.Close()
	if err != nil {
		return false, err
	}
	pool := filepath.Join(rank, m.SGLang.File)
	data, err := os.ReadFile(pool)
	if err != nil {
		return false, err
	}
	f := sglangFault{m: m, r: r, items: items, rng: rng, data: data}
	first, ok := f.apply(k)
	if !ok {
		return false, nil
	}
	if k.Name == "sent-off-by-one" {
		v, _ := r.SGLang.Sent()
		r.SGLang.SetSent(v + 1)
		text, err := json.Marshal(m)
		if err != nil {
			return false, err
		}
		if err := os.WriteFile(filepath.Join(rank, "manifest.json"), text, 0o644); err != nil {
			return false, err
		}
	} else if err := os.WriteFile(pool, data, 0o644); err != nil {
		return false, err
	}
	res, a, err := sglangJudge(ctx, sp.prod, cons)
	if err != nil {
		return false, err
	}
	kr.Trials++
	kv := false
	for _, rv := range res.Diff.Requests {
		if rv.ID == r.ID && rv.Verdict == verify.Mismatch {
			kv = true
		}
	}
	sg, pinned := false, false
	for _, ra := range a.Requests {
		if ra.Request == r.ID && ra.TP == m.Parallel.TPRank && ra.Verdict == verify.Mismatch {
			sg = true
			pinned = first >= 0 && ra.Diff != nil && ra.Diff.FileOffset == first
		}
	}
	if kv {
		kr.KVAudit++
	}
	if sg {
		kr.SGLang++
	}
	if pinned {
		kr.Pinned++
	}
	if kv != k.KVAuditDetects {
		kr.Wrong++
		if len(kr.Failures) < 8 {
			kr.Failures = append(kr.Failures, fmt.Sprintf("%s: request %s rank tp %d: kvaudit %s", sp.name, r.ID, m.Parallel.TPRank, res.Diff.Verdict))
		}
	}
	return true, nil
}

// sglangFault places a fault in a request's stream.
type sglangFault struct {
	m     *layout.Manifest
	r     *layout.Request
	items []sglangsum.Item
	rng   *rand.Rand
	data  []byte
}

// offset is the file offset of byte off of item i.
func (f *sglangFault) offset(i int, off int) int64 {
	it := f.items[i]
	b := f.m.SGLang.Buffers[it.Buffer]
	return b.Offset + it.Index*b.ItemLen + int64(off)
}

// token is the request token of byte off of item i (items are per buffer,
// per page).
func (f *sglangFault) token(i, off int) int {
	npages := len(f.items) / len(f.m.SGLang.Buffers)
	ps := f.m.SGLang.PageSize
	slot := len(f.items[i].Data) / ps
	return f.r.SGLang.StartSendIdx + (i%npages)*ps + off/slot
}

// validByte picks a byte of a token (not a tail slot): item and offset.
func (f *sglangFault) validByte() (int, int, bool) {
	for range 64 {
		i := f.rng.IntN(len(f.items))
		off := f.rng.IntN(len(f.items[i].Data))
		if f.token(i, off) < f.r.NumTokens {
			return i, off, true
		}
	}
	return 0, 0, false
}

// apply changes f.data and returns the first file offset changed (-1 for
// none, or a fault of the sent value), false when the fault does not fit.
func (f *sglangFault) apply(k SGLangKind) (int64, bool) {
	m, rng := f.m, f.rng
	ps := m.SGLang.PageSize
	npages := len(f.items) / len(m.SGLang.Buffers)
	switch k.Name {
	case "bit-flip":
		i, off, ok := f.validByte()
		if !ok {
			return 0, false
		}
		at := f.offset(i, off)
		f.data[at] ^= 1 << rng.IntN(8)
		return at, true
	case "byte-noise":
		i, off, ok := f.validByte()
		if !ok {
			return 0, false
		}
		slot := len(f.items[i].Data) / ps
		n := 1 + rng.IntN(8)
		first := int64(-1)
		for j := off; j < min(off+n, (off/slot+1)*slot); j++ {
			at := f.offset(i, j)
			v := byte(rng.Uint32())
			if v == f.data[at] {
				v ^= 0x80
			}
			if first < 0 {
				first = at
			}
			f.data[at] = v
		}
		return first, true
	case "zero-page":
		i, _, ok := f.validByte()
		if !ok {
			return 0, false
		}
		at := f.offset(i, 0)
		first := int64(-1)
		for j := range f.items[i].Data {
			if f.data[at+int64(j)] != 0 && first < 0 && f.token(i, j) < f.r.NumTokens {
				first = at + int64(j)
			}
			f.data[at+int64(j)] = 0
		}
		return first, first >= 0
	case "page-swap":
		if npages < 2 {
			return 0, false
		}
		b := rng.IntN(len(m.SGLang.Buffers))
		x, y := rng.IntN(npages), rng.IntN(npages-1)
		if y >= x {
			y++
		}
		i, j := b*npages+min(x, y), b*npages+max(x, y)
		ai, aj := f.offset(i, 0), f.offset(j, 0)
		n := int64(len(f.items[i].Data))
		tmp := append([]byte(nil), f.data[ai:ai+n]...)
		copy(f.data[ai:ai+n], f.data[aj:aj+n])
		copy(f.data[aj:aj+n], tmp)
		return -1, true
	case "kv-swap":
		if m.SGLang.Pool != layout.SGLangMHAPool {
			return 0, false
		}
		half := len(m.SGLang.Buffers) / 2
		b, p := rng.IntN(half), rng.IntN(npages)
		i, j := b*npages+p, (b+half)*npages+p
		ai, aj := f.offset(i, 0), f.offset(j, 0)
		n := int64(len(f.items[i].Data))
		tmp := append([]byte(nil), f.data[ai:ai+n]...)
		copy(f.data[ai:ai+n], f.data[aj:aj+n])
		copy(f.data[aj:aj+n], tmp)
		return -1, true
	case "adler-null":
		for range 64 {
			i, off, ok := f.validByte()
			if !ok {
				return 0, false
			}
			slot := len(f.items[i].Data) / ps
			if off%slot+3 > slot {
				continue
			}
			d := byte(1 + rng.IntN(8))
			a, b, c := f.offset(i, off), f.offset(i, off+1), f.offset(i, off+2)
			if f.data[a] > 255-d || f.data[b] < 2*d || f.data[c] > 255-d {
				continue // a carry would break the pattern
			}
			f.data[a] += d
			f.data[b] -= 2 * d
			f.data[c] += d
			return a, true
		}
		return 0, false
	case "pm1-4":
		for range 64 {
			i, off, ok := f.validByte()
			if !ok {
				return 0, false
			}
			slot := len(f.items[i].Data) / ps
			if off%slot+4 > slot {
				continue
			}
			var at [4]int64
			var up [4]bool
			fits := true
			for j := range 4 {
				at[j], up[j] = f.offset(i, off+j), rng.IntN(2) == 0
				if up[j] && f.data[at[j]] == 0xff || !up[j] && f.data[at[j]] == 0 {
					fits = false // no carries: each byte moves by exactly 1
				}
			}
			if !fits {
				continue
			}
			for j := range 4 {
				if up[j] {
					f.data[at[j]]++
				} else {
					f.data[at[j]]--
				}
			}
			return at[0], true
		}
		return 0, false
	case "adler-65521":
		// Stream offsets: item i starts at the sum of the items before it.
		starts := make([]int64, len(f.items)+1)
		for i, it := range f.items {
			starts[i+1] = starts[i] + int64(len(it.Data))
		}
		total := starts[len(f.items)]
		if total <= 65521 {
			return 0, false
		}
		locate := func(s int64) (int, int) {
			i := 0
			for starts[i+1] <= s {
				i++
			}
			return i, int(s - starts[i])
		}
		for range 64 {
			s := rng.Int64N(total - 65521)
			i, off := locate(s)
			j, off2 := locate(s + 65521)
			if f.token(i, off) >= f.r.NumTokens || f.token(j, off2) >= f.r.NumTokens {
				continue
			}
			d := byte(1 + rng.IntN(8))
			a, b := f.offset(i, off), f.offset(j, off2)
			if f.data[a] > 255-d || f.data[b] < d {
				continue
			}
			f.data[a] += d
			f.data[b] -= d
			return a, true
		}
		return 0, false
	case "tail-write":
		for range 64 {
			i := rng.IntN(len(f.items))
			off := rng.IntN(len(f.items[i].Data))
			if f.token(i, off) < f.r.NumTokens {
				continue
			}
			at := f.offset(i, off)
			f.data[at] ^= byte(1 + rng.IntN(255))
			return at, true
		}
		return 0, false
	case "sent-off-by-one":
		_, ok := f.r.SGLang.Sent()
		return -1, ok
	}
	return 0, false
}
