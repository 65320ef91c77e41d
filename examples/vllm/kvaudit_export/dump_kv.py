"""Write a kvaudit dump from arrays saved with numpy.save: a command over
kvaudit_export (which a vLLM worker calls directly; see docs/vllm.md,
"Exporting from vLLM").

    kvaudit-dump-kv spec.json out.safetensors      (installed: pip install ./examples/vllm)
    python3 examples/vllm/dump_kv.py spec.json out.safetensors

spec.json describes one rank as vLLM does, with paths to .npy files in
place of the tensors:

    {"kv_cache_config": {"num_blocks": 1024, "kv_cache_groups": [
        {"layer_names": ["model.layers.0.self_attn.attn"],
         "kv_cache_spec": {"type": "FullAttentionSpec", "block_size": 16,
                           "num_kv_heads": 4, "head_size": 128,
                           "dtype": "bfloat16"}}]},
     "kv_caches": {"model.layers.0.self_attn.attn": "layer0.npy"},
     "requests": [{"id": "req-1", "num_tokens": 40,
                   "block_ids": [[3, 1, 4]]}],
     "parallel": {"tp_rank": 0, "tp_size": 2, "pp_rank": 0, "pp_size": 1},
     "model": {"name": "Qwen/Qwen3-8B", "num_kv_heads": 8}}

A state layer's entry in kv_caches is one .npy file of its pages
([num_blocks, page] bytes, as vLLM main registers it) or a list of .npy
files (its states in order). Optional: "state_splits", "layouts",
"covered_states" (as kvaudit_export.export_dump takes them),
"null_block_id" (default 0, vLLM's null block; null keeps every id) and
"agent" (the rank's NIXL agent name). bfloat16 and float8 arrays are saved
as uint16/uint8 arrays of the same bytes: the spec's dtype names them.

Needs NumPy (the package depends on it). Exit codes: 0 written, 3 bad
input or a missing dependency.
"""

import json
import os
import sys

from . import NUMPY_HINT, ExportError, export_dump, np

USAGE = "usage: dump_kv.py spec.json out.safetensors"


def main(argv=None):
    argv = sys.argv if argv is None else argv
    prog = os.path.basename(argv[0]) if argv else "dump_kv.py"
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__)
        print(USAGE.replace("dump_kv.py", prog))
        if np is None:
            print(f"\nNumPy is not installed: {NUMPY_HINT}")
        return 0
    if len(argv) != 3:
        print(USAGE.replace("dump_kv.py", prog), file=sys.stderr)
        print(f"({prog} --help describes spec.json)", file=sys.stderr)
        return 3
    if np is None:
        print(f"{prog}: {NUMPY_HINT}", file=sys.stderr)
        return 3
    try:
        with open(argv[1]) as f:
            spec = json.load(f)
        base = os.path.dirname(os.path.abspath(argv[1]))

        def load(p):
            return np.load(os.path.join(base, p), mmap_mode="r")  # read blocks on demand

        caches = {name: ([load(p) for p in entry] if isinstance(entry, list) else load(entry))
                  for name, entry in spec["kv_caches"].items()}
        par, model = spec.get("parallel", {}), spec.get("model", {})
        summary = export_dump(
            argv[2], spec["kv_cache_config"], caches, spec["requests"],
            tp_rank=par.get("tp_rank", 0), tp_size=par.get("tp_size", 1),
            pp_rank=par.get("pp_rank", 0), pp_size=par.get("pp_size", 1),
            model=model.get("name", ""), model_num_kv_heads=model.get("num_kv_heads", 0),
            state_splits=spec.get("state_splits"), layouts=spec.get("layouts"),
            covered_states=spec.get("covered_states"), null_block_id=spec.get("null_block_id", 0),
            agent=spec.get("agent"))
    except KeyError as e:
        print(f"{prog}: {argv[1]}: missing {e}", file=sys.stderr)
        return 3
    except (OSError, ExportError, ValueError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 3
    print(f"{argv[2]}: {summary['num_blocks']} blocks, {summary['bytes']} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
