//go:build amd64 && !purego

package drill

import "golang.org/x/sys/cpu"

// useSIMD says whether diffWords uses the AVX2 kernel of diff_amd64.s;
// tests turn it off to compare it with the generic loop.
var useSIMD = cpu.X86.HasAVX2 && cpu.X86.HasPOPCNT && cpu.X86.HasBMI1

// diffAcc is the AVX2 kernel's accumulators, by lane of 4 words: the OR
// of the first run's words, the sums of each run's words, the popcount
// of their XOR; then the equal bytes, the offset of the first differing
// byte (-1 while none) and the offset of the next byte compared.
type diffAcc struct {
	or, sumA, sumB, bits [4]uint64
	equal                uint64
	first, at            int64
}

// diffAVX2 is implemented in diff_amd64.s.
//
//go:noescape
func diffAVX2(a, b *byte, n int, acc *diffAcc)

// diffSIMD adds the differences of a and b (len(a) a positive multiple of
// 32, b as long) to d.
func diffSIMD(a, b []byte, d *wordDiff) {
	_ = b[len(a)-1]
	acc := diffAcc{first: -1, at: int64(d.at)}
	diffAVX2(&a[0], &b[0], len(a), &acc)
	acc.add(d, len(a))
}

// add adds what the accumulators of n bytes hold to d.
func (acc *diffAcc) add(d *wordDiff, n int) {
	for i := range 4 {
		d.or |= acc.or[i]
		d.sumA += acc.sumA[i]
		d.sumB += acc.sumB[i]
		d.bits += int(acc.bits[i])
	}
	d.bytes += n - int(acc.equal)
	if d.first < 0 && acc.first >= 0 {
		d.first = int(acc.first)
	}
	d.at = int(acc.at)
}

// diffSegsSIMD compares the cells at x of a and y of b cut by segs, each
// a whole number of 32-byte steps at a logical offset that is a whole
// number of words, with one set of accumulators.
func diffSegsSIMD(a []byte, x int64, b []byte, y int64, segs []seg, d *wordDiff) {
	acc := diffAcc{first: -1}
	n := 0
	for _, s := range segs {
		p := a[x+s.a : x+s.a+int64(s.n)]
		r := b[y+s.b : y+s.b+int64(s.n)]
		_ = r[len(p)-1]
		acc.at = int64(s.q)
		diffAVX2(&p[0], &r[0], len(p), &acc)
		n += len(p)
	}
	acc.add(d, n)
}

// diffItemsAVX2 is implemented in diff_amd64.s.
//
//go:noescape
func diffItemsAVX2(a, b *byte, n, sa, sb, count, q int, items *itemDiff, out *tokDiff)

// maxTokenRun is the longest run of one item diffItemsAVX2 takes (its
// byte lanes count 8 bits and one equal byte a step, 248 steps at most).
const maxTokenRun = 248 * 32

// diffItemsSIMD is diffItems with the AVX2 kernel (segs.simd, each
// segment at most maxTokenRun bytes), adding to d.items[:count] (whose
// first must be -1).
func diffItemsSIMD(a []byte, x, sa int64, b []byte, y, sb int64, count int, segs []seg, d *itemsDiff) {
	for _, s := range segs {
		// The kernel reads up to the last item's bytes.
		_ = a[x+s.a+int64(count-1)*sa+int64(s.n)-1]
		_ = b[y+s.b+int64(count-1)*sb+int64(s.n)-1]
		var out tokDiff
		diffItemsAVX2(&a[x+s.a], &b[y+s.b], s.n, int(sa), int(sb), count, s.q, &d.items[0], &out)
		d.differs |= out.differs
		d.nonzero |= out.nonzero
	}
}
