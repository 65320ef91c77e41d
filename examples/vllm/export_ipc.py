#!/usr/bin/env python3
"""Export a live vLLM KV cache to kvaudit as CUDA IPC handles: no copy.

The same model as kvaudit_export.export_dump (the groups and specs of
vLLM's KVCacheConfig, each layer's layout read from its tensor's shape and
strides, state layers from their list of state tensors, the requests' block
ids), but the dump's layers are the worker's tensors where they lie: a docs/spec.md
§10 "cuda_ipc" source per layer (the 64-byte IPC handle of the allocation,
the tensor's byte offset in it, its dtype, shape and strides, as they are)
and the worker's own block ids. `kvaudit checksum --engine cuda DIR` then
checksums the live cache in place (the kvaudit-cuda runner maps each
allocation with cuIpcOpenMemHandle).

Inside a worker (a KV connector's worker side, a debugging hook), with the
runner's KVCacheConfig, the caches it bound (layer name -> tensor, or list
of state tensors for a Mamba layer: what register_kv_caches receives) and
the requests' block ids:

    from export_ipc import export_ipc

    device = export_ipc("/tmp/kv-live/rank-0-0", kv_cache_config, kv_caches,
                        [{"id": req_id, "num_tokens": n,
                          "block_ids": block_ids}],        # one list per group
                        tp_rank=tp_rank, tp_size=tp_size,
                        model="Qwen/Qwen3-8B", model_num_kv_heads=8)

and, on the same machine, while the worker is alive and does not write the
audited blocks:

    KVAUDIT_CUDA_DEVICE=<device> kvaudit checksum --engine cuda /tmp/kv-live

Requirements: the caches must be plain cudaMalloc allocations (PyTorch's
caching allocator without expandable segments: do not set
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, whose handles are not
CUDA IPC handles).

Run as a program, `export_ipc.py --self-test --kvaudit PATH` checks the
whole path on a GPU machine: it builds caches on the GPU the way vLLM's
runner does (FlashAttention, FlashInfer HND, MLA, a hybrid with Mamba2
states), exports them both ways, and compares `kvaudit checksum --engine
cuda` on the live tensors with `--engine cpu` on the copied dumps, in both
numberings; then it flips a bit in GPU memory and checks that the cuda
engine finds it at its block position, and nowhere else.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kvaudit_export as kx  # noqa: E402

IPC_HANDLE_SIZE = 64


def torch_cuda_ipc(tensor):
    """Returns (handle, offset, device) of a CUDA tensor: the 64-byte CUDA
    IPC handle of the allocation holding it (PyTorch's storage sharing, the
    handles torch.multiprocessing passes), the byte offset of the tensor's
    first element in that allocation, and the device index."""
    if not getattr(tensor, "is_cuda", False):
        raise kx.ExportError("the tensor is not in CUDA memory")
    storage = tensor.untyped_storage()
    # (device, handle, size, offset of the storage in the allocation the
    # handle maps, ref counter handle, its offset, event handle, event sync)
    shared = storage._share_cuda_()
    device, handle, storage_offset = shared[0], shared[1], shared[3]
    if not isinstance(handle, (bytes, bytearray)) or len(handle) != IPC_HANDLE_SIZE:
        raise kx.ExportError(
            "PyTorch shared this tensor without a CUDA IPC handle (an expandable segment? "
            "run without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)")
    return bytes(handle), int(storage_offset) + tensor.storage_offset() * tensor.element_size(), int(device)


def ipc_manifest(kv_cache_config, kv_caches, requests, handle_fn=torch_cuda_ipc, **kwargs):
    """Returns (manifest, device); see kvaudit_export.live_manifest for the
    arguments. handle_fn is replaceable (the tests give a fake one)."""
    return kx.live_manifest(kv_cache_config, kv_caches, requests, handle_fn, **kwargs)


def export_ipc(path, kv_cache_config, kv_caches, requests, handle_fn=torch_cuda_ipc, **kwargs):
    """Writes a dump directory path (created; it must not exist) holding
    manifest.json with cuda_ipc sources, and returns the device index to give
    kvaudit as KVAUDIT_CUDA_DEVICE."""
    manifest, device = ipc_manifest(kv_cache_config, kv_caches, requests, handle_fn, **kwargs)
    os.makedirs(path)
    with open(os.path.join(path, "manifest.json"), "x") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return device


# ---------------------------------------------------------------------------
# Self-test (needs PyTorch with a CUDA device, and kvaudit with its runner).

def _run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return json.loads(p.stdout)


def self_test(kvaudit):
    try:
        import torch
    except ImportError:
        print("export_ipc.py --self-test needs PyTorch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("export_ipc.py --self-test needs a CUDA device", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(HERE, "tests"))
    from test_export import Model  # the tests' vLLM-built caches

    env = dict(os.environ, KVAUDIT_CUDA_DEVICE=str(torch.cuda.current_device()))
    configs = [
        ("flash NHD", dict(backend="flash"), {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}),
        ("flashinfer HND, TP 2", dict(backend="flashinfer", cache_layout="HND", heads=8, tp=2),
         {"A": (40, [5, 2, 9], None)}),
        ("MLA, TP 2", dict(backend="mla", head_size=96, tp=2), {"A": (40, [5, 2, 9], None)}),
        ("hybrid Mamba2, kernel blocks, TP 2", dict(backend="flash", block_size=32, kernel_block_size=16, tp=2,
                                                    layers=4, hybrid=True), {"A": (40, [3, 8], 4), "B": (20, [6], 10)}),
    ]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="kvaudit-ipc-") as tmp:
        for i, (name, kw, tables) in enumerate(configs):
            m = Model(device="cuda", **kw)
            for rid, (n, _, _) in tables.items():
                m.add_request(rid, n)
            live, copied = os.path.join(tmp, f"live{i}"), os.path.join(tmp, f"copy{i}")
            os.makedirs(copied)
            ranks = []
            for rank in range(m.tp):
                caches = m.rank_caches(rank, tables, seed=rank)
                ranks.append(caches)
                kw = dict(tp_rank=rank, tp_size=m.tp, model="self-test", model_num_kv_heads=m.heads,
                          state_splits={1: m.splits()} if m.hybrid else None)
                torch.cuda.synchronize()
                kx.export_dump(os.path.join(copied, f"rank-0-{rank}.safetensors"), m.config, caches,
                               m.requests(tables), **kw)
                export_ipc(os.path.join(live, f"rank-0-{rank}"), m.config, caches, m.requests(tables), **kw)
            numberings = ("request", "block")
            want, ok = {}, True
            for num in numberings:
                want[num] = _run([kvaudit, "checksum", "--engine", "cpu", "--numbering", num, "-o", "json", copied], env)
                got = _run([kvaudit, "checksum", "--engine", "cuda", "--numbering", num, "-o", "json", live], env)
                ok = ok and cuda_computes(got["requests"], got) == cuda_computes(want[num]["requests"], got)
            # A bit of token 0 of request A's first block (position 0 of
            # group 0, the attention group), changed in device memory: the
            # cuda engine must find that position, and only it.
            t = ranks[0][next(iter(ranks[0]))]  # the first attention layer on rank 0
            flipped_view = _first_block_element(t, m, tables["A"][1][0])
            flipped_view ^= 1
            torch.cuda.synchronize()
            found = {}
            for num in numberings:
                seen = _run([kvaudit, "checksum", "--engine", "cuda", "--numbering", num, "-o", "json", live], env)
                found[num] = differing_positions(want[num], seen)
            flipped_view ^= 1
            at = all(found[num] == {("A", 0, 0)} for num in numberings)
            status = "ok" if ok and at else "FAIL"
            failures += status != "ok"
            print(f"{status:4} {name}: cuda engine on live tensors {'equals' if ok else 'DIFFERS FROM'} the cpu "
                  f"engine on copied dumps (request and block numbering); a flipped bit in device memory is "
                  f"{'found at its block (request A, group 0, position 0)' if at else 'NOT found at its block: ' + repr(found)}",
                  flush=True)
            del ranks, t, flipped_view
            torch.cuda.empty_cache()
    print("PASS" if failures == 0 else f"FAIL: {failures} configurations", flush=True)
    return 0 if failures == 0 else 1


def cuda_computes(requests, cuda):
    """The requests of a `kvaudit checksum -o json` output as the cuda
    engine computes them: without kvaudit's mix check (`mix`, docs/spec.md
    §14), which checksum.cu does not compute yet, unless the cuda engine's
    own output (cuda) carries it."""
    if any("mix" in g for r in cuda["requests"] for g in r["groups"]):
        return requests
    return [dict(r, groups=[{k: v for k, v in g.items() if k != "mix"} for g in r["groups"]]) for r in requests]


def differing_positions(want, got):
    """The (request id, group id, block position)s whose checks differ
    between two `kvaudit checksum -o json` outputs; a group or request in
    one only counts at every position it has."""
    def positions(doc):
        out = {}
        for r in doc["requests"]:
            for g in r["groups"]:
                for k, check in enumerate(g["checks"]):
                    for i, v in enumerate(check):
                        out[(r["id"], g["id"], g["start"] + i, k)] = v
        return out
    a, b = positions(want), positions(got)
    return {key[:3] for key in a.keys() | b.keys() if a.get(key) != b.get(key)}


def _first_block_element(t, m, block_id):
    """A one-element integer view of the first element of token 0, head 0
    of a block in the first attention layer's cache."""
    import torch
    iv = t.view({1: torch.int8, 2: torch.int16, 4: torch.int32}[t.element_size()])
    kb = block_id * (m.S // m.kbs)
    if m.backend == "flash":
        return iv[0, kb, 0, 0, 0:1]
    if m.backend == "flashinfer":
        return iv[kb, 0, 0, 0, 0:1]
    return iv[kb, 0, 0:1]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self-test", action="store_true", help="check the whole IPC path on this GPU machine")
    ap.add_argument("--kvaudit", default="kvaudit", help="the kvaudit executable (its runner beside it, on PATH, "
                                                         "or in $KVAUDIT_CUDA_RUNNER)")
    args = ap.parse_args(argv[1:])
    if not args.self_test:
        ap.print_help()
        return 3
    return self_test(args.kvaudit)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
