package checksum_test

import (
	"context"
	"math/big"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
)

// An implementation of docs/spec.md §14 of its own, with big integers and
// the rounds written on (lo, hi) halves as the document explains them,
// sharing no code with the engines: the golden vector comes from it.

var two64 = new(big.Int).Lsh(big.NewInt(1), 64)

func mod64(x *big.Int) *big.Int { return x.Mod(x, two64) }

// refFmix64 is murmur3's fmix64 as docs/spec.md §14 writes it.
func refFmix64(x uint64) uint64 {
	z := new(big.Int).SetUint64(x)
	for _, c := range []uint64{0xff51afd7ed558ccd, 0xc4ceb9fe1a85ec53} {
		z.Xor(z, new(big.Int).Rsh(z, 33))
		mod64(z.Mul(z, new(big.Int).SetUint64(c)))
	}
	return z.Xor(z, new(big.Int).Rsh(z, 33)).Uint64()
}

// refKey is K(s, j) = G * (s*2^32 + r(s) + j) mod 2^64.
func refKey(s, j uint64) uint64 {
	v := new(big.Int).Lsh(new(big.Int).SetUint64(s), 32)
	v.Add(v, new(big.Int).SetUint64(refFmix64(s+1)>>33)).Add(v, new(big.Int).SetUint64(j))
	return mod64(v.Mul(v, new(big.Int).SetUint64(0x9e3779b97f4a7c15))).Uint64()
}

// refKeyOf is K_k(s, j) = G * (s*2^32 + r_k(s) + j) + fmix64(k) mod 2^64,
// r_k(s) = fmix64((s+1) xor k) >> 33: the key under the run key k.
func refKeyOf(k, s, j uint64) uint64 {
	v := new(big.Int).Lsh(new(big.Int).SetUint64(s), 32)
	v.Add(v, new(big.Int).SetUint64(refFmix64((s+1)^k)>>33)).Add(v, new(big.Int).SetUint64(j))
	v.Mul(v, new(big.Int).SetUint64(0x9e3779b97f4a7c15))
	return mod64(v.Add(v, new(big.Int).SetUint64(refFmix64(k)))).Uint64()
}

// refMix is Mix on the halves: a round maps (lo, hi) to
// (lo ^ lo(lo*D), hi ^ hi(lo*D)); rotl(z, 32) swaps them; z ^= z >> 32 is
// lo ^= hi.
func refMix(x uint64) uint64 {
	lo, hi := x&0xffffffff, x>>32
	round := func(d uint64) {
		p := new(big.Int).Mul(new(big.Int).SetUint64(lo), new(big.Int).SetUint64(d)).Uint64()
		lo ^= p & 0xffffffff
		hi ^= p >> 32
	}
	round(0x9e3779b8)
	lo, hi = hi, lo
	round(0x85ebca6a)
	lo ^= hi
	round(0xc2b2ae34)
	lo, hi = hi, lo
	round(0xe7037ed0)
	return hi<<32 | lo
}

// refSliceMix is the mix check of one slice of the worked example at a
// position, from refKey and refMix.
func refSliceMix(v goldenVector, pos, L, h int) uint64 {
	W := v.cellBytes / 8
	var sum uint64
	for tok := pos * v.blockSize; tok < min((pos+1)*v.blockSize, v.numTokens); tok++ {
		for p := range W {
			sum += refMix(goldenPiece(L, h, tok, p) ^ refKey(uint64(L*65536+h), uint64(tok*W+p)))
		}
	}
	return sum
}

// TestMixMatchesIndependent: MixKey and Mix agree with the independent
// implementation on random inputs and at the edges.
func TestMixMatchesIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	xs := []uint64{0, 1, 1 << 31, 1 << 32, 1 << 63, ^uint64(0)}
	for range 2000 {
		xs = append(xs, r.Uint64())
	}
	for _, x := range xs {
		s, j := x>>32, x&(1<<31-1)
		if got, want := checksum.MixKey(s, j), refKey(s, j); got != want {
			t.Fatalf("MixKey(%d, %d) = %#x, want %#x", s, j, got, want)
		}
		if got := checksum.MixKeyOf(checksum.PublishedMixKey, s, j); got != refKey(s, j) {
			t.Fatalf("MixKeyOf(published, %d, %d) = %#x, want %#x", s, j, got, refKey(s, j))
		}
		k := r.Uint64()
		if got, want := checksum.MixKeyOf(k, s, j), refKeyOf(k, s, j); got != want {
			t.Fatalf("MixKeyOf(%#x, %d, %d) = %#x, want %#x", k, s, j, got, want)
		}
		if got, want := checksum.Mix(x), refMix(x); got != want {
			t.Fatalf("Mix(%#x) = %#x, want %#x", x, got, want)
		}
	}
}

var (
	mixSliceRow = regexp.MustCompile(`^\| (\d+) \| \((\d+), (\d+)\) \| (\d+) \| (0x[0-9a-f]{16}) \|$`)
	mixChecks   = regexp.MustCompile("`v\\(0\\) = (0x[0-9a-f]{16})`, `v\\(1\\) = (0x[0-9a-f]{16})`")
	mixFirst    = regexp.MustCompile("`r\\(0\\) =\\s+(\\d+)`, `K\\(0, 0\\) = (0x[0-9a-f]{16})`.*`Mix\\(1100 \\^ K\\(0, 0\\)\\) = (0x[0-9a-f]{16})`")
)

// mixSpecSection returns docs/spec.md's worked example of the mix check.
func mixSpecSection(t *testing.T) string {
	t.Helper()
	_, sec, ok := strings.Cut(readSpecDoc(t), "\n### Worked example of the mix check\n")
	if !ok {
		t.Fatalf("%s: no worked example of the mix check", specDoc)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	return sec
}

// TestMixSpecDoc recomputes every number of docs/spec.md §14's worked
// example with the independent implementation: the first key and term,
// each slice's part, the checks (also testdata/golden/spec1.txt's mix).
func TestMixSpecDoc(t *testing.T) {
	sec := mixSpecSection(t)
	v := readGolden(t)
	hex := func(s string) uint64 {
		x, err := layout.ParseHex64(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	m := mixFirst.FindStringSubmatch(strings.Join(strings.Fields(sec), " "))
	if m == nil {
		t.Fatalf("%s: the mix check's example does not give r(0), K(0, 0) and its first term", specDoc)
	}
	if r0, _ := strconv.ParseUint(m[1], 10, 64); r0 != refFmix64(1)>>33 || hex(m[2]) != refKey(0, 0) || hex(m[3]) != refMix(1100^refKey(0, 0)) {
		t.Errorf("r(0), K(0, 0), Mix(1100 ^ K(0, 0)): the document says %s, %s, %s; the definition gives %d, %#x, %#x",
			m[1], m[2], m[3], refFmix64(1)>>33, refKey(0, 0), refMix(1100^refKey(0, 0)))
	}
	sums := make([]uint64, 2)
	rows := 0
	for line := range strings.Lines(sec) {
		r := mixSliceRow.FindStringSubmatch(strings.TrimSpace(line))
		if r == nil {
			continue
		}
		rows++
		pos, _ := strconv.Atoi(r[1])
		L, _ := strconv.Atoi(r[2])
		h, _ := strconv.Atoi(r[3])
		s, _ := strconv.Atoi(r[4])
		if s != L*65536+h {
			t.Errorf("slice (%d, %d): s = %d, want %d", L, h, s, L*65536+h)
		}
		if got := refSliceMix(v, pos, L, h); got != hex(r[5]) {
			t.Errorf("position %d slice (%d, %d): the document says %s, the definition gives %#016x", pos, L, h, r[5], got)
		}
		sums[pos] += hex(r[5])
	}
	if rows != 8 {
		t.Fatalf("%s: %d slice rows in the mix check's example, want 8", specDoc, rows)
	}
	c := mixChecks.FindStringSubmatch(sec)
	if c == nil {
		t.Fatalf("%s: the mix check's example does not give v(0) and v(1)", specDoc)
	}
	doc := []uint64{hex(c[1]), hex(c[2])}
	if !slices.Equal(sums, doc) || !slices.Equal(doc, v.mix) {
		t.Errorf("the slices add up to %x, the document says %x, testdata/golden/spec1.txt %x", sums, doc, v.mix)
	}
}

// TestMixSpecDocEngines: the engines give the document's mix checks from
// the worked example written as a dump, in the same pass as vLLM's
// checksum (ckplan.Plan.Mix beside ckplan.Plan.Slopes).
func TestMixSpecDocEngines(t *testing.T) {
	v := readGolden(t)
	path := writeGoldenDump(t, v)
	d, err := layout.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, e := range []checksum.Engine{checksum.Reference{}, checksum.Fast{}, checksum.Fast{Threads: 2, ChunkBytes: 1}} {
		if !checksum.EngineMixes(e) {
			t.Fatalf("%s engine does not fill the mix check", e.Name())
		}
		plan, _, err := checksum.NewPlan(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		plan.Slopes, plan.Mix = true, true
		out := make([]uint64, 3*plan.Outputs)
		if err := e.Run(context.Background(), plan, out); err != nil {
			t.Fatal(err)
		}
		if got := out[2*plan.Outputs:]; !slices.Equal(got, v.mix) || !slices.Equal(out[:plan.Outputs], v.checksums) {
			t.Errorf("%s engine: checks %x, mix %x; want %x, %x", e.Name(), out[:plan.Outputs], got, v.checksums, v.mix)
		}
	}
}

var mixKeyed = regexp.MustCompile("run key `k = (0x[0-9a-f]{16})`, `K_k\\(0, 0\\) = (0x[0-9a-f]{16})`, and the mix checks are `v_k\\(0\\) = (0x[0-9a-f]{16})`, `v_k\\(1\\) = (0x[0-9a-f]{16})`")

// TestMixSpecDocKeyed: docs/spec.md §14's example under a run key, from
// the independent implementation (refKeyOf) and from every engine
// (ckplan.Plan.MixKey), which differ from the published key's.
func TestMixSpecDocKeyed(t *testing.T) {
	sec := mixSpecSection(t)
	m := mixKeyed.FindStringSubmatch(strings.Join(strings.Fields(sec), " "))
	if m == nil {
		t.Fatalf("%s: the mix check's example gives no run key's checks", specDoc)
	}
	var doc [4]uint64
	for i := range doc {
		x, err := layout.ParseHex64(m[i+1])
		if err != nil {
			t.Fatal(err)
		}
		doc[i] = x
	}
	k := doc[0]
	v := readGolden(t)
	W := v.cellBytes / 8
	want := make([]uint64, 2)
	for pos := range want {
		for L := range 2 {
			for h := range 2 {
				for tok := pos * v.blockSize; tok < min((pos+1)*v.blockSize, v.numTokens); tok++ {
					for p := range W {
						want[pos] += refMix(goldenPiece(L, h, tok, p) ^ refKeyOf(k, uint64(L*65536+h), uint64(tok*W+p)))
					}
				}
			}
		}
	}
	if refKeyOf(k, 0, 0) != doc[1] || !slices.Equal(want, doc[2:]) {
		t.Errorf("the document says K_k(0, 0) = %#x, v_k = %x; the definition gives %#x, %x", doc[1], doc[2:], refKeyOf(k, 0, 0), want)
	}
	if slices.Equal(want, v.mix) {
		t.Fatalf("the run key's checks are the published key's: %x", want)
	}
	path := writeGoldenDump(t, v)
	d, err := layout.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, e := range []checksum.Engine{checksum.Reference{}, checksum.Fast{}, checksum.Fast{Threads: 2, ChunkBytes: 1}} {
		plan, _, err := checksum.NewPlan(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		plan.Slopes, plan.Mix, plan.MixKey = true, true, k
		out := make([]uint64, 3*plan.Outputs)
		if err := e.Run(context.Background(), plan, out); err != nil {
			t.Fatal(err)
		}
		if got := out[2*plan.Outputs:]; !slices.Equal(got, want) || !slices.Equal(out[:plan.Outputs], v.checksums) {
			t.Errorf("%s engine under key %#x: checks %x, mix %x; want %x, %x", e.Name(), k, out[:plan.Outputs], got, v.checksums, want)
		}
	}
}
