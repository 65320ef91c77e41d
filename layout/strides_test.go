package layout

import (
	"slices"
	"strings"
	"testing"
)

// FuzzSourceStrides: a source whose geometry is accepted never lets two
// distinct elements share a byte (checked by listing every element), and
// every refusal names the field. The seeds are hostile layouts: stride 0,
// strides that overflow (and wrap to a plausible stride), interleaved and
// padded strides, empty axes.
func FuzzSourceStrides(f *testing.F) {
	type seed struct {
		n0, n1, n2 uint8
		s0, s1, s2 int64
		dtype      string
	}
	for _, s := range []seed{
		{2, 3, 4, 12, 4, 1, "F32"},        // row-major
		{2, 3, 4, 1, 2, 6, "F32"},         // column-major
		{2, 3, 4, 16, 5, 1, "BF16"},       // padded
		{2, 3, 4, 12, 0, 1, "F32"},        // stride 0 aliases
		{2, 3, 4, 0, 0, 0, "U8"},          // everything one byte
		{2, 3, 4, 1<<62 + 3, 4, 1, "F32"}, // (2^62+3)*4 wraps to 12
		{2, 3, 4, 1 << 61, 4, 1, "U8"},    // in range, past 2^62 bytes
		{2, 2, 2, 3, 2, 1, "U8"},          // interleaved: 3 < 2*1+... overlap
		{2, 3, 2, 3, 2, 1, "U8"},          // interleaved, not nested
		{0, 3, 4, 0, 0, 0, "F32"},         // no elements
		{1, 3, 1, 0, 1, 0, "F64"},         // size-1 axes ignore their stride
		{255, 255, 255, 1 << 40, 1 << 20, 1, "F8_E4M3"},
	} {
		f.Add(s.n0, s.n1, s.n2, s.s0, s.s1, s.s2, s.dtype)
	}
	f.Fuzz(func(t *testing.T, n0, n1, n2 uint8, s0, s1, s2 int64, dtype string) {
		if _, err := ParseDtype(dtype); err != nil {
			return
		}
		src := &Source{File: "kv.bin", Dtype: dtype, Shape: []int64{int64(n0 % 7), int64(n1 % 7), int64(n2 % 7)}, Strides: []int64{s0, s1, s2}}
		geo, field, err := sourceGeometry(src, []string{"block", "token", "cell"})
		if err != nil {
			if field != "" && !strings.HasPrefix(field, ".strides") && !strings.HasPrefix(field, ".shape") {
				t.Fatalf("error %v names field %q", err, field)
			}
			return
		}
		elem := int64(max(geo.Dtype.Bits/8, 1))
		for i := range 3 {
			if geo.Strides[i] != src.Strides[i]*elem || geo.Strides[i] < 0 {
				t.Fatalf("byte stride %d of axis %d, from %d elements of %d bytes", geo.Strides[i], i, src.Strides[i], elem)
			}
		}
		var starts []int64
		for a := range geo.Shape[0] {
			for b := range geo.Shape[1] {
				for c := range geo.Shape[2] {
					starts = append(starts, a*geo.Strides[0]+b*geo.Strides[1]+c*geo.Strides[2])
				}
			}
		}
		slices.Sort(starts)
		for i := 1; i < len(starts); i++ {
			if starts[i] < starts[i-1]+elem {
				t.Fatalf("accepted shape %v strides %v (bytes): elements at %d and %d overlap", geo.Shape, geo.Strides, starts[i-1], starts[i])
			}
		}
	})
}

// TestSourceStridesRefused: the refusals name the axis and say why.
func TestSourceStridesRefused(t *testing.T) {
	for _, c := range []struct {
		shape, strides []int64
		field, want    string
	}{
		{[]int64{2, 3, 4}, []int64{12, 0, 1}, ".strides", `axis 1 ("token") has 3 elements and stride 0`},
		{[]int64{2, 3, 4}, []int64{1<<62 + 3, 4, 1}, ".strides[0]", "overflows a 64-bit byte offset"},
		{[]int64{2, 3, 2}, []int64{3, 2, 1}, ".strides", `axis 0 ("block") has stride 12 bytes, less than the 24 bytes of axis 1 ("token") inside it`},
		{[]int64{2, 3, 4}, []int64{1 << 60, 4, 1}, "", "spans more than 2^62 bytes"},
		{[]int64{1 << 40, 1 << 40, 4}, nil, ".shape", "exceeds 2^62 bytes"},
	} {
		src := &Source{File: "kv.bin", Dtype: "F32", Shape: c.shape, Strides: c.strides}
		_, field, err := sourceGeometry(src, []string{"block", "token", "cell"})
		if err == nil || field != c.field || !strings.Contains(err.Error(), c.want) {
			t.Errorf("shape %v strides %v: got %q, %v; want %q, %q", c.shape, c.strides, field, err, c.field, c.want)
		}
	}
}
