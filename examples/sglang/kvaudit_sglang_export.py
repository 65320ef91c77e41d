"""kvaudit dumps of SGLang's KV pools, for auditing its KV checksum.

SGLang's prefill-decode disaggregation can checksum each request's KV
(``--disaggregation-enable-kv-checksum``, sgl-project/sglang PR #39500):
the prefill sends zlib Adler-32 of one byte stream per request and TP rank
in slot 0 of the request's ``kv_checksum`` metadata row, and the decode
recomputes it and aborts the request on a mismatch. The stream is, for each
buffer the pool registers for transfer (``kv_data_ptrs``: an MHA pool's K
buffer of every layer, then its V buffers; an MLA pool's one buffer per
layer), each of the request's pages in order, the whole page
(``item_len = buffer[0].nbytes * page_size``), the unused tail slots of the
last page included. The pages come from ``req_to_token[req_pool_idx,
0:end]``: every page_size-th slot divided by page_size.

This module writes one rank's pools as a kvaudit dump directory
(``manifest.json`` with ``"engine": "sglang"`` and ``pool.bin``), so that
``kvaudit checksum --scheme sglang-adler32`` recomputes the value SGLang
computes and ``kvaudit diff`` compares a producer with a consumer byte by
byte and with kvaudit's own checks (docs/sglang.md). It never imports
SGLang: it reads the objects a scheduler holds.

- ``pool``: ``MHATokenToKVPool`` (``k_buffer``, ``v_buffer``: one tensor
  ``[size + page_size, head_num, head_dim]`` per layer) or
  ``MLATokenToKVPool`` (``kv_buffer``: ``[size + page_size, 1,
  kv_lora_rank + qk_rope_head_dim]`` per layer), with ``page_size``,
  ``dtype``, ``start_layer``; when it has ``get_contiguous_buf_infos`` the
  buffer order is checked against the pointers it returns.
- ``req_to_token``: ``req_to_token_pool.req_to_token`` (int32,
  ``[size, max_context_len]``).
- ``requests``: dicts with ``id``, ``req_pool_idx``, ``num_tokens`` (the
  end of the range SGLang checksums: ``min(extend end,
  len(origin_input_ids))``), optional ``start_send_idx`` (the suffix-only
  form) and either ``kv_checksum`` (the value) or ``metadata_buffer_index``
  with ``kv_checksum_rows`` (``MetadataBuffers.kv_checksum``) given to
  export_pool.

Only the requests' pages are copied unless ``whole=True``: they are gathered
on the device, renumbered in order of first use, and the pool's own page ids
are kept in each request's ``engine_pages``; the value does not depend on
where pages sit, so it is unchanged.

The layouts were read from sgl-project/sglang
``python/sglang/srt/mem_cache/memory_pool.py`` @000ccdba (MHATokenToKVPool,
MLATokenToKVPool, get_contiguous_buf_infos) and
``python/sglang/srt/disaggregation/checksum.py`` @1901ddec.
"""

import json
import os
import shutil
import tempfile

import torch


def nbytes(t):
    """Tensor.nbytes (PyTorch 1.13 has no such attribute)."""
    return t.numel() * t.element_size()

FORMAT = "kvaudit-dump/1"

# torch dtype -> (kvaudit's torch name, safetensors name of a raw source)
_DTYPES = {
    torch.bfloat16: ("bfloat16", "BF16"),
    torch.float16: ("float16", "F16"),
    torch.float32: ("float32", "F32"),
    torch.float64: ("float64", "F64"),
    torch.int64: ("int64", "I64"),
    torch.int32: ("int32", "I32"),
    torch.int16: ("int16", "I16"),
    torch.int8: ("int8", "I8"),
    torch.uint8: ("uint8", "U8"),
}
for _name, _st in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = (_name, _st)


def _dtype(dt):
    if dt not in _DTYPES:
        raise ValueError(f"dtype {dt} has no kvaudit name")
    return _DTYPES[dt]


def pool_buffers(pool):
    """The pool's buffers in kv_data_ptrs order: (tensor, layer, role)."""
    start = int(getattr(pool, "start_layer", 0) or 0)
    if hasattr(pool, "k_buffer"):
        ks, vs = list(pool.k_buffer), list(pool.v_buffer)
        if len(ks) != len(vs):
            raise ValueError(f"{len(ks)} K buffers but {len(vs)} V buffers")
        out = [(t, start + i, "k") for i, t in enumerate(ks)]
        out += [(t, start + i, "v") for i, t in enumerate(vs)]
        kind = "MHATokenToKVPool"
    elif hasattr(pool, "kv_buffer"):
        out = [(t, start + i, "kv") for i, t in enumerate(pool.kv_buffer)]
        kind = "MLATokenToKVPool"
    else:
        raise ValueError("not an SGLang KV pool: no k_buffer/v_buffer or kv_buffer")
    if hasattr(pool, "get_contiguous_buf_infos"):
        ptrs, _lens, item_lens = pool.get_contiguous_buf_infos()[:3]
        page = int(pool.page_size)
        got = [t.data_ptr() for t, _, _ in out]
        if list(ptrs) != got or list(item_lens) != [nbytes(t[0]) * page for t, _, _ in out]:
            raise ValueError("the pool's get_contiguous_buf_infos lists other buffers (or another order) than k_buffer then v_buffer")
    return kind, out


def request_pages(req_to_token, req_pool_idx, end, page_size, start=0):
    """SGLang's pages of a request: req_to_token[idx, start:end] read at every
    page_size-th slot, divided by page_size."""
    row = req_to_token[req_pool_idx, start:end].to(torch.int64).reshape(-1)
    if page_size == 1:
        return row.tolist()
    return (row[::page_size] // page_size).tolist()


def export_pool(out_dir, pool, req_to_token, requests, *, tp_rank=0, tp_size=1,
                model="", num_kv_heads=None, kv_checksum_rows=None, whole=False, force=False):
    """Write one rank's SGLang pools as a kvaudit dump directory out_dir."""
    kind, bufs = pool_buffers(pool)
    ps = int(pool.page_size)
    dtype = getattr(pool, "dtype", bufs[0][0].dtype)
    torch_name, st_name = _dtype(dtype)
    reqs, used = [], []
    for r in requests:
        n = int(r["num_tokens"])
        idx = int(r["req_pool_idx"])
        pages = request_pages(req_to_token, idx, n, ps)
        row = req_to_token[idx, 0:n].to(torch.int64).tolist()
        for p in pages:
            if p not in used:
                used.append(p)
        reqs.append((r, idx, pages, row))
    total_pages = bufs[0][0].shape[0] // ps
    if whole:
        page_map = {p: p for p in range(total_pages)}
        out_pages = list(range(total_pages))
    else:
        page_map = {p: i for i, p in enumerate(used)}
        out_pages = used
    index = torch.tensor(out_pages, dtype=torch.int64, device=bufs[0][0].device)

    tmp = tempfile.mkdtemp(prefix=".kvaudit-sglang-", dir=os.path.dirname(os.path.abspath(out_dir)) or ".")
    try:
        infos, offset = [], 0
        with open(os.path.join(tmp, "pool.bin"), "wb") as f:
            for ordinal, (t, layer, role) in enumerate(bufs):
                if t.shape[0] % ps:
                    raise ValueError(f"buffer {ordinal}: {t.shape[0]} slots are not whole pages of {ps}")
                paged = t.view(torch.uint8).reshape(t.shape[0] // ps, -1) if t.is_contiguous() else t.contiguous().view(torch.uint8).reshape(t.shape[0] // ps, -1)
                data = paged.index_select(0, index).cpu().contiguous()
                raw = data.numpy().tobytes()
                f.write(raw)
                item_len = nbytes(t[0]) * ps
                infos.append({"ordinal": ordinal, "layer": layer, "role": role, "offset": offset,
                              "size": len(raw), "item_len": item_len, "t": t})
                offset += len(raw)
        manifest = _manifest(kind, ps, infos, len(out_pages), torch_name, st_name, model,
                             num_kv_heads, tp_rank, tp_size)
        for r, idx, pages, row in reqs:
            local = [page_map[p] for p in pages]
            sg = {"req_pool_idx": idx,
                  "req_to_token": [page_map[s // ps] * ps + s % ps for s in row]}
            if not whole:
                sg["engine_pages"] = pages
            start = int(r.get("start_send_idx", 0) or 0)
            if start:
                sg["start_send_idx"] = start
            value = r.get("kv_checksum")
            if value is None and kv_checksum_rows is not None and r.get("metadata_buffer_index") is not None:
                value = int(kv_checksum_rows[int(r["metadata_buffer_index"]), 0].item())
            if value is not None:
                sg["kv_checksum"] = "0x%016x" % (int(value) & (2**64 - 1))
            manifest["requests"].append({"id": str(r["id"]), "num_tokens": int(r["num_tokens"]),
                                         "block_table": {"0": local}, "sglang": sg})
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        if os.path.lexists(out_dir):
            if not force:
                raise FileExistsError(f"{out_dir} exists (force=True replaces it)")
            if os.path.islink(out_dir):
                raise FileExistsError(f"{out_dir} is a symlink: not replaced")
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
        tmp = None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _manifest(kind, ps, infos, num_pages, torch_name, st_name, model, num_kv_heads, tp_rank, tp_size):
    layers = []
    elem = infos[0]["t"].element_size()
    by_layer = {}
    for b in infos:
        by_layer.setdefault(b["layer"], []).append(b)
    for layer in sorted(by_layer):
        bs = by_layer[layer]
        t = bs[0]["t"]
        name = f"model.layers.{layer}.self_attn.attn"
        if kind == "MHATokenToKVPool":
            k, v = bs
            heads, dim = int(t.shape[1]), int(t.shape[2])
            layers.append({"name": name, "dtype": torch_name, "num_kv_heads": heads, "head_size": dim,
                           "layout": ["kv", "block", "token", "head", "dim"],
                           "source": {"file": "pool.bin", "offset": k["offset"], "dtype": st_name,
                                      "shape": [2, num_pages, ps, heads, dim],
                                      "strides": [(v["offset"] - k["offset"]) // elem, ps * heads * dim, heads * dim, dim, 1]}})
        else:
            dim = int(t[0].numel())
            layers.append({"name": name, "dtype": torch_name, "head_size": dim,
                           "layout": ["block", "token", "dim"],
                           "source": {"file": "pool.bin", "offset": bs[0]["offset"], "dtype": st_name,
                                      "shape": [num_pages, ps, dim], "strides": [ps * dim, dim, 1]}})
    if num_kv_heads is None:
        num_kv_heads = 1 if kind == "MLATokenToKVPool" else int(infos[0]["t"].shape[1]) * tp_size
    return {
        "format": FORMAT,
        "engine": "sglang",
        "model": {"name": model, "num_kv_heads": num_kv_heads},
        "parallel": {"tp_rank": tp_rank, "tp_size": tp_size, "pp_rank": 0, "pp_size": 1},
        "num_blocks": num_pages,
        "groups": [{"id": 0, "kind": "full_attention" if kind == "MHATokenToKVPool" else "mla",
                    "block_size": ps, "layers": layers}],
        "requests": [],
        "sglang": {"pool": kind, "page_size": ps, "file": "pool.bin",
                   "buffers": [{k: b[k] for k in ("ordinal", "layer", "role", "offset", "size", "item_len")} for b in infos]},
    }
