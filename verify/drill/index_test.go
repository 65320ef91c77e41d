package drill

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIndex checks an index against a count of its entries' hashes: once
// is never wrong when it says a hash is held at most once, and shared
// gives exactly the entries of every hash held more than once.
func TestIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 7, 100, 5000, 200000} { // the last in 3 shares
		// Hashes from a small range, so that some are held twice or more.
		entries := make([]entry, n)
		held := map[uint64][]entry{}
		for i := range entries {
			entries[i] = entry{hash: r.Uint64N(uint64(2*n + 1)), ri: int32(i)}
			held[entries[i].hash] = append(held[entries[i].hash], entries[i])
		}
		x := newIndex(entries, 3)
		shared, single, told := 0, 0, 0
		for h := range uint64(2*n + 2) {
			want := held[h]
			if len(want) <= 1 {
				single++
			}
			if x.once(h) {
				told++
				if len(want) > 1 {
					t.Fatalf("n %d: hash %d held %d times, once says at most one", n, h, len(want))
				}
				continue
			}
			var got []entry
			x.shared(h, func(en entry) { got = append(got, en) })
			slices.SortFunc(got, func(a, b entry) int { return int(a.ri - b.ri) })
			if !slices.Equal(got, want) {
				t.Fatalf("n %d: hash %d: shared gives %v, want %v", n, h, got, want)
			}
			if len(want) > 1 {
				shared++
			}
		}
		if n >= 100 && shared == 0 {
			t.Fatalf("n %d: no hash held twice: the test checks nothing", n)
		}
		// The filter's point: it tells apart nearly every hash held once.
		if told < single*9/10 {
			t.Errorf("n %d: once tells apart %d of the %d hashes held at most once", n, told, single)
		}
	}
}

// TestAddCounters checks the sum of two words of 2-bit counters against
// each counter's min(a+b, 3).
func TestAddCounters(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		a, b := r.Uint64(), r.Uint64()
		got := addCounters(a, b)
		for i := range 32 {
			x, y := a>>(2*i)&3, b>>(2*i)&3
			if g := got >> (2 * i) & 3; g != min(x+y, 3) {
				t.Fatalf("counter %d: %d + %d gives %d", i, x, y, g)
			}
		}
	}
}
