#!/usr/bin/env python3
"""Export a live vLLM KV cache to kvaudit as CUDA IPC handles: no copy.

A kvaudit dump names its tensors; this module writes one whose tensors are
the worker's KV cache tensors in GPU memory (SPEC section 10, "cuda_ipc"
sources): for each layer, the 64-byte IPC handle of the allocation that
holds it (PyTorch's storage sharing, the same handles torch.multiprocessing
passes between processes), the tensor's byte offset in it, its dtype, shape
and strides. `kvaudit checksum --engine cuda DIR` then checksums the live
cache where it lies: the kvaudit-cuda runner maps the allocations with
cuIpcOpenMemHandle and reads them in place.

Inside a worker (a KV connector hook, a debugging endpoint), with the
worker's KV cache tensors by layer name and the requests' block tables:

    from export_ipc import export_ipc, attention_group, vllm_kv_caches

    kv_caches = vllm_kv_caches(vllm_config)        # layer name -> tensor
    groups = [attention_group(0, "full_attention", block_size=16,
                              layers=kv_caches, backend="flash",
                              num_kv_heads=num_kv_heads_per_rank,
                              head_size=head_size, dtype="bfloat16")]
    device = export_ipc("/tmp/kv-live/rank-0-0", kv_caches, groups,
                        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
                        model="Qwen/Qwen3-8B", model_num_kv_heads=8,
                        num_blocks=num_blocks,
                        requests=[{"id": req_id, "num_tokens": n,
                                   "block_table": {"0": block_ids}}])

and, on the same machine, while the worker is alive:

    KVAUDIT_CUDA_DEVICE=<device> kvaudit checksum --engine cuda /tmp/kv-live

Requirements: the tensors must be in plain cudaMalloc allocations (PyTorch's
caching allocator without expandable segments: do not set
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, whose handles are not
CUDA IPC handles); the worker must keep them alive, and not write the
blocks being audited, while kvaudit reads them.

Run as a program, `export_ipc.py --self-test --kvaudit PATH` checks the
whole path on a GPU machine: it synthesizes dumps with kvaudit, loads their
tensors into GPU memory (one shared allocation, views at odd offsets, some
with permuted strides, as vLLM lays out its caches), exports them, and
compares `kvaudit checksum --engine cuda` on the live tensors with
`--engine cpu` on the files; then it flips a bit in GPU memory and checks
that the cuda engine sees it.
"""

import argparse
import base64
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

MANIFEST_FORMAT = "kvaudit-dump/1"
IPC_HANDLE_SIZE = 64

# PyTorch dtype names (as manifests write them) -> safetensors dtype names.
TORCH_TO_ST = {
    "bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64",
}
ST_TO_TORCH = {v: k for k, v in TORCH_TO_ST.items()}

# Axis orders of vLLM's attention backends, as kvaudit layouts. The layout
# names the tensor's logical axes; its strides say how memory holds them
# (vLLM's HND FlashInfer cache is a permuted view of an NHD-shaped tensor).
BACKEND_LAYOUTS = {
    "flash": ["kv", "block", "token", "head", "dim"],  # [2, blocks, block_size, heads, head_size]
    "nhd": ["block", "kv", "token", "head", "dim"],    # [blocks, 2, block_size, heads, head_size]
    "hnd": ["block", "kv", "head", "token", "dim"],    # [blocks, 2, heads, block_size, head_size]
    "mla": ["block", "token", "dim"],                  # [blocks, block_size, latent]
}


def attention_group(group_id, kind, block_size, layers, backend, num_kv_heads,
                    head_size, dtype, sliding_window=None, spec=None, **extra):
    """Returns a manifest group of attention layers laid out by one of vLLM's
    backends (flash, nhd, hnd, mla); layers is an iterable of layer names (a
    dict's keys work), each the name of its tensor; num_kv_heads is per
    rank."""
    layout = BACKEND_LAYOUTS[backend]
    group = {"id": group_id, "kind": kind, "block_size": block_size, "layers": []}
    if sliding_window is not None:
        group["sliding_window"] = sliding_window
    for name in layers:
        layer = {"name": name, "dtype": dtype, "head_size": head_size, "tensor": name, "layout": layout}
        if "head" in layout:
            layer["num_kv_heads"] = num_kv_heads
        if spec:
            layer["spec"] = spec
        layer.update(extra)
        group["layers"].append(layer)
    return group


def vllm_kv_caches(vllm_config, virtual_engine=0):
    """Returns layer name -> KV cache tensor of a vLLM (v1) worker, read from
    its forward context (the attention layers' kv_cache). This depends on
    vLLM internals: check it against your vLLM version."""
    ctx = vllm_config.compilation_config.static_forward_context
    caches = {}
    for name, layer in ctx.items():
        kv = getattr(layer, "kv_cache", None)
        if kv is None:
            continue
        t = kv[virtual_engine] if isinstance(kv, (list, tuple)) else kv
        if getattr(t, "numel", lambda: 0)() > 0:
            caches[name] = t
    return caches


def ipc_source(tensor):
    """Returns (source, device): the SPEC 10 cuda_ipc source of a CUDA
    tensor, and the index of the device it lives on."""
    if not getattr(tensor, "is_cuda", False):
        raise ValueError("the tensor is not in CUDA memory")
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in TORCH_TO_ST:
        raise ValueError(f"dtype {tensor.dtype} has no kvaudit name")
    storage = tensor.untyped_storage()
    # (device, handle, size in bytes, offset of the storage in the
    # allocation the handle maps, ref counter handle, its offset, event
    # handle, event sync required)
    shared = storage._share_cuda_()
    device, handle, offset_bytes = shared[0], shared[1], shared[3]
    if not isinstance(handle, (bytes, bytearray)) or len(handle) != IPC_HANDLE_SIZE:
        raise ValueError(
            "PyTorch shared this tensor without a CUDA IPC handle (an expandable segment? "
            "run without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)")
    source = {
        "cuda_ipc": base64.b64encode(bytes(handle)).decode("ascii"),
        "offset": int(offset_bytes) + tensor.storage_offset() * tensor.element_size(),
        "dtype": TORCH_TO_ST[dtype],
        "shape": [int(d) for d in tensor.shape],
        "strides": [int(s) for s in tensor.stride()],
    }
    return source, int(device)


def ipc_manifest(kv_caches, groups, *, tp_rank, tp_size, pp_rank, pp_size,
                 num_blocks, requests, model="", model_num_kv_heads=0):
    """Returns (manifest, device): groups' layers name their tensors (a
    layer's "tensor", else its name) in kv_caches; each becomes a cuda_ipc
    source. All tensors must live on one device."""
    devices = set()
    out_groups = []
    for g in groups:
        g = dict(g)
        layers = []
        for layer in g["layers"]:
            layer = dict(layer)
            if "alias_of" in layer:
                layers.append(layer)
                continue
            name = layer.pop("tensor", None) or layer["name"]
            layer.pop("file", None)
            if name not in kv_caches:
                raise KeyError(f"layer {layer['name']!r}: tensor {name!r} is not in kv_caches")
            layer["source"], device = ipc_source(kv_caches[name])
            devices.add(device)
            layers.append(layer)
        g["layers"] = layers
        out_groups.append(g)
    if len(devices) > 1:
        raise ValueError(f"the KV cache spans devices {sorted(devices)}: export one dump per device")
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": {"name": model, "num_kv_heads": model_num_kv_heads},
        "parallel": {"tp_rank": tp_rank, "tp_size": tp_size, "pp_rank": pp_rank, "pp_size": pp_size},
        "num_blocks": num_blocks,
        "groups": out_groups,
        "requests": requests,
    }
    return manifest, (devices.pop() if devices else 0)


def export_ipc(path, kv_caches, groups, **kwargs):
    """Writes a dump directory path (created; it must not exist) holding
    manifest.json with cuda_ipc sources for the tensors of kv_caches (see
    ipc_manifest for the arguments), and returns the device index to give
    kvaudit as KVAUDIT_CUDA_DEVICE."""
    manifest, device = ipc_manifest(kv_caches, groups, **kwargs)
    os.makedirs(path)
    with open(os.path.join(path, "manifest.json"), "x") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return device


# ---------------------------------------------------------------------------
# Self-test (needs PyTorch with a CUDA device, and kvaudit with its runner).

def _read_safetensors(path):
    """Returns (header, data offset) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return header, 8 + n


def _load_rank(rank_dir, torch, arena, state, strided):
    """Loads a synthesized rank (dump directory) into the arena on the GPU
    and returns (kv_caches, manifest)."""
    with open(os.path.join(rank_dir, "manifest.json")) as f:
        manifest = json.load(f)
    files = glob.glob(os.path.join(rank_dir, "*.safetensors"))
    if len(files) != 1:
        raise RuntimeError(f"{rank_dir}: want one .safetensors file, got {files}")
    header, base = _read_safetensors(files[0])
    with open(files[0], "rb") as f:
        blob = f.read()
    kv_caches = {}
    for g in manifest["groups"]:
        for layer in g["layers"]:
            name = layer.get("tensor")
            if not name:
                continue
            info = header[name]
            lo, hi = info["data_offsets"]
            raw = blob[base + lo:base + hi]
            dtype = getattr(torch, ST_TO_TORCH[info["dtype"]])
            shape = info["shape"]
            # An odd offset in the shared allocation: 256-aligned plus a few
            # elements, as vLLM's views into one raw tensor are.
            at = state["at"] + 256 + 2 * torch.empty((), dtype=dtype).element_size()
            host = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
            if strided and len(shape) == 5:
                # Store axes 2 and 3 swapped in memory and export the
                # permuted view: the logical layout is unchanged, the
                # strides are not contiguous.
                logical = host.view(dtype).view(shape)
                phys = logical.permute(0, 1, 3, 2, 4).contiguous()
                nbytes = phys.numel() * phys.element_size()
                arena[at:at + nbytes].copy_(phys.reshape(-1).view(torch.uint8))
                view = arena[at:at + nbytes].view(dtype).view(phys.shape).permute(0, 1, 3, 2, 4)
            else:
                nbytes = len(raw)
                arena[at:at + nbytes].copy_(host)
                view = arena[at:at + nbytes].view(dtype).view(shape)
            state["at"] = at + nbytes
            kv_caches[name] = view
    return kv_caches, manifest


def _run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p.stdout


def self_test(kvaudit, configs):
    try:
        import torch
    except ImportError:
        print("export_ipc.py --self-test needs PyTorch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("export_ipc.py --self-test needs a CUDA device", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["KVAUDIT_CUDA_DEVICE"] = str(torch.cuda.current_device())
    failures = 0
    with tempfile.TemporaryDirectory(prefix="kvaudit-ipc-") as tmp:
        for i, (preset, layout, tp, strided) in enumerate(configs):
            name = f"{preset}/{layout}/tp{tp}" + ("/strided" if strided else "")
            out = os.path.join(tmp, f"c{i}")
            _run([kvaudit, "synth", "--out", out, "--preset", preset, "--layout", layout,
                  "--tp", str(tp), "--format", "dir", "--seed", str(40 + i)], env)
            side = os.path.join(out, "producer")
            want = json.loads(_run([kvaudit, "checksum", "--engine", "cpu", "-o", "json", side], env))
            arena = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")
            state = {"at": 0}
            live = os.path.join(tmp, f"live{i}")
            os.makedirs(live)
            views, manifests = [], []
            for rank in sorted(os.listdir(side)):
                kv_caches, m = _load_rank(os.path.join(side, rank), torch, arena, state, strided)
                views.append(kv_caches)
                manifests.append(m)
                export_ipc(os.path.join(live, rank), kv_caches, m["groups"],
                           tp_rank=m["parallel"]["tp_rank"], tp_size=m["parallel"]["tp_size"],
                           pp_rank=m["parallel"]["pp_rank"], pp_size=m["parallel"]["pp_size"],
                           num_blocks=m["num_blocks"], requests=m["requests"],
                           model=m["model"]["name"], model_num_kv_heads=m["model"]["num_kv_heads"])
            torch.cuda.synchronize()
            got = json.loads(_run([kvaudit, "checksum", "--engine", "cuda", "-o", "json", live], env))
            ok = got == want
            # Flip one bit of a cell that request 0 covers: the live
            # checksums must change.
            cell = _covered_cell(views[0], manifests[0])
            cell.view(torch.uint8)[0] ^= 1
            torch.cuda.synchronize()
            flipped = json.loads(_run([kvaudit, "checksum", "--engine", "cuda", "-o", "json", live], env))
            cell.view(torch.uint8)[0] ^= 1
            sees_flip = flipped != want
            status = "ok" if ok and sees_flip else "FAIL"
            failures += status != "ok"
            print(f"{status:4} {name}: cuda engine on live tensors {'equals' if ok else 'DIFFERS FROM'} "
                  f"cpu engine on files; a flipped bit {'is' if sees_flip else 'is NOT'} seen", flush=True)
            del views, cell, arena
            torch.cuda.empty_cache()
    print("PASS" if failures == 0 else f"FAIL: {failures} configurations", flush=True)
    return 0 if failures == 0 else 1


def _covered_cell(kv_caches, manifest):
    """Returns a one-element view of the first element of the cell of token
    0, head 0 of request 0's first block in the first layer of group 0."""
    g = manifest["groups"][0]
    layer = next(l for l in g["layers"] if l.get("tensor"))
    t = kv_caches[layer["tensor"]]
    table = manifest["requests"][0]["block_table"][str(g["id"])]
    block = next(b for b in table if b is not None)
    kernel_blocks = t.shape[layer["layout"].index("block")] // manifest["num_blocks"]
    idx = tuple(block * kernel_blocks if a == "block" else 0 for a in layer["layout"])
    return t[idx].unsqueeze(0)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self-test", action="store_true", help="check the whole IPC path on this GPU machine")
    ap.add_argument("--kvaudit", default="kvaudit", help="the kvaudit executable (its runner beside it, on PATH, or in $KVAUDIT_CUDA_RUNNER)")
    args = ap.parse_args(argv[1:])
    if not args.self_test:
        ap.print_help()
        return 3
    configs = [
        ("llama", "flash", 1, False),
        ("llama", "flash", 2, True),
        ("llama", "hnd", 2, False),
        ("mla", "flash", 1, False),
        ("swa", "nhd", 1, False),
        ("tiny", "packed", 1, False),
    ]
    return self_test(args.kvaudit, configs)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
