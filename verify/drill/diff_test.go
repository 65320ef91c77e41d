package drill

import (
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
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

// TestDiffCells checks diffCells, cell by cell and through the SIMD
// kernel where its segments allow, against a byte by byte count over the
// logical bytes of cells cut into runs of random lengths (the first
// differing byte's logical offset past the first segment too), and
// fileOffset against the runs.
func TestDiffCells(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for trial := range 300 {
		// Two views of one cell, each its logical bytes in runs of random
		// lengths (multiples of 8 or 32 in some trials) at spaced offsets.
		runs := func() []layout.CellRun {
			var rs []layout.CellRun
			off, unit := int64(rng.IntN(4)*8), []int{1, 8, 32}[trial%3]
			for total := 0; total < 256; {
				n := min(unit*(1+rng.IntN(8)), 256-total)
				rs = append(rs, layout.CellRun{Offset: off, Len: n})
				off += int64(n + unit*rng.IntN(3))
				total += n
			}
			return rs
		}
		cv, pv := &layout.CellView{Runs: runs(), FileOffset: 1000}, &layout.CellView{Runs: runs()}
		a, b := make([]byte, 2048), make([]byte, 2048)
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		x, y := int64(8*rng.IntN(16)), int64(8*rng.IntN(16))
		logical := func(v *layout.CellView, data []byte, at int64) []byte {
			var out []byte
			for _, r := range v.Runs {
				out = append(out, data[at+r.Offset:at+r.Offset+int64(r.Len)]...)
			}
			return out
		}
		// b's cell: a's, with a few bytes changed past a random point
		// (all of them in some trials), or a's cleared first.
		ca := logical(cv, a, x)
		if trial%7 == 0 {
			clear(ca)
			for _, r := range cv.Runs {
				clear(a[x+r.Offset : x+r.Offset+int64(r.Len)])
			}
		}
		cb := append([]byte(nil), ca...)
		from := rng.IntN(len(cb))
		for range rng.IntN(4) {
			cb[from+rng.IntN(len(cb)-from)] ^= byte(1 + rng.IntN(255))
		}
		q := 0
		for _, r := range pv.Runs {
			copy(b[y+r.Offset:], cb[q:q+r.Len])
			q += r.Len
		}
		want := cellDiff{first: -1}
		for i := range ca {
			u, v := ca[i], cb[i]
			if d := u ^ v; d != 0 {
				want.bits += bits.OnesCount8(d)
				want.bytes++
				if want.first < 0 {
					want.first = i
				}
			}
			want.nonzero = want.nonzero || u != 0
			want.sumC += uint64(u) << (8 * (i % 8))
			want.sumP += uint64(v) << (8 * (i % 8))
		}
		segs := segCache{}.get(cv, pv)
		for _, simd := range []bool{false, segs.simd} {
			var got cellDiff
			differs := diffCells(a, x, b, y, segList{segs: segs.segs, simd: simd}, &got)
			if got != want || differs != (want.bytes > 0) {
				t.Fatalf("trial %d (simd %v, %d segments): %+v, want %+v", trial, simd, len(segs.segs), got, want)
			}
		}
		// fileOffset: logical byte q lies in the run that holds it.
		q = rng.IntN(len(ca))
		wantOff := cv.FileOffset + x
		for rest, i := q, 0; ; i++ {
			if rest < cv.Runs[i].Len {
				wantOff += cv.Runs[i].Offset + int64(rest)
				break
			}
			rest -= cv.Runs[i].Len
		}
		if got := fileOffset(cv, x, q); got != wantOff {
			t.Fatalf("trial %d: fileOffset of logical byte %d = %d, want %d", trial, q, got, wantOff)
		}
	}
}
