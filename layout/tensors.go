package layout

import "github.com/kvaudit/kvaudit/internal/safetensors"

// A Dtype is a tensor element type of safetensors: its name and its
// width in bits.
type Dtype = safetensors.Dtype

// ParseDtype returns the safetensors dtype with exactly the given name
// ("BF16", not "bf16"). Any other name is an error quoting it.
func ParseDtype(name string) (Dtype, error) { return safetensors.ParseDtype(name) }

// TorchDtype maps a PyTorch dtype name as written in a kvaudit manifest
// ("bfloat16", "torch.float8_e4m3fn", ...) to its safetensors dtype
// (safetensors.TorchDtype lists them); any other name is an error.
func TorchDtype(name string) (Dtype, error) { return safetensors.TorchDtype(name) }
