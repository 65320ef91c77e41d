// Package ranges writes sets of integers compactly ("0-3,7"), for the
// notes, tables and summaries that name block positions, layers or heads.
// It is not API: verify, its drill-down, inject and report share it.
package ranges

import (
	"fmt"
	"slices"
	"strings"
)

// Format writes integers compactly, ascending: runs of consecutive values
// as "first-last", the rest alone, separated by commas ("0-3,7"; "" for
// none). v is not modified.
func Format(v []int) string {
	v = slices.Clone(v)
	slices.Sort(v)
	var b strings.Builder
	for i := 0; i < len(v); {
		j := i
		for j+1 < len(v) && v[j+1] == v[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", v[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", v[i], v[j])
		}
		i = j + 1
	}
	return b.String()
}
