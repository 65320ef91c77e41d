package drill

import (
	"math/rand/v2"
	"testing"
)

// TestDiffWordsSIMD compares the SIMD kernel with the generic loop on
// random runs of every length up to 300 words' worth, equal, nearly equal
// and unrelated, and at every alignment.
func TestDiffWordsSIMD(t *testing.T) {
	if !useSIMD {
		t.Skip("no SIMD kernel on this machine or build")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 2600)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for n := 0; n <= 2400; n += 8 {
		for _, kind := range []string{"equal", "flips", "random", "zero"} {
			a := buf[n%40 : n%40+n]
			b := make([]byte, n)
			switch kind {
			case "equal":
				copy(b, a)
			case "flips":
				copy(b, a)
				for range 3 {
					if n > 0 {
						b[rng.IntN(n)] ^= 1 << rng.IntN(8)
					}
				}
			case "random":
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
			case "zero":
				a = make([]byte, n)
				copy(b, buf[:n])
			}
			got, want := wordDiff{first: -1}, wordDiff{first: -1}
			diffWords(a, b, &got)
			diffWordsGeneric(a, b, &want)
			if got != want {
				t.Fatalf("%d bytes, %s: simd %+v, generic %+v", n, kind, got, want)
			}
		}
	}
}

// TestDiffWordsGeneric checks the generic loop against a byte by byte
// count.
func TestDiffWordsGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 200 {
		n := 8 * rng.IntN(40)
		a, b := make([]byte, n), make([]byte, n)
		for i := range a {
			a[i] = byte(rng.Uint32())
			b[i] = a[i]
			if rng.IntN(3) == 0 {
				b[i] ^= byte(rng.Uint32())
			}
		}
		d := wordDiff{first: -1}
		diffWordsGeneric(a, b, &d)
		bits, bytes, or, first := 0, 0, uint64(0), -1
		var sa, sb uint64
		for i := range a {
			x := a[i] ^ b[i]
			if x != 0 && first < 0 {
				first = i
			}
			for k := range 8 {
				bits += int(x >> k & 1)
			}
			if x != 0 {
				bytes++
			}
			or |= uint64(a[i])
			sa += uint64(a[i]) << (8 * (i % 8))
			sb += uint64(b[i]) << (8 * (i % 8))
		}
		if d.bits != bits || d.bytes != bytes || (d.or != 0) != (or != 0) || d.sumA != sa || d.sumB != sb || d.first != first || d.at != n {
			t.Fatalf("%d bytes: %+v, want bits %d bytes %d sums %#x %#x first %d", n, d, bits, bytes, sa, sb, first)
		}
	}
}

// TestDiffItemsSIMD compares the run-of-cells kernel with the cell by cell
// loop on random cells of two segments, with strides of either kind of
// interleaving, equal and differing cells, zero consumer cells, and 1 to
// 32 items.
func TestDiffItemsSIMD(t *testing.T) {
	if !useSIMD {
		t.Skip("no SIMD kernel on this machine or build")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	segs := []seg{{a: 0, b: 64, q: 0, n: 64}, {a: 96, b: 0, q: 64, n: 32}}
	for count := 1; count <= 32; count++ {
		for trial := range 8 {
			sa, sb := int64(160+32*rng.IntN(3)), int64(128+16*rng.IntN(3))
			a := make([]byte, int(sa)*count+64)
			b := make([]byte, int(sb)*count+64)
			for i := range a {
				a[i] = byte(rng.Uint32())
			}
			for i := range count {
				// cell i: equal, flipped, random or zero
				for _, s := range segs {
					ca, cb := a[int64(i)*sa+s.a:][:s.n], b[int64(i)*sb+s.b:][:s.n]
					switch (i + trial) % 4 {
					case 0:
						copy(cb, ca)
					case 1:
						copy(cb, ca)
						cb[rng.IntN(s.n)] ^= 1
					case 2:
						for k := range cb {
							cb[k] = byte(rng.Uint32())
						}
					case 3:
						clear(ca)
						for k := range cb {
							cb[k] = byte(rng.Uint32())
						}
					}
				}
			}
			var got, want itemsDiff
			got.reset(count)
			want.reset(count)
			diffItems(a, 0, sa, b, 0, sb, count, segList{segs: segs, simd: true}, &got)
			diffItems(a, 0, sa, b, 0, sb, count, segList{segs: segs}, &want)
			if got != want {
				t.Fatalf("%d cells, trial %d: simd %+v, cell by cell %+v", count, trial, got, want)
			}
		}
	}
}

// TestFoldHint: flipped bits add up; other hints fold only with
// themselves.
func TestFoldHint(t *testing.T) {
	for _, tc := range []struct {
		hints []string
		want  string
	}{
		{[]string{"1 bit flipped", "2 bits flipped"}, "3 bits flipped"},
		{[]string{"1 bit flipped"}, "1 bit flipped"},
		{[]string{"zeroed", "zeroed"}, "zeroed"},
		{[]string{"zeroed", "1 bit flipped"}, ""},
		{[]string{"1 bit flipped", "zeroed"}, ""},
		{[]string{"holds the block of position 3", "holds the block of position 4"}, ""},
		{[]string{"01 bit flipped", "01 bit flipped"}, "01 bit flipped"},
		{nil, ""},
	} {
		if got := FoldHint(tc.hints...); got != tc.want {
			t.Errorf("FoldHint(%q) = %q, want %q", tc.hints, got, tc.want)
		}
	}
}
