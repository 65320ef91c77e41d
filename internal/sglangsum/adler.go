package sglangsum

import "hash/adler32"

// adlerMod is Adler-32's modulus, the largest prime below 2^16.
const adlerMod = 65521

// adlerMaxChunks bounds one call of the kernel (32 KiB): its uint32 lanes
// of prefix sums stay below 2^32 (at most 2040*C*(C-1)/2 per lane).
const adlerMaxChunks = 1024

// adler32Sum is zlib's Adler-32 of p (RFC 1950), as Go's hash/adler32
// computes it; on amd64 with AVX2 it runs a vectorised kernel that gives
// the same value. adler32Sum(nil) is 1.
func adler32Sum(p []byte) uint32 { return adlerUpdate(1, p) }

// adlerUpdate continues the Adler-32 value adler over p.
func adlerUpdate(adler uint32, p []byte) uint32 {
	if !adlerSIMD || len(p) < 64 {
		return adlerGeneric(adler, p)
	}
	a, b := uint64(adler&0xffff), uint64(adler>>16)
	for len(p) >= 32 {
		chunks := min(len(p)/32, adlerMaxChunks)
		n := uint64(32 * chunks)
		s, w := adlerBlocks(p, chunks)
		b = (b + n*a + w) % adlerMod
		a = (a + s) % adlerMod
		p = p[n:]
	}
	return adlerGeneric(uint32(b<<16|a), p)
}

// adlerGeneric continues adler over p with hash/adler32, the reference
// the kernel is tested against.
func adlerGeneric(adler uint32, p []byte) uint32 {
	if len(p) == 0 {
		return adler
	}
	if adler == 1 {
		return adler32.Checksum(p)
	}
	// hash/adler32 continues a state through its binary marshalling only;
	// combining with the value of p alone gives the same result.
	return adler32Combine(adler, adler32.Checksum(p), int64(len(p)))
}

// adler32Combine returns the Adler-32 value of the concatenation A||B from
// adler1 = Adler-32(A), adler2 = Adler-32(B) and len2 = len(B), as zlib's
// adler32_combine does (len2 >= 0). Writing A's value as (b1, a1) and B's
// as (b2, a2): the concatenation's A-sum is a1 + a2 - 1 and its B-sum is
// b1 + b2 + len2*(a1 - 1), modulo 65521 (docs/sglang.md). Go's
// hash/adler32 has no combine.
func adler32Combine(adler1, adler2 uint32, len2 int64) uint32 {
	if len2 < 0 {
		return 0xffffffff // zlib's answer to a negative length
	}
	n := uint64(len2 % adlerMod)
	a1, b1 := uint64(adler1&0xffff), uint64(adler1>>16)
	a2, b2 := uint64(adler2&0xffff), uint64(adler2>>16)
	a := (a1 + a2 + adlerMod - 1) % adlerMod
	b := (b1 + b2 + n*((a1+adlerMod-1)%adlerMod)) % adlerMod
	return uint32(b<<16 | a)
}
