package transfer

import (
	"math/rand/v2"
	"testing"
)

// TestIDSet: the set of ended transfer ids holds exactly the ids added,
// in any order, as a map does, and ids added in order cost one run.
func TestIDSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var s idSet
		want := map[int]bool{}
		n := 1 + rng.IntN(40)
		for range n {
			id := rng.IntN(50)
			if !want[id] {
				s.add(id)
				want[id] = true
			}
			for q := -2; q < 53; q++ {
				if s.has(q) != want[q] {
					t.Fatalf("trial %d: after adding %v, has(%d) = %v", trial, keys(want), q, s.has(q))
				}
			}
		}
		// The runs are disjoint, sorted, not touching, and hold the ids.
		total := 0
		for i, r := range s.runs {
			if r[0] >= r[1] || (i > 0 && s.runs[i-1][1] >= r[0]) {
				t.Fatalf("trial %d: runs %v", trial, s.runs)
			}
			total += r[1] - r[0]
		}
		if total != len(want) {
			t.Fatalf("trial %d: runs %v hold %d ids, want %d", trial, s.runs, total, len(want))
		}
	}
	var s idSet
	for id := 7; id < 1000; id++ {
		s.add(id)
	}
	if len(s.runs) != 1 || s.runs[0] != [2]int{7, 1000} {
		t.Fatalf("ids 7..999 in order: runs %v", s.runs)
	}
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}
