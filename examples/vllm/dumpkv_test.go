// Package vllm_test checks examples/vllm/dump_kv.py: arrays equal to a
// synthesized dump, written by the script the way a vLLM worker would, give
// the same checks.
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

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/layout/synth"
)

// python returns an interpreter with NumPy: $KVAUDIT_PYTHON, Debian's
// /usr/bin/python3 (python3-numpy), or python3 on PATH. Without one the
// test skips, unless KVAUDIT_REQUIRE_NUMPY is set (CI sets it).
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("KVAUDIT_PYTHON"), "/usr/bin/python3", "python3"} {
		if p == "" {
			continue
		}
		if err := exec.Command(p, "-c", "import numpy").Run(); err == nil {
			return p
		}
	}
	if os.Getenv("KVAUDIT_REQUIRE_NUMPY") != "" {
		t.Fatal("no python3 with numpy (install python3-numpy)")
	}
	t.Skip("no python3 with numpy")
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

// driver builds the manifest groups as a vLLM worker would, with the
// script's attention_group, and calls dump_kv.
const driver = `
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from dump_kv import dump_kv, attention_group
spec = json.load(open(sys.argv[2]))
kv = {name: np.load(path) for name, path in spec["npy"].items()}
groups = [attention_group(g["id"], g["kind"], g["block_size"], g["layers"], g["backend"],
                          g["num_kv_heads"], g["head_size"], g["dtype"],
                          sliding_window=g.get("sliding_window"))
          for g in spec["groups"]]
dump_kv(sys.argv[3], kv, groups, tp_rank=spec["tp_rank"], tp_size=spec["tp_size"],
        pp_rank=spec["pp_rank"], pp_size=spec["pp_size"], num_blocks=spec["num_blocks"],
        requests=spec["requests"], model=spec["model"], model_num_kv_heads=spec["model_num_kv_heads"],
        dtypes=spec["dtypes"])
`

func checksums(t *testing.T, paths []string) *checksum.Checks {
	t.Helper()
	c, err := checksum.ComputePaths(context.Background(), paths, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDumpKVScript(t *testing.T) {
	py := python(t)
	backends := map[string]string{"flash": "flash", "nhd": "nhd", "hnd": "hnd"}
	for _, cfg := range []synth.Config{
		{Preset: "llama", Layout: "flash", TP: 2, Seed: 11},
		{Preset: "llama", Layout: "nhd", PP: 2, Seed: 11},
		{Preset: "swa", Layout: "hnd", TP: 2, Seed: 12},
		{Preset: "mla", Layout: "flash", TP: 2, Seed: 13},
	} {
		t.Run(fmt.Sprintf("%s-%s-tp%d-pp%d", cfg.Preset, cfg.Layout, cfg.TP, cfg.PP), func(t *testing.T) {
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
				d, err := layout.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				f, err := layout.OpenSafetensors(p)
				if err != nil {
					t.Fatal(err)
				}
				m := d.Manifest
				spec := map[string]any{
					"tp_rank": m.Parallel.TPRank, "tp_size": m.Parallel.TPSize,
					"pp_rank": m.Parallel.PPRank, "pp_size": m.Parallel.PPSize,
					"num_blocks": m.NumBlocks, "requests": m.Requests, "model": m.Model.Name,
					"model_num_kv_heads": m.Model.NumKVHeads,
				}
				npys, dtypes := map[string]string{}, map[string]string{}
				for _, ti := range f.Tensors {
					descr, dtype := npyDescr(ti.Dtype.Name)
					np := filepath.Join(dir, fmt.Sprintf("r%d-%s.npy", i, ti.Name))
					writeNpy(t, np, descr, ti.Shape, ti.Data)
					npys[ti.Name] = np
					if dtype != "" {
						dtypes[ti.Name] = dtype
					}
				}
				var groups []map[string]any
				for _, g := range m.Groups {
					if len(g.Layers) == 0 {
						continue
					}
					l0 := g.Layers[0]
					backend := backends[cfg.Layout]
					if g.Kind == layout.KindMLA {
						backend = "mla"
					}
					var names []string
					for _, l := range g.Layers {
						names = append(names, l.Name)
					}
					gs := map[string]any{"id": g.ID, "kind": g.Kind, "block_size": g.BlockSize, "layers": names,
						"backend": backend, "num_kv_heads": l0.NumKVHeads, "head_size": l0.HeadSize, "dtype": l0.Dtype}
					if g.SlidingWindow > 0 {
						gs["sliding_window"] = g.SlidingWindow
					}
					groups = append(groups, gs)
				}
				spec["groups"], spec["npy"], spec["dtypes"] = groups, npys, dtypes
				f.Close()
				d.Close()
				specPath := filepath.Join(dir, fmt.Sprintf("spec-%d.json", i))
				b, _ := json.Marshal(spec)
				if err := os.WriteFile(specPath, b, 0o644); err != nil {
					t.Fatal(err)
				}
				target := filepath.Join(out, filepath.Base(p))
				cmd := exec.Command(py, "-c", driver, ".", specPath, target)
				if o, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("dump_kv.py: %v\n%s", err, o)
				}
				scripted = append(scripted, target)
			}
			want, got := checksums(t, paths), checksums(t, scripted)
			if !reflect.DeepEqual(got.Requests, want.Requests) {
				t.Fatalf("the script's dump checksums differently:\n got %+v\nwant %+v", got.Requests[0].Groups, want.Requests[0].Groups)
			}
		})
	}
}
