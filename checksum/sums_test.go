package checksum

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
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

// TestStateRowsMatchDefinition: the state rows' word loop (stateRowWords)
// and, where the machine has it, the SIMD kernel with its combination give
// each row's A and B as sumAB16 and sumAB32 do and its mix check as the
// row's zero-padded words do, for every length up to 300 bytes (the
// kernel: multiples of 32 up to its limit) and several rows.
func TestStateRowsMatchDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	data := make([]byte, 40<<10)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	want := func(p []byte, w int, key uint64) (A, B, H uint64) {
		if w == 2 {
			A, B = sumAB16(p)
		} else {
			A, B = sumAB32(p)
		}
		padded := append(slices.Clone(p), make([]byte, (8-len(p)%8)%8)...)
		return A, B, mixWords(padded, key)
	}
	for _, w := range []int{2, 4} {
		for n := w; n <= 300; n += w {
			key := rng.Uint64()
			a, b, h := stateRowWords(data[:n], w, key, true)
			if A, B, H := want(data[:n], w, key); a != A || b != B || h != H {
				t.Fatalf("stateRowWords w %d n %d: (%x, %x, %x), want (%x, %x, %x)", w, n, a, b, h, A, B, H)
			}
		}
		if !simdAvailable {
			continue
		}
		consts := stateKernelConsts(w)
		for _, n := range []int{32, 64, 96, 512, 1024, 4096, maxStateRow2} {
			for _, rows := range []int{1, 3, 4, 9} {
				stride := int64(n + 8*rng.IntN(3))
				if int64(rows)*stride > int64(len(data)) || !stateRowsSIMDFits(n, w) {
					continue
				}
				keys := make([]uint64, rows)
				for i := range keys {
					keys[i] = rng.Uint64()
				}
				m0 := rng.Uint64() | 1
				var acc [24]uint64
				var hsum [4]uint64
				stateRowsSIMD(data, 0, stride, n, rows, true, &acc, keys, &consts, &hsum)
				var X, Y, H uint64
				for r := range rows {
					p := data[int64(r)*stride : int64(r)*stride+int64(n)]
					A, B, h := want(p, w, keys[r])
					m := m0 + 2*uint64(r)
					X += m * A
					Y += m * B
					H += h
				}
				if x, y := stateTotals(&acc, uint64(rows), uint64(n/32), w, m0); x != X || y != Y {
					t.Fatalf("kernel w %d n %d rows %d: (%x, %x), want (%x, %x)", w, n, rows, x, y, X, Y)
				}
				var plain [24]uint64
				var none [4]uint64
				stateRowsSIMD(data, 0, stride, n, rows, false, &plain, keys, &consts, &none)
				if plain != acc || none != [4]uint64{} {
					t.Fatalf("kernel w %d n %d rows %d without the mix check: sums %x, mix %x; want %x, none", w, n, rows, plain, none, acc)
				}
				if got := hsum[0] + hsum[1] + hsum[2] + hsum[3]; got != H {
					t.Fatalf("kernel w %d n %d rows %d: mix %x, want %x", w, n, rows, got, H)
				}
			}
		}
	}
}

// TestRowWordsModes: the short rows' kernel, each mode (contiguous rows
// of any length up to 64 bytes, 2- and 4-byte elements in runs of one
// element, fewer elements than a word holds), against the word loop on
// each row's logical bytes.
func TestRowWordsModes(t *testing.T) {
	if !simdAvailable {
		t.Skip("no SIMD kernel on this machine")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	data := make([]byte, 1<<16)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, w := range []int{2, 4} {
		consts := rowKernelConsts(w)
		koff := rng.Uint64()
		for l := range 4 {
			consts[32+l] = koff
		}
		for _, rows := range []int{4, 8, 20} {
			keys := make([]uint64, rows)
			for i := range keys {
				keys[i] = rng.Uint64()
			}
			check := func(what string, cells [][]byte, mode, words int, stride int64, offs []int64, tail uint64) {
				t.Helper()
				m0 := rng.Uint64() | 1
				var acc [16]uint64
				var hsum [4]uint64
				rowWordsSIMD(data, 0, mode, w, rows, words, stride, offs, tail, true, &acc, keys, &consts, &hsum)
				var X, Y, H uint64
				for r, cell := range cells {
					A, B, h := stateRowWords(cell, w, keys[r]+koff, true)
					m := m0 + 2*uint64(r)
					X += m * A
					Y += m * B
					H += h
				}
				if x, y := rowTotals(&acc, uint64(rows/4), m0); x != X || y != Y {
					t.Fatalf("%s w %d rows %d: (%x, %x), want (%x, %x)", what, w, rows, x, y, X, Y)
				}
				var plain [16]uint64
				var none [4]uint64
				rowWordsSIMD(data, 0, mode, w, rows, words, stride, offs, tail, false, &plain, keys, &consts, &none)
				if plain != acc || none != [4]uint64{} {
					t.Fatalf("%s w %d rows %d without the mix check: sums %x, mix %x; want %x, none", what, w, rows, plain, none, acc)
				}
				if got := hsum[0] + hsum[1] + hsum[2] + hsum[3]; got != H {
					t.Fatalf("%s w %d rows %d: mix %x, want %x", what, w, rows, got, H)
				}
			}
			for n := w; n <= 64; n += w {
				stride := int64(n + w*rng.IntN(3))
				var cells [][]byte
				for r := range rows {
					cells = append(cells, data[int64(r)*stride:int64(r)*stride+int64(n)])
				}
				tail := ^uint64(0)
				if n%8 != 0 {
					tail = 1<<(8*uint(n%8)) - 1
				}
				check("contiguous", cells, 0, (n+7)/8, stride, nil, tail)
			}
			for E := 1; E <= 9; E++ {
				// run e of element e, rows adjacent, runs apart
				runGap := int64(rows*w + 16)
				per := 8 / w
				words := (E*w + 7) / 8
				var offs []int64
				for e := range words * per {
					if e < E {
						offs = append(offs, int64(e)*runGap)
					} else {
						offs = append(offs, -1)
					}
				}
				var cells [][]byte
				for r := range rows {
					var cell []byte
					for e := range E {
						a := int64(e)*runGap + int64(r*w)
						cell = append(cell, data[a:a+int64(w)]...)
					}
					cells = append(cells, cell)
				}
				mode := 1
				if w == 4 {
					mode = 2
				}
				check("adjacent", cells, mode, words, 0, offs, ^uint64(0))
			}
		}
	}
}

// TestAdjacent16: the kernel for rows of at most four 2-byte elements in
// runs of one element (sixteen rows at a time) against the word loop, and
// the whole walk of such a view with rows left over for the other paths
// (37 rows: two groups of 16, one of 4, one alone) against the reference.
func TestAdjacent16(t *testing.T) {
	if !simdAvailable {
		t.Skip("no SIMD kernel on this machine")
	}
	rng := rand.New(rand.NewPCG(13, 14))
	for E := 1; E <= 4; E++ {
		const rows = 37
		runs := make([]layout.CellRun, E)
		for e := range runs {
			runs[e] = layout.CellRun{Offset: int64(e)*(2*rows+6) + 4, Len: 2}
		}
		v := layout.CellView{KernelBlocks: 1, KernelTokens: 1, Heads: rows, CellBytes: 2 * E, PieceBytes: 2,
			HeadStride: 2, RowStride: int64(E)*(2*rows+6) + 8, Runs: runs}
		c := memCache(v, 3, 2, 5, rng)
		p := &ckplan.Plan{Outputs: 2, Tasks: []ckplan.Task{{Cache: c, Rows: []ckplan.Row{{Block: 2, Valid: 1, Out: 0}, {Block: 0, FirstToken: 7, Valid: 1, Out: 1}, {Block: 1, Valid: 1, Out: 1}}}}}
		checkAgainstReference(t, p, fmt.Sprintf("%d elements", E))
	}
}
