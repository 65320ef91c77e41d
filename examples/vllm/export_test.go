// Package vllm_test checks the vLLM package in examples/vllm: the Python
// tests of kvaudit_export, its capture connector and NIXL recorder, its
// install and export_ipc.py (caches built as vLLM's model runner builds
// them, connectors driven in vLLM's call order against stand-ins for vLLM
// and NIXL, checked with the kvaudit executable this test builds), and
// dump_kv.py's command: arrays equal to a synthesized dump, described as
// vLLM describes its cache, give the same checks.
package vllm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/internal/safetensors"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/internal/testlong"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
)

// python returns an interpreter that imports modules ("numpy" or
// "numpy, torch"): $KVAUDIT_PYTHON, Debian's /usr/bin/python3
// (python3-numpy, python3-torch), or python3 on PATH. Without one the test
// skips, unless CI asks for them: KVAUDIT_REQUIRE_NUMPY for NumPy,
// KVAUDIT_REQUIRE_TORCH for PyTorch.
func python(t *testing.T, modules string) string {
	t.Helper()
	for _, p := range []string{os.Getenv("KVAUDIT_PYTHON"), "/usr/bin/python3", "python3"} {
		if p == "" {
			continue
		}
		if err := exec.Command(p, "-c", "import "+modules).Run(); err == nil {
			return p
		}
	}
	if os.Getenv("KVAUDIT_REQUIRE_NUMPY") != "" && !strings.Contains(modules, "torch") ||
		os.Getenv("KVAUDIT_REQUIRE_TORCH") != "" {
		t.Fatalf("no python3 that imports %s (install python3-numpy, python3-torch)", modules)
	}
	t.Skipf("no python3 that imports %s", modules)
	return ""
}

// writeNpy writes raw little-endian data as a .npy array.
func writeNpy(t *testing.T, path, descr string, shape []int64, data []byte) {
	t.Helper()
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	pad := 64 - (10+len(header)+1)%64
	header += strings.Repeat(" ", pad%64) + "\n"
	out := append([]byte("\x93NUMPY\x01\x00"), byte(len(header)), byte(len(header)>>8))
	out = append(out, header...)
	out = append(out, data...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// npyDescr is the NumPy type of a safetensors dtype's bytes, and the
// dtype name to tell the script when NumPy has none.
func npyDescr(st string) (descr, dtype string) {
	switch st {
	case "BF16":
		return "<u2", "bfloat16"
	case "F32":
		return "<f4", ""
	case "U8":
		return "|u1", ""
	}
	return "", ""
}

func checksums(t *testing.T, paths []string) *side.Checks {
	t.Helper()
	cRes, err := side.Checksum(context.Background(), side.Input{Paths: paths}, side.ChecksumOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	c := cRes.Checks
	return c
}

// specTypes are the vLLM spec class names of the group kinds.
var specTypes = map[string]string{
	layout.KindFullAttention: "FullAttentionSpec",
	layout.KindSlidingWindow: "SlidingWindowSpec",
	layout.KindMLA:           "MLAAttentionSpec",
}

func TestDumpKVScript(t *testing.T) {
	py := python(t, "numpy")
	for _, cfg := range []synth.Config{
		{Preset: "llama", Layout: "flash", TP: 2, Seed: 11},
		{Preset: "llama", Layout: "nhd", PP: 2, Seed: 11},
		{Preset: "llama", Layout: "flash", KernelBlockSize: 8, Seed: 14},
		{Preset: "swa", Layout: "nhd", TP: 2, Seed: 12},
		{Preset: "mla", Layout: "flash", TP: 2, Seed: 13},
	} {
		t.Run(fmt.Sprintf("%s-%s-tp%d-pp%d-kb%d", cfg.Preset, cfg.Layout, cfg.TP, cfg.PP, cfg.KernelBlockSize), func(t *testing.T) {
			dir := t.TempDir()
			paths, err := synth.Write(filepath.Join(dir, "synth"), cfg)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "script")
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			var scripted []string
			for i, p := range paths {
				specPath := writeSpec(t, dir, i, p)
				target := filepath.Join(out, filepath.Base(p))
				cmd := exec.Command(py, "dump_kv.py", specPath, target)
				if o, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("dump_kv.py: %v\n%s", err, o)
				}
				scripted = append(scripted, target)
			}
			want, got := checksums(t, paths), checksums(t, scripted)
			if len(want.Requests) == 0 {
				t.Fatal("the synthesized side has no requests")
			}
			if !reflect.DeepEqual(got.Requests, want.Requests) {
				t.Fatalf("the script's dump checksums differently:\n got %+v\nwant %+v", got.Requests[0].Groups, want.Requests[0].Groups)
			}
		})
	}
}

// writeSpec writes rank i's tensors as .npy files and a dump_kv.py spec
// describing them as vLLM does (a KVCacheConfig with spec dicts; the
// requests' block ids per group), and returns the spec's path.
func writeSpec(t *testing.T, dir string, i int, p string) string {
	t.Helper()
	d, err := layout.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := safetensors.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := d.Manifest
	caches := map[string]string{}
	for _, ti := range f.Tensors {
		descr, _ := npyDescr(ti.Dtype.Name)
		np := fmt.Sprintf("r%d-%s.npy", i, ti.Name)
		writeNpy(t, filepath.Join(dir, np), descr, ti.Shape, ti.Data)
		caches[ti.Name] = np
	}
	var groups []map[string]any
	maxID := -1
	for _, g := range m.Groups {
		maxID = max(maxID, g.ID)
	}
	for id := 0; id <= maxID; id++ {
		g := m.Group(id)
		if g == nil || len(g.Layers) == 0 {
			groups = append(groups, map[string]any{"layer_names": []string{}, "kv_cache_spec": map[string]any{"type": "FullAttentionSpec", "block_size": 16, "num_kv_heads": 1, "head_size": 1, "dtype": "bfloat16"}})
			continue
		}
		l0 := g.Layers[0]
		spec := map[string]any{"type": specTypes[g.Kind], "block_size": g.BlockSize, "num_kv_heads": max(l0.NumKVHeads, 1),
			"head_size": l0.HeadSize, "dtype": l0.Dtype}
		if g.SlidingWindow > 0 {
			spec["sliding_window"] = g.SlidingWindow
		}
		var names []string
		for _, l := range g.Layers {
			names = append(names, l.Name)
		}
		groups = append(groups, map[string]any{"layer_names": names, "kv_cache_spec": spec})
	}
	var reqs []map[string]any
	for _, r := range m.Requests {
		reqs = append(reqs, map[string]any{"id": r.ID, "num_tokens": r.NumTokens,
			"num_local_computed_tokens": r.NumLocalComputedTokens, "block_ids": r.BlockTable})
	}
	spec := map[string]any{
		"kv_cache_config": map[string]any{"num_blocks": m.NumBlocks, "kv_cache_groups": groups},
		"kv_caches":       caches,
		"requests":        reqs,
		"parallel":        m.Parallel,
		"model":           m.Model,
		"null_block_id":   nil, // synthesized tables use block 0 as a block
	}
	specPath := filepath.Join(dir, fmt.Sprintf("spec-%d.json", i))
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(specPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return specPath
}

// pythonSuites are the Python test modules in tests/ that
// TestExporterPython must see run (a renamed or unimportable module fails
// it instead of going unnoticed).
var pythonSuites = []string{"test_export", "test_connector", "test_nixl_log", "test_install"}

// TestExporterPython runs the Python tests (tests/test_*.py) against a
// kvaudit built from this tree. They need PyTorch; CI sets
// KVAUDIT_REQUIRE_TORCH so that they cannot skip there.
func TestExporterPython(t *testing.T) {
	testlong.Skip(t, "the exporter's Python suite (a venv, pip install, PyTorch)")
	py := python(t, "numpy, torch")
	bin := testfiles.BuildKvaudit(t)
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Env = append(os.Environ(), "KVAUDIT_BIN="+bin, "KVAUDIT_REQUIRE_TORCH=1")
	o, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python tests: %v\n%s", err, o)
	}
	if strings.Contains(string(o), "skipped") {
		t.Fatalf("python tests skipped some tests:\n%s", o)
	}
	for _, suite := range pythonSuites {
		if !strings.Contains(string(o), "("+suite+".") {
			t.Errorf("no test of tests/%s.py ran:\n%s", suite, o)
		}
	}
	t.Logf("%s", o)
}
