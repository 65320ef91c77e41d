package transfer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// randomIvals returns sorted, disjoint, non-touching intervals in [0, 64).
func randomIvals(rng *rand.Rand) []ival {
	var out []ival
	at := uint64(rng.IntN(4))
	for at < 60 && rng.IntN(6) > 0 {
		lo := at + uint64(rng.IntN(4))
		hi := lo + 1 + uint64(rng.IntN(6))
		if hi > 64 {
			break
		}
		out = append(out, ival{lo, hi})
		at = hi + 1
	}
	return out
}

// TestSubtract: subtract gives the bytes of [lo, hi) no interval covers,
// as maximal runs in order, as a byte-by-byte model does.
func TestSubtract(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for trial := range 2000 {
		covered := randomIvals(rng)
		lo := uint64(rng.IntN(66))
		hi := lo + uint64(rng.IntN(66-int(lo)+1))
		var want []ival
		for b := lo; b < hi; b++ {
			in := slices.ContainsFunc(covered, func(c ival) bool { return c.lo <= b && b < c.hi })
			switch {
			case in:
			case len(want) > 0 && want[len(want)-1].hi == b:
				want[len(want)-1].hi++
			default:
				want = append(want, ival{b, b + 1})
			}
		}
		var got []ival
		subtract(lo, hi, covered, func(l, h uint64) { got = append(got, ival{l, h}) })
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: subtract [%d, %d) minus %v = %v, want %v", trial, lo, hi, covered, got, want)
		}
	}
}

// TestOverlaps: overlaps says whether [lo, hi) (not empty) shares a byte with an
// interval, as a byte-by-byte model does.
func TestOverlaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 2000 {
		iv := randomIvals(rng)
		lo := uint64(rng.IntN(66))
		hi := lo + 1 + uint64(rng.IntN(66-int(lo)))
		want := false
		for b := lo; b < hi; b++ {
			if slices.ContainsFunc(iv, func(c ival) bool { return c.lo <= b && b < c.hi }) {
				want = true
			}
		}
		if got := overlaps(iv, lo, hi); got != want {
			t.Fatalf("trial %d: overlaps(%v, %d, %d) = %v, want %v", trial, iv, lo, hi, got, want)
		}
	}
}
