package safetensors

import (
	"strings"
	"testing"
)

func TestParseDtype(t *testing.T) {
	all := dtypes
	if len(all) != 22 {
		t.Fatalf("%d safetensors dtypes, want 22", len(all))
	}
	seen := map[string]bool{}
	for _, d := range all {
		if seen[d.Name] {
			t.Errorf("Dtypes() lists %q twice", d.Name)
		}
		seen[d.Name] = true
		got, err := ParseDtype(d.Name)
		if err != nil || got != d {
			t.Errorf("ParseDtype(%q) = %v, %v; want %v", d.Name, got, err, d)
		}
		if got.String() != d.Name {
			t.Errorf("%v.String() = %q", d, got.String())
		}
		if lower := strings.ToLower(d.Name); lower != d.Name {
			_, err := ParseDtype(lower)
			if err == nil || !strings.Contains(err.Error(), "case-sensitive") {
				t.Errorf("ParseDtype(%q) error = %v, want a case-sensitivity error", lower, err)
			}
		}
	}
	for _, name := range []string{"", "F128", "bfloat16", " BF16", "BF16 "} {
		if d, err := ParseDtype(name); err == nil {
			t.Errorf("ParseDtype(%q) = %v, want an error", name, d)
		} else if !strings.Contains(err.Error(), `"`+name+`"`) {
			t.Errorf("ParseDtype(%q) error %q does not quote the name", name, err)
		}
	}
}

func TestDtypeSize(t *testing.T) {
	for name, want := range map[string]int{
		"BOOL": 1, "U8": 1, "F8_E4M3": 1, "F8_E8M0": 1, "BF16": 2, "F16": 2,
		"I32": 4, "F32": 4, "C64": 8, "F64": 8, "U64": 8,
		"F4": 0, "F6_E2M3": 0, "F6_E3M2": 0,
	} {
		d, err := ParseDtype(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Size(); got != want {
			t.Errorf("%s.Size() = %d, want %d", name, got, want)
		}
	}
}

func TestDtypeByteSize(t *testing.T) {
	type tc struct {
		dtype string
		shape []int64
		want  int64
		err   string
	}
	for _, c := range []tc{
		{"BF16", nil, 2, ""},
		{"BF16", []int64{}, 2, ""},
		{"BF16", []int64{2, 3}, 12, ""},
		{"F32", []int64{0}, 0, ""},
		{"F32", []int64{5, 0, 7}, 0, ""},
		{"F4", []int64{2}, 1, ""},
		{"F4", []int64{3, 2}, 3, ""},
		{"F4", []int64{3}, 0, "not a whole number of bytes"},
		{"F4", []int64{0}, 0, ""},
		{"F6_E2M3", []int64{4}, 3, ""},
		{"F6_E3M2", []int64{2}, 0, "not a whole number of bytes"},
		{"U8", []int64{-1}, 0, "negative dimension"},
		{"U8", []int64{4294967296, 4294967296, 16}, 0, "overflows"},
		{"U8", []int64{0, 4294967296, 4294967296, 16}, 0, ""},
		{"U64", []int64{1 << 61}, 0, "overflow"},
		{"U8", []int64{1 << 62, 2}, 0, "overflow"},
		{"U8", []int64{1 << 60}, 1 << 60, ""},
		{"U8", []int64{1 << 61}, 0, "overflow"},
		{"U8", []int64{1<<63 - 1}, 0, "overflow"},
	} {
		d, err := ParseDtype(c.dtype)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.ByteSize(c.shape)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s.ByteSize(%v) = %d, %v; want error containing %q", c.dtype, c.shape, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s.ByteSize(%v) = %d, %v; want %d", c.dtype, c.shape, got, err, c.want)
		}
	}
	if _, err := (Dtype{}).ByteSize([]int64{1}); err == nil {
		t.Error("zero Dtype ByteSize succeeded")
	}
}

func TestTorchDtype(t *testing.T) {
	for torch, want := range map[string]Dtype{
		"bfloat16":         {"BF16", 16},
		"float16":          {"F16", 16},
		"half":             {"F16", 16},
		"float32":          {"F32", 32},
		"float":            {"F32", 32},
		"float64":          {"F64", 64},
		"double":           {"F64", 64},
		"float8_e4m3fn":    {"F8_E4M3", 8},
		"float8_e5m2":      {"F8_E5M2", 8},
		"float8_e4m3fnuz":  {"F8_E4M3FNUZ", 8},
		"float8_e5m2fnuz":  {"F8_E5M2FNUZ", 8},
		"float8_e8m0fnu":   {"F8_E8M0", 8},
		"uint8":            {"U8", 8},
		"int8":             {"I8", 8},
		"int16":            {"I16", 16},
		"short":            {"I16", 16},
		"uint16":           {"U16", 16},
		"int32":            {"I32", 32},
		"int":              {"I32", 32},
		"uint32":           {"U32", 32},
		"int64":            {"I64", 64},
		"long":             {"I64", 64},
		"uint64":           {"U64", 64},
		"bool":             {"BOOL", 8},
		"complex64":        {"C64", 64},
		"float4_e2m1fn_x2": {"F4", 8},
		"torch.bfloat16":   {"BF16", 16},
	} {
		got, err := TorchDtype(torch)
		if err != nil || got != want {
			t.Errorf("TorchDtype(%q) = %v, %v; want %v", torch, got, err, want)
		}
	}
	for _, name := range []string{"", "BF16", "bf16", "Bfloat16", "float4_e2m1fn", "complex128", "torch."} {
		if d, err := TorchDtype(name); err == nil {
			t.Errorf("TorchDtype(%q) = %v, want an error", name, d)
		}
	}
}
