package checksum

import "github.com/kvaudit/kvaudit/layout"

// kvaudit's mix check (docs/spec.md §14) is a second, independent check
// per (group, block position, replica key), computed in the same pass as
// vLLM's sums: the sum over every 8-byte word x of a slice of
// Mix(x ^ MixKey(slice, j)). It adds up over slices, ranks, PP stages and
// consecutive blocks exactly as vLLM's checksum does, but a keyed
// bijection in place of the odd weights leaves it no structured blind
// spot (vLLM's misses every even number of top-bit changes).

// MixGamma is splitmix64's increment, 2^64 divided by the golden ratio
// (odd). Consecutive words of a slice have keys MixGamma apart.
const MixGamma uint64 = 0x9E3779B97F4A7C15

// mixGamma is MixGamma as a variable, for products that wrap.
var mixGamma = MixGamma

// mixD are Mix's round multipliers: the odd 32-bit constants 0x9E3779B9
// (golden ratio), 0x85EBCA6B and 0xC2B2AE35 (murmur3's fmix32) and
// 0xE7037ED1 (wyhash) minus one, so all even.
var mixD = [4]uint64{0x9E3779B8, 0x85EBCA6A, 0xC2B2AE34, 0xE7037ED0}

// fmix64 is murmur3's 64-bit finaliser (MixKey's slice term only).
func fmix64(z uint64) uint64 {
	z ^= z >> 33
	z *= 0xff51afd7ed558ccd
	z ^= z >> 33
	z *= 0xc4ceb9fe1a85ec53
	return z ^ z>>33
}

// MixKey returns the key of word j of slice s:
// MixGamma * (s*2^32 + r(s) + j) mod 2^64 with r(s) = fmix64(s+1) >> 33,
// and s = layer*65536 + head (or + row for a state row, + tp_rank for a
// state group without a TP split). Keys are distinct for s < 2^32 and
// j < 2^31.
func MixKey(s, j uint64) uint64 {
	return MixKeyOf(PublishedMixKey, s, j)
}

// PublishedMixKey is the run key 0, under which MixKeyOf is MixKey: the
// published key, that records, payloads and checksum -o json carry (a
// check computed elsewhere, later, must be computed under it). A pattern
// precomputed against it can cancel in vLLM's checksum and the mix check
// both; a random run key (when kvaudit computes both sides itself) leaves
// none (docs/spec.md §14).
const PublishedMixKey uint64 = 0

// MixKeyOf returns the key of word j of slice s under the run key k
// (docs/spec.md §14):
// MixGamma * (s*2^32 + r_k(s) + j) + fmix64(k) mod 2^64 with
// r_k(s) = fmix64((s+1) ^ k) >> 33. Under k = PublishedMixKey it is
// MixKey (fmix64(0) = 0). For every k, keys are distinct for s < 2^32 and
// j < 2^31 (an odd multiple, then a translation), and consecutive words of
// a slice have keys MixGamma apart, so the engines' kernels step keys as
// they do under the published key: only each slice's word-0 key changes.
func MixKeyOf(k, s, j uint64) uint64 {
	return MixGamma*(s<<32+fmix64((s+1)^k)>>33) + j*MixGamma + fmix64(k)
}

// Mix is the mix check's bijection of uint64: four rounds
// z ^= lo32(z)*D (a full 32x32->64 product) with the 32-bit halves swapped
// after rounds 0 and 2 and z ^= z>>32 after round 1. D is even, so bit k
// of lo32(z)*D depends only on bits below k of lo32(z): a round is
// invertible bit by bit from the bottom, and so is Mix.
func Mix(z uint64) uint64 {
	z ^= (z & 0xffffffff) * mixD[0]
	z = z<<32 | z>>32
	z ^= (z & 0xffffffff) * mixD[1]
	z ^= z >> 32
	z ^= (z & 0xffffffff) * mixD[2]
	z = z<<32 | z>>32
	return z ^ (z&0xffffffff)*mixD[3]
}

// MixSlice returns the slice index s of MixKey for global head (or state
// row) head of the cache: layer*65536 + head.
func MixSlice(c *layout.LayerView, head int) uint64 {
	return uint64(c.Number)*layout.MaxHeadsPerLayer + uint64(head)
}

// cellWords returns the 8-byte words of one cell in the mix check: the
// cell's bytes in logical order, the last word zero-padded (a state row
// of 2- or 4-byte elements packs them; an attention cell is its pieces).
func cellWords(c *layout.LayerView) int { return (c.Cells.CellBytes + 7) / 8 }

// A mixEngine is an Engine that honours ckplan.Plan.Mix: in the same pass over
// the bytes it also adds each row's mix check. Engines that do not (the
// CUDA runner) leave the mix check out of what they compute; records and
// payloads then carry vLLM's checksum only.
type mixEngine interface {
	Engine
	// Mixes reports whether the engine fills the mix check.
	Mixes() bool
}

// EngineMixes says whether e fills ckplan.Plan.Mix.
func EngineMixes(e Engine) bool {
	m, ok := e.(mixEngine)
	return ok && m.Mixes()
}
