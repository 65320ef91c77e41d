package safetensors

import (
	"fmt"
	"math/bits"
	"strings"
)

// A Dtype is a safetensors element type: its exact-case safetensors name and
// the number of bits one element occupies.
type Dtype struct {
	Name string // safetensors name, e.g. "BF16"
	Bits int    // bits per element, e.g. 16; 4 for F4, 6 for F6_E2M3
}

// String returns the dtype's safetensors name.
func (d Dtype) String() string { return d.Name }

// Size returns the bytes per element, or 0 for a sub-byte dtype (F4, F6_*),
// whose elements do not each fill whole bytes.
func (d Dtype) Size() int {
	if d.Bits <= 0 || d.Bits%8 != 0 {
		return 0
	}
	return d.Bits / 8
}

// ByteSize returns the number of bytes a tensor of d with the given shape
// occupies, as the safetensors reference loader computes it: the product of
// the dimensions times Bits, which must be a whole number of bytes. It fails
// on a negative dimension, when the element count or the bit count overflows
// 64 bits (so a size is always below 2^61 bytes), and when the bit count is
// not a multiple of 8.
func (d Dtype) ByteSize(shape []int64) (int64, error) {
	if d.Bits <= 0 {
		return 0, fmt.Errorf("dtype %q has no element size", d.Name)
	}
	n := uint64(1)
	for _, dim := range shape {
		if dim < 0 {
			return 0, fmt.Errorf("negative dimension %d in shape %v", dim, shape)
		}
		hi, lo := bits.Mul64(n, uint64(dim))
		if hi != 0 {
			return 0, fmt.Errorf("element count of shape %v overflows 64 bits", shape)
		}
		n = lo
	}
	hi, nbits := bits.Mul64(n, uint64(d.Bits))
	if hi != 0 {
		return 0, fmt.Errorf("%d elements of %s overflow a 64-bit bit count", n, d.Name)
	}
	if nbits%8 != 0 {
		return 0, fmt.Errorf("%d elements of %s make %d bits, not a whole number of bytes", n, d.Name, nbits)
	}
	return int64(nbits / 8), nil // nbits < 2^64, so this fits
}

// dtypes lists every safetensors dtype, narrowest first.
var dtypes = []Dtype{
	{"F4", 4},
	{"F6_E2M3", 6},
	{"F6_E3M2", 6},
	{"BOOL", 8},
	{"U8", 8},
	{"I8", 8},
	{"F8_E5M2", 8},
	{"F8_E4M3", 8},
	{"F8_E8M0", 8},
	{"F8_E4M3FNUZ", 8},
	{"F8_E5M2FNUZ", 8},
	{"I16", 16},
	{"U16", 16},
	{"F16", 16},
	{"BF16", 16},
	{"I32", 32},
	{"U32", 32},
	{"F32", 32},
	{"C64", 64},
	{"F64", 64},
	{"I64", 64},
	{"U64", 64},
}

// ParseDtype returns the safetensors dtype with exactly the given name
// ("BF16", not "bf16"). Any other name is an error quoting it.
func ParseDtype(name string) (Dtype, error) {
	for _, d := range dtypes {
		if d.Name == name {
			return d, nil
		}
	}
	for _, d := range dtypes {
		if strings.EqualFold(d.Name, name) {
			return Dtype{}, fmt.Errorf("unknown dtype %q (dtype names are case-sensitive: did you mean %q?)", name, d.Name)
		}
	}
	return Dtype{}, fmt.Errorf("unknown dtype %q", name)
}

// torchDtypes maps the PyTorch dtype names a kvaudit manifest may use to
// safetensors dtype names.
var torchDtypes = map[string]string{
	"bfloat16":        "BF16",
	"float16":         "F16",
	"half":            "F16",
	"float32":         "F32",
	"float":           "F32",
	"float64":         "F64",
	"double":          "F64",
	"float8_e4m3fn":   "F8_E4M3",
	"float8_e5m2":     "F8_E5M2",
	"float8_e4m3fnuz": "F8_E4M3FNUZ",
	"float8_e5m2fnuz": "F8_E5M2FNUZ",
	"float8_e8m0fnu":  "F8_E8M0",
	"uint8":           "U8",
	"int8":            "I8",
	"int16":           "I16",
	"short":           "I16",
	"uint16":          "U16",
	"int32":           "I32",
	"int":             "I32",
	"uint32":          "U32",
	"int64":           "I64",
	"long":            "I64",
	"uint64":          "U64",
	"bool":            "BOOL",
	"complex64":       "C64",
}

// TorchDtype maps a PyTorch dtype name as written in a kvaudit manifest
// ("bfloat16", "float16", "half", "float32", "float", "float64", "double",
// "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
// "float8_e8m0fnu", "uint8", "int8", "int16", "short", "uint16", "int32",
// "int", "uint32", "int64", "long", "uint64", "bool", "complex64",
// "float4_e2m1fn_x2"), with or without a "torch." prefix, to its element
// type.
//
// "float4_e2m1fn_x2" is PyTorch's packed FP4: one element is a byte holding
// two F4 values, so it maps to Dtype{Name: "F4", Bits: 8}, which is not equal
// to the safetensors F4 (4 bits, what a file holding such a tensor declares,
// with the packed dimension doubled). Compare such dtypes by name and sizes
// by bits (Bits times element count), not by Dtype equality.
func TorchDtype(name string) (Dtype, error) {
	n := strings.TrimPrefix(name, "torch.")
	if n == "float4_e2m1fn_x2" {
		return Dtype{Name: "F4", Bits: 8}, nil
	}
	if st, ok := torchDtypes[n]; ok {
		return ParseDtype(st)
	}
	return Dtype{}, fmt.Errorf("unknown torch dtype %q", name)
}
