// Package strided is a strided tensor's geometry: its shape, its strides
// in bytes and its element type, the bytes it spans and whether two of its
// elements can share memory. layout builds a dump's cell views on it;
// internal/addrmap places a dump's caches at their device addresses with
// it.
package strided

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/kvaudit/kvaudit/internal/safetensors"
)

// Tensor is a tensor as a layer's cells are read from it (layout.CellView)
// or placed at device addresses.
type Tensor struct {
	Shape   []int64
	Strides []int64 // bytes
	Dtype   safetensors.Dtype
	Size    int64 // bytes available from offset 0 (-1 for device memory)
}

// Overlapping says why two distinct elements of a strided tensor may share
// memory, or returns "" when they cannot: sorted by stride, the axes of
// more than one element must nest, each stride at least the bytes the
// axes inside it span (an element for the innermost). A stride of 0 on an
// axis of two or more elements, or strides that interleave, alias cells,
// which would let one byte stand for several and a fault go unseen.
// Axes are named from names (the layout) when it matches the shape. The
// strides must not overflow (End checks that first).
func Overlapping(t Tensor, names []string) string {
	type axis struct {
		i      int
		n, str int64
	}
	var axes []axis
	for i, n := range t.Shape {
		if n == 0 {
			return "" // no elements
		}
		if n > 1 {
			axes = append(axes, axis{i, n, t.Strides[i]})
		}
	}
	slices.SortStableFunc(axes, func(a, b axis) int { return cmp.Compare(a.str, b.str) })
	name := func(i int) string {
		if len(names) == len(t.Shape) {
			return fmt.Sprintf("axis %d (%q)", i, names[i])
		}
		return fmt.Sprintf("axis %d", i)
	}
	span := int64(max(t.Dtype.Bits/8, 1)) // bytes the inner axes cover
	inner := "an element"
	for _, a := range axes {
		if a.str < span {
			if a.str == 0 {
				return fmt.Sprintf("%s has %d elements and stride 0: they alias one another", name(a.i), a.n)
			}
			return fmt.Sprintf("%s has stride %d bytes, less than the %d bytes of %s inside it: distinct cells overlap in memory", name(a.i), a.str, span, inner)
		}
		span = a.str*(a.n-1) + span
		inner = name(a.i)
	}
	return ""
}

// End returns one past the last byte a strided tensor touches, with
// overflow checks.
func End(t Tensor) (int64, bool) {
	var end uint64
	elem := uint64(max(t.Dtype.Bits/8, 1))
	for i, n := range t.Shape {
		if n == 0 {
			return 0, true
		}
		hi, lo := bits.Mul64(uint64(n-1), uint64(t.Strides[i]))
		if hi != 0 {
			return 0, false
		}
		var carry uint64
		end, carry = bits.Add64(end, lo, 0)
		if carry != 0 || end > 1<<62 {
			return 0, false
		}
	}
	return int64(end + elem), true
}
