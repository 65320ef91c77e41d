package drill

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFoldDetails checks a fold's details against a count of its slices:
// one detail per set of heads, folding the layers (ascending) that have
// that set, with the least first token and offset, the greatest last
// token and the sums of slices, bytes and bits of those layers; flipped
// bits recounted over the detail.
func TestFoldDetails(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for trial := range 300 {
		f := &fold{key: foldKey{group: 1, pos: 2, replica: 1, block: 9, file: "f", cause: cause{isFlip: trial%2 == 0}}, tp: 3, pp: 1, text: "zeroed"}
		type slice struct {
			layer, head, first, last int
			bytes, bits, off         int64
		}
		var all []slice
		for _, L := range rng.Perm(6) {
			l := &foldLayer{L: L, name: fmt.Sprint("layer ", L)}
			f.layers = append(f.layers, l)
			heads := [][]int{{0}, {0, 1}, {2, 1}}[rng.IntN(3)]
			for _, h := range heads {
				for range 1 + rng.IntN(2) { // a head may come twice (two tokens' runs)
					first := rng.IntN(64)
					s := slice{layer: L, head: h, first: first, last: first + rng.IntN(16), bytes: int64(1 + rng.IntN(99)), bits: int64(rng.IntN(9)), off: int64(rng.IntN(1 << 20))}
					l.add(s.head, s.first, s.last, s.bytes, s.bits, s.off)
					all = append(all, s)
				}
			}
		}
		got := f.details()
		// the expected details: layers grouped by their set of heads
		headsOf := map[int][]int{}
		for _, s := range all {
			if !slices.Contains(headsOf[s.layer], s.head) {
				headsOf[s.layer] = append(headsOf[s.layer], s.head)
			}
		}
		var want []Detail
		for L := range 6 {
			hs := slices.Sorted(slices.Values(headsOf[L]))
			i := slices.IndexFunc(want, func(d Detail) bool { return slices.Equal(d.Heads, hs) })
			if i < 0 {
				want = append(want, Detail{Group: 1, Position: 2, Layer: L, LayerName: fmt.Sprint("layer ", L), Replica: 1, Hint: "zeroed",
					FirstToken: 1 << 30, Offset: 1 << 62, TPRank: 3, PPRank: 1, File: "f", Block: 9, Heads: hs, Head: hs[0], LastHead: hs[len(hs)-1]})
				i = len(want) - 1
			}
			d := &want[i]
			d.Layers, d.LastLayer = append(d.Layers, L), L
			for _, s := range all {
				if s.layer == L {
					d.Slices++
					d.Bytes += int(s.bytes)
					d.Bits += int(s.bits)
					d.FirstToken, d.LastToken = min(d.FirstToken, s.first), max(d.LastToken, s.last)
					d.Offset = min(d.Offset, s.off)
				}
			}
		}
		for i := range want {
			if f.key.cause.isFlip {
				want[i].Hint = bitsHint(want[i].Bits)
			}
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Fatalf("trial %d:\n%+v\nwant\n%+v", trial, got, want)
		}
	}
}
