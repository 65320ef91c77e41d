#!/usr/bin/env python3
"""Write a kvaudit dump from a vLLM worker's KV cache.

A kvaudit dump is one rank's KV cache: a .safetensors file whose
__metadata__ holds a JSON manifest under "kvaudit.manifest" (see kvaudit's
SPEC section 10). This module writes one from the tensors a vLLM worker
holds, with only NumPy (and PyTorch if the tensors are torch tensors): it has
its own small safetensors writer, so it needs neither the safetensors
package nor a GPU after the tensors are copied to the host.

Inside a worker (for example from a KV connector's wait_for_save or a
debugging hook), with the worker's `kv_caches` (layer name -> tensor), its
KV cache config and the requests' block tables:

    from dump_kv import dump_kv, attention_group

    groups = [attention_group(0, "full_attention", block_size=16,
                              layers=kv_caches, backend="flash",
                              num_kv_heads=num_kv_heads_per_rank,
                              head_size=head_size, dtype="bfloat16")]
    dump_kv("/tmp/kv/rank-0-0.safetensors", kv_caches, groups,
            tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
            model="Qwen/Qwen3-8B", model_num_kv_heads=8, num_blocks=num_blocks,
            requests=[{"id": req_id, "num_tokens": n,
                       "block_table": {"0": block_ids}}])

Then `kvaudit checksum /tmp/kv` checksums it, and `kvaudit diff` compares a
producer's dumps with a consumer's.

It also runs as a command that converts arrays saved with numpy.save (.npy)
into a dump, from a JSON spec:

    python3 dump_kv.py spec.json out.safetensors

where spec.json holds {"tensors": {name: "file.npy" | {"npy": "file.npy",
"dtype": "bfloat16"}}, "manifest": {...the manifest without tensors...}}.
A "dtype" names the element type when NumPy has none for it (bfloat16 and
the float8 types are saved as uint16/uint8 arrays of the same bytes).
"""

import json
import struct
import sys

import numpy as np

MANIFEST_FORMAT = "kvaudit-dump/1"
METADATA_KEY = "kvaudit.manifest"

# PyTorch dtype names (as kvaudit manifests write them) -> safetensors dtype
# names and element sizes.
TORCH_TO_ST = {
    "bfloat16": ("BF16", 2), "float16": ("F16", 2), "half": ("F16", 2),
    "float32": ("F32", 4), "float": ("F32", 4), "float64": ("F64", 8),
    "float8_e4m3fn": ("F8_E4M3", 1), "float8_e5m2": ("F8_E5M2", 1),
    "float8_e4m3fnuz": ("F8_E4M3FNUZ", 1), "float8_e5m2fnuz": ("F8_E5M2FNUZ", 1),
    "uint8": ("U8", 1), "int8": ("I8", 1), "int16": ("I16", 2),
    "uint16": ("U16", 2), "int32": ("I32", 4), "uint32": ("U32", 4),
    "int64": ("I64", 8), "uint64": ("U64", 8), "bool": ("BOOL", 1),
}

NUMPY_TO_TORCH = {
    "float16": "float16", "float32": "float32", "float64": "float64",
    "uint8": "uint8", "int8": "int8", "int16": "int16", "uint16": "uint16",
    "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
    "bool": "bool",
}

# Axis orders of vLLM's attention backends (kvaudit layout names).
BACKEND_LAYOUTS = {
    # FlashAttention: [2, num_blocks, block_size, num_kv_heads, head_size]
    "flash": ["kv", "block", "token", "head", "dim"],
    # FlashInfer NHD: [num_blocks, 2, block_size, num_kv_heads, head_size]
    "nhd": ["block", "kv", "token", "head", "dim"],
    # FlashInfer HND: [num_blocks, 2, num_kv_heads, block_size, head_size]
    "hnd": ["block", "kv", "head", "token", "dim"],
    # MLA: [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim]
    "mla": ["block", "token", "dim"],
}


def _host_bytes(tensor):
    """Returns (bytes, shape, torch dtype name) of a torch tensor or a NumPy
    array, copying a device tensor to the host and making it contiguous."""
    if hasattr(tensor, "detach") and hasattr(tensor, "untyped_storage"):
        import torch  # only when given torch tensors
        t = tensor.detach().to("cpu").contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        return raw, list(t.shape), dtype
    a = np.ascontiguousarray(tensor)
    dtype = NUMPY_TO_TORCH.get(a.dtype.name)
    if dtype is None:
        raise ValueError(f"numpy dtype {a.dtype} has no kvaudit dtype: pass its bytes with a dtype name")
    return a.tobytes(), list(a.shape), dtype


def write_safetensors(path, tensors, metadata=None):
    """Writes a safetensors file: tensors is a list of (name, st_dtype,
    shape, raw bytes), written in order and contiguous from 0; the header is
    padded with spaces to a multiple of 8 bytes, as the reference writer
    does."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, st_dtype, shape, raw in tensors:
        if name in header:
            raise ValueError(f"tensor {name!r} appears twice")
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "xb") as f:  # never overwrite an existing dump
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def attention_group(group_id, kind, block_size, layers, backend, num_kv_heads,
                    head_size, dtype, sliding_window=None, spec=None, **extra):
    """Returns a manifest group for attention layers laid out by one of
    vLLM's backends (flash, nhd, hnd, mla). layers is an iterable of layer
    names (a dict's keys work); num_kv_heads is per rank."""
    layout = BACKEND_LAYOUTS[backend]
    group = {"id": group_id, "kind": kind, "block_size": block_size, "layers": []}
    if sliding_window is not None:
        group["sliding_window"] = sliding_window
    for name in layers:
        layer = {"name": name, "dtype": dtype, "head_size": head_size,
                 "tensor": name, "layout": layout}
        if "head" in layout:
            layer["num_kv_heads"] = num_kv_heads
        if spec:
            layer["spec"] = spec
        layer.update(extra)
        group["layers"].append(layer)
    return group


def dump_kv(path, kv_caches, groups, *, tp_rank, tp_size, pp_rank, pp_size,
            num_blocks, requests, model="", model_num_kv_heads=0,
            dtypes=None):
    """Writes one rank's dump to path (a new .safetensors file).

    kv_caches maps a tensor name to a torch tensor or NumPy array (the
    layer's KV cache); groups are manifest groups whose layers name those
    tensors (see attention_group); requests are manifest requests
    ({"id", "num_tokens", "num_local_computed_tokens", "block_table": {group
    id: [block ids or None]}}). dtypes optionally maps a tensor name to the
    dtype of its elements when the array's own dtype does not say it (a
    uint16 array holding bfloat16)."""
    dtypes = dtypes or {}
    tensors = []
    names = {l.get("tensor") for g in groups for l in g["layers"] if l.get("tensor")}
    for name in sorted(names):
        if name not in kv_caches:
            raise KeyError(f"layer tensor {name!r} is not in kv_caches")
        raw, shape, dtype = _host_bytes(kv_caches[name])
        dtype = dtypes.get(name, dtype)
        if dtype not in TORCH_TO_ST:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype!r}")
        st_dtype, size = TORCH_TO_ST[dtype]
        if len(raw) % size:
            raise ValueError(f"tensor {name!r}: {len(raw)} bytes are not whole {dtype} elements")
        count, lead = len(raw) // size, 1
        for d in shape[:-1]:
            lead *= d
        if shape and lead * shape[-1] != count:
            # an array of another element size holding these bytes: the
            # last axis counts elements of the named dtype
            if count % lead:
                raise ValueError(f"tensor {name!r}: shape {shape} does not hold {count} {dtype} elements")
            shape = shape[:-1] + [count // lead]
        tensors.append((name, st_dtype, shape, raw))
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": {"name": model, "num_kv_heads": model_num_kv_heads},
        "parallel": {"tp_rank": tp_rank, "tp_size": tp_size, "pp_rank": pp_rank, "pp_size": pp_size},
        "num_blocks": num_blocks,
        "groups": groups,
        "requests": requests,
    }
    write_safetensors(path, tensors, {METADATA_KEY: json.dumps(manifest)})


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        print("usage: dump_kv.py spec.json out.safetensors", file=sys.stderr)
        return 3
    with open(argv[1]) as f:
        spec = json.load(f)
    kv_caches, dtypes = {}, {}
    for name, entry in spec["tensors"].items():
        if isinstance(entry, str):
            entry = {"npy": entry}
        kv_caches[name] = np.load(entry["npy"])
        if "dtype" in entry:
            dtypes[name] = entry["dtype"]
    m = spec["manifest"]
    p = m["parallel"]
    dump_kv(argv[2], kv_caches, m["groups"], tp_rank=p["tp_rank"], tp_size=p["tp_size"],
            pp_rank=p["pp_rank"], pp_size=p["pp_size"], num_blocks=m["num_blocks"],
            requests=m["requests"], model=m.get("model", {}).get("name", ""),
            model_num_kv_heads=m.get("model", {}).get("num_kv_heads", 0), dtypes=dtypes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
