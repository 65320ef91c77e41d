package checksum

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestSIMDMatchesGeneric compares the SIMD kernel with the generic sums
// on every run length it takes, for token-major and head-major runs,
// several heads, runs per head, strides and first pieces.
func TestSIMDMatchesGeneric(t *testing.T) {
	if !simdAvailable {
		t.Skip("no SIMD kernel on this machine")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	data := make([]byte, 1<<17)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	s := newScratch(6)
	for n := 32; n <= 2048; n += 32 {
		for _, H := range []int{1, 2, 5} {
			for _, R := range []int{1, 3} {
				for _, headsInner := range []bool{true, false} {
					stride := int64(n) + 8*int64(rng.IntN(3))
					off := int64(rng.IntN(64))
					if off+int64(R*H)*stride > int64(len(data)) {
						continue
					}
					P := uint64(n/8) * uint64(1+rng.IntN(3)) // pieces per token
					j0 := uint64(rng.IntN(1000))
					k := &walk{simd: true, w: 8, P: P, W: P, mixInRuns: true, keys: make([]uint64, H+1)}
					for h := range k.keys {
						k.keys[h] = rng.Uint64()
					}
					h0 := rng.IntN(2) // the first head's index in k.keys
					for _, mix := range []bool{false, true} {
						s.mixOn, s.mix, s.jbase = mix, 0, uint64(rng.IntN(100))
						xa, ya := make([]uint64, H), make([]uint64, H)
						if !s.simdAccum(k, data, off, stride, n, R, headsInner, j0, h0, xa, ya) {
							t.Fatalf("n %d: the kernel declined", n)
						}
						var M uint64
						for h := range H {
							var A, Y uint64
							for r := range R {
								i := r*H + h
								if !headsInner {
									i = h*R + r
								}
								a := off + int64(i)*stride
								x, b, m := sumABMix(data[a:a+int64(n)], s.key(k, h0+h, j0+uint64(r)*P))
								A += x
								Y += (j0+uint64(r)*P)*x + b
								M += m
							}
							if xa[h] != A || ya[h] != Y {
								t.Fatalf("n %d H %d R %d heads inner %v mix %v head %d: simd (%x, %x), generic (%x, %x)", n, H, R, headsInner, mix, h, xa[h], ya[h], A, Y)
							}
						}
						if mix && s.mix != M {
							t.Fatalf("n %d H %d R %d heads inner %v: simd mix %x, generic %x", n, H, R, headsInner, s.mix, M)
						}
					}
				}
			}
		}
	}
}

// TestSumsMatchDefinition checks sumAB, sumAB32, sumAB16, partialAB,
// sumABMix and mixWords against the definition on every length up to 300 bytes and every start
// within a piece.
func TestSumsMatchDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	data := make([]byte, 300)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, w := range []int{2, 4, 8} {
		for q := range w {
			for n := 0; n <= len(data); n++ {
				p := data[:n]
				// The definition: byte i sits at byte q+i of piece (q+i)/w
				// counted from the first piece the run touches.
				var A, B uint64
				for i, b := range p {
					x := uint64(b) << (8 * uint((q+i)%w))
					A += x
					B += uint64((q+i)/w) * x
				}
				a, b := partialAB(p, q, w)
				if a != A || b != B {
					t.Fatalf("partialAB w %d q %d n %d: (%x, %x), want (%x, %x)", w, q, n, a, b, A, B)
				}
				if q != 0 || n%w != 0 {
					continue
				}
				var sum func([]byte) (uint64, uint64)
				switch w {
				case 8:
					sum = sumAB
				case 4:
					sum = sumAB32
				default:
					sum = sumAB16
				}
				if a, b := sum(p); a != A || b != B {
					t.Fatalf("sum w %d n %d: (%x, %x), want (%x, %x)", w, n, a, b, A, B)
				}
				if w != 8 {
					continue
				}
				key := rng.Uint64()
				var H uint64
				for k := range n / 8 {
					H += Mix(binary.LittleEndian.Uint64(p[8*k:]) ^ (key + uint64(k)*MixGamma))
				}
				if a, b, h := sumABMix(p, key); a != A || b != B || h != H {
					t.Fatalf("sumABMix n %d: (%x, %x, %x), want (%x, %x, %x)", n, a, b, h, A, B, H)
				}
				if h := mixWords(p, key); h != H {
					t.Fatalf("mixWords n %d: %x, want %x", n, h, H)
				}
			}
		}
	}
}
