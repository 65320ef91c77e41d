"""kvaudit dumps from a vLLM worker's KV cache.

A kvaudit dump is one rank's KV cache: a .safetensors file whose
__metadata__ holds a JSON manifest (kvaudit's docs/spec.md §10). This package
builds one from the objects a vLLM worker already holds, with NumPy only
(and PyTorch when the caches are torch tensors); it never imports vLLM:

- ``kv_cache_config``: vLLM's ``KVCacheConfig`` (``num_blocks`` and
  ``kv_cache_groups``, each a ``KVCacheGroupSpec`` with ``layer_names`` and
  a ``kv_cache_spec``), or a dict with the same fields;
- ``kv_caches``: layer name -> the tensor the model runner bound to the
  layer, what a KV connector's ``register_kv_caches`` receives: an
  attention layer's KV cache; a Mamba / gated-delta-net layer's one tensor
  of raw pages (today's runner), or its list of state tensors (the older
  one); ``cross_layer_caches`` turns the one tensor of the cross-layer
  cache (``register_cross_layers_kv_cache``) into this dict. Tensors are
  torch tensors, NumPy arrays or raw buffers described by ``{"buffer",
  "offset", "dtype", "shape", "strides"}``;
- ``requests``: the requests to export, each with its id, ``num_tokens``,
  ``num_local_computed_tokens`` (a consumer's local prefix-cache hit),
  ``block_ids`` (one list per KV cache group, as the scheduler's
  ``KVCacheBlocks.get_block_ids()`` and the worker's
  ``CachedRequestState.block_ids`` hold them) and, on a consumer, the
  producer's request id as ``producer_id``.

What each layer holds is read from the tensor it is given (shape, strides,
dtype, storage offset) and the layer's KV cache spec, never from a backend
name or a list of shapes: the axes are named by their sizes (a block axis
of ``num_blocks * k`` kernel blocks of ``block_size / k`` tokens, a token
axis, ``num_kv_heads`` heads, K and V split by an axis of 2 or concatenated
in the last one, ``head_size`` elements; MLA one latent, ``head_size_v``
0; fp8_ds_mla 656-byte cells), in any order, the strides saying where the
memory is (any permutation, padded block strides, other layers' pages
between a layer's blocks). So vLLM's pre-refactor forms (FlashAttention
``(2, blocks, block_size, heads, head_size)``, FlashInfer and Triton
``(blocks, 2, ...)`` under any stride order, MLA ``(blocks, block_size,
head_size)``, pages padded by widening the last axis (001cabc1be16) or by
the block stride (9aaf83ef5)) and the layout refactor's ``[B, H, N, C]``
views of one int8 buffer (C = ``(head_size + head_size_v) * dtype size``,
strided by a KVCacheLayout, ``.view(spec.dtype)``) read the same way. When
two readings fit one shape (heads as many as tokens), vLLM's logical
orders break the tie; when none does, or two still do, the layer is
refused, naming its shape, strides and what was expected: never a wrong
checksum. A dump writes each layer in its memory order, so its
manifest layout is the memory's.

Only the requests' blocks are copied: each layer's selected blocks are
gathered (on the device for torch tensors), copied to the host and written
before the next layer is read, so host memory stays within about two copies
of one layer's selected blocks whatever the size of the cache. Block ids are
renumbered in the dump (``num_blocks`` is the number of selected blocks);
the metadata key ``kvaudit_export.block_ids`` keeps the worker's ids.

Written for vLLM's v1 engine as on its main branch (vllm-project/vllm), read
at these commits: ``vllm/v1/worker/gpu_model_runner.py`` 000fc94b754f
(``initialize_kv_cache``: the runner deep-copies the KVCacheConfig and adds
the KV-sharing layers to its copy only, binds them to their target's
tensor, and registers the dict with the connector), ``vllm/v1/worker/
utils.py`` 0027b02769fb (``bind_kv_cache``: the dict holds one tensor per
layer, Mamba layers included, each layer unpacking its own views; an
attention layer keeps its view as it is, ``attention_layer_base.py``
1ae48b6d68a8),
``vllm/model_executor/layers/mamba/abstract.py`` 00b08dc44519
(``MambaBase.bind_kv_cache``: a raw ``[B, 1, 1, C]`` page view whose states
are packed from the page start, row-major, in the spec's order),
``vllm/v1/worker/mamba_utils.py`` 00b08dc44519 (in ``mamba_cache_mode``
"align" the running state is at ``(num_computed - 1) // block_size``),
``vllm/v1/kv_cache_interface.py`` 001cabc1be16 (FullAttentionSpec,
SlidingWindowSpec, MLAAttentionSpec with ``fp8_ds_mla`` pages of 656 bytes
a token, MambaSpec, ``page_size_padded``, ``kv_quant_mode``), the padded
attention pages of ``vllm/v1/worker/gpu/attn_utils.py`` 001cabc1be16 (the
last axis widened to fill the page), the cross-layer cache of
``kv_connector_model_runner_mixin.py`` (``allocate_uniform_kv_caches``) and
``flash_attn.py``'s stride orders with a layers axis, and
``distributed/kv_transfer/kv_connector/v1/base.py`` 003df2961dd8
(``register_cross_layers_kv_cache``). The older forms (state lists, a
config that lists every layer, as at 001cabc1be16) still work. Block id 0
is vLLM's null block (the BlockPool reserves it), so it is exported as a
null entry.

After the KV-cache layout refactor (RFC #42082) it follows
``vllm/v1/kv_cache_layout.py`` at vllm-project/vllm e78684ecbf33
(KVCacheLayout: stride permutations of ``[L, B, H, N, C]``, LBNHC the
default NHD, LBHNC HND, BLNHC block-outermost) and
``vllm/v1/kv_cache_interface.py`` as the fork LingHangwangxianjiui/vllm
carries it at 71bbe3910b5c (``create_kv_cache_views``,
``compute_layout_strides``, KVCacheTensor's layer and block strides, MLA's
``head_size_v = 0``, MambaSpec's ``[B, 1, 1, C]`` int8 view of its states'
bytes without padding; packed pages, ``num_head_slots``,
``state_content_bytes`` and ``tokens_per_state`` other than one cell a
head and token, are refused).

Quantised caches are exported as stored: fp8 caches (uint8 or float8
elements, per-tensor scales kept elsewhere) are their bytes; MLA's
fp8_ds_mla pages are raw 656-byte cells ``[block, token, cell]``. Caches
whose scales sit beside the elements (``kv_quant_mode`` per-token-head,
NVFP4, packed TurboQuant slots) are refused, naming the layer and why.

Each layer and state of a dump records the engine's address of its first
element (``"address"``, ``tensor.data_ptr()``) and, when given, the rank's
NIXL agent name (``parallel.agent``), so a NIXL descriptor log
(``kvaudit_export.nixl_log``) resolves to cells. Because a dump renumbers
its blocks and packs them, the metadata also keeps the worker's block id of
each dump block (``kvaudit_export.block_ids``) and each attention layer's
engine shape and strides in the dump's axis order
(``kvaudit_export.engine``).
"""

import json
import os
import re as _re
import struct

try:
    import numpy as np
except ImportError:  # the package imports without NumPy (dump_kv --help says what to install); exporting needs it
    np = None

NUMPY_HINT = ("kvaudit_export needs NumPy: install it with `pip install numpy` (Debian: "
              "`apt-get install python3-numpy`), or install this package, which depends on it: "
              "`pip install ./examples/vllm`")

MANIFEST_FORMAT = "kvaudit-dump/1"
METADATA_KEY = "kvaudit.manifest"
BLOCK_IDS_KEY = "kvaudit_export.block_ids"
ENGINE_KEY = "kvaudit_export.engine"

__all__ = [
    "ExportError", "export_dump", "live_manifest", "build_plan", "Plan",
    "mamba2_state_splits", "mamba1_state_splits", "gdn_state_splits",
    "write_safetensors", "ST_DTYPES", "cross_layer_caches", "hex_address", "user_request_id",
]

# PyTorch dtype names -> (safetensors dtype, element size).
ST_DTYPES = {
    "bfloat16": ("BF16", 2), "float16": ("F16", 2), "half": ("F16", 2),
    "float32": ("F32", 4), "float": ("F32", 4), "float64": ("F64", 8),
    "float8_e4m3fn": ("F8_E4M3", 1), "float8_e5m2": ("F8_E5M2", 1),
    "float8_e4m3fnuz": ("F8_E4M3FNUZ", 1), "float8_e5m2fnuz": ("F8_E5M2FNUZ", 1),
    "uint8": ("U8", 1), "int8": ("I8", 1), "int16": ("I16", 2),
    "uint16": ("U16", 2), "int32": ("I32", 4), "uint32": ("U32", 4),
    "int64": ("I64", 8), "uint64": ("U64", 8), "bool": ("BOOL", 1),
}

# The logical axis orders of vLLM's attention backends (get_kv_cache_shape),
# whatever their stride order.
_ATTENTION_SHAPES = [
    ("kv", "block", "token", "head", "dim"),   # FlashAttention
    ("block", "kv", "token", "head", "dim"),   # FlashInfer, Triton
]
_MLA_SHAPES = [("block", "token", "dim")]

_MISSING = object()


# vLLM's internal request id: the user's id, "-" and 8 hex digits
# (InputProcessor.assign_request_id: f"{external_req_id}-{random_uuid():.8}",
# random_uuid being 16 lower-case hex digits; vllm/v1/engine/input_processor.py
# at 9aaf83ef5, PR #27987). VLLM_DISABLE_REQUEST_ID_RANDOMIZATION turns it off.
_SUFFIX = _re.compile(r"^(.+)-[0-9a-f]{8}$")


def user_request_id(request_id, suffix=True):
    """The id a user knows for vLLM's internal request id: without vLLM's
    random suffix when it has one (suffix False: as it is)."""
    rid = str(request_id)
    if suffix:
        m = _SUFFIX.match(rid)
        if m:
            return m.group(1)
    return rid



class ExportError(ValueError):
    """A KV cache description that cannot be exported truthfully; the
    message names the layer (or request) at fault."""


# ---------------------------------------------------------------------------
# Duck typing: vLLM objects or plain dicts.

def _field(obj, *names, default=_MISSING, what="object"):
    for n in names:
        if isinstance(obj, dict):
            if n in obj:
                return obj[n]
        elif hasattr(obj, n):
            return getattr(obj, n)
    if default is _MISSING:
        raise ExportError(f"{what} has no {names[0]!r}")
    return default


def _need_numpy():
    if np is None:
        raise ExportError(NUMPY_HINT)


def _dtype_name(dt):
    """A PyTorch dtype name from a torch.dtype, a NumPy dtype or a string."""
    if isinstance(dt, str):
        return dt.removeprefix("torch.")
    if np is not None and (isinstance(dt, np.dtype) or (isinstance(dt, type) and issubclass(dt, np.generic))):
        return np.dtype(dt).name
    return str(dt).removeprefix("torch.")


def _elem_size(dtype, what):
    if dtype not in ST_DTYPES:
        raise ExportError(f"{what}: unknown dtype {dtype!r}")
    return ST_DTYPES[dtype][1]


_SPEC_KINDS = {
    "FullAttentionSpec": "full_attention", "SinkFullAttentionSpec": "full_attention",
    "ChunkedLocalAttentionSpec": "full_attention",
    "SlidingWindowSpec": "sliding_window",
    "MLAAttentionSpec": "mla",
    "MambaSpec": "mamba",
}
_DEFAULT_SPEC = {"full_attention": "FullAttentionSpec", "sliding_window": "SlidingWindowSpec",
                 "mla": "MLAAttentionSpec", "mamba": "MambaSpec"}


def _spec_info(spec, layer):
    """What a layer's kv_cache_spec says: kind, spec type name, block size,
    dtype, heads and head size (attention), or state shapes and dtypes
    (mamba)."""
    what = f"layer {layer!r}: kv_cache_spec"
    per_layer = _field(spec, "kv_cache_specs", default=None)
    if per_layer is not None:  # UniformTypeKVCacheSpecs
        if layer not in per_layer:
            raise ExportError(f"{what} (UniformTypeKVCacheSpecs) has no spec for the layer")
        spec = per_layer[layer]
    if isinstance(spec, dict):
        type_name = spec.get("type") or _DEFAULT_SPEC.get(spec.get("kind", ""), "")
    else:
        type_name = type(spec).__name__
    kind = spec.get("kind") if isinstance(spec, dict) and "kind" in spec else None
    if kind is None:
        kind = _SPEC_KINDS.get(type_name)
    if kind is None:
        # Subclasses and look-alikes: decide by the fields vLLM's classes have.
        if _field(spec, "shapes", default=None) is not None:
            kind = "mamba"
        elif (("cache_dtype_str" in spec) if isinstance(spec, dict) else hasattr(spec, "cache_dtype_str")) \
                or "MLA" in type_name:
            kind = "mla"
        elif "Cross" in type_name or "EncoderOnly" in type_name:
            raise ExportError(f"{what}: {type_name} layers hold no decoder KV to audit")
        elif "SlidingWindow" in type_name:
            kind = "sliding_window"
        else:
            kind = "full_attention"
    info = {"kind": kind, "spec": type_name or _DEFAULT_SPEC[kind],
            "block_size": int(_field(spec, "block_size", what=what))}
    if kind == "mamba":
        shapes = [tuple(int(d) for d in s) for s in _field(spec, "shapes", what=what)]
        dtypes = [_dtype_name(d) for d in _field(spec, "dtypes", what=what)]
        if len(shapes) != len(dtypes):
            raise ExportError(f"{what}: {len(shapes)} state shapes but {len(dtypes)} dtypes")
        padded = _field(spec, "page_size_padded", default=None)
        info.update(shapes=shapes, dtypes=dtypes,
                    mamba_cache_mode=str(_field(spec, "mamba_cache_mode", default="none")),
                    page_size_padded=None if padded is None else int(padded))
        return info
    info.update(dtype=_dtype_name(_field(spec, "dtype", what=what)),
                num_kv_heads=int(_field(spec, "num_kv_heads", what=what)),
                head_size=int(_field(spec, "head_size", what=what)))
    hv = _field(spec, "head_size_v", default=None)
    # head_size_v: V's elements (FullAttentionSpec, default head_size); MLA's
    # latent has none (0 after the layout refactor, head_size before it,
    # where the MLA page held head_size elements a token all the same).
    info["head_size_v"] = info["head_size"] if hv is None or kind == "mla" else int(hv)
    _check_quantisation(spec, type_name, what)
    padded = _field(spec, "page_size_padded", default=None)
    if padded is not None:
        info["page_size_padded"] = int(padded)
    if kind == "mla" and str(_field(spec, "cache_dtype_str", default="") or "") == "fp8_ds_mla":
        # FlashMLA sparse: each token's 656 bytes hold its fp8 latent, its
        # scales and its bf16 rope part, packed; the cache is uint8
        # [blocks, block_size, 656] (MLAAttentionSpec.real_page_size_bytes).
        info["cell_bytes"] = FP8_DS_MLA_TOKEN_BYTES
    if kind == "sliding_window":
        info["sliding_window"] = int(_field(spec, "sliding_window", what=what))
    _check_packing(spec, info, type_name, what)
    return info


# The bytes per token of MLA's fp8_ds_mla cache (vLLM's MLAAttentionSpec).
FP8_DS_MLA_TOKEN_BYTES = 656


def _check_packing(spec, info, type_name, what):
    """Refuses the layout refactor's packed pages (AttentionSpec
    num_head_slots, state_content_bytes, tokens_per_state): their cells are
    no K/V cells of head_size elements a token and head."""
    slots = _field(spec, "num_head_slots", default=None)
    if slots is not None and int(slots) != info["num_kv_heads"]:
        raise ExportError(f"{what}: {type_name} packs its {info['num_kv_heads']} KV heads into {slots} head slots, "
                          "which are no K/V cells kvaudit reads: refused")
    tps = _field(spec, "tokens_per_state", default=1)
    if tps is not None and tps != 1:
        raise ExportError(f"{what}: {type_name} stores one state per {tps} tokens (compressed or pooled), "
                          "not one cell per token: refused")
    content = _field(spec, "state_content_bytes", default=None)
    if content is not None and not info.get("cell_bytes"):
        want = (info["head_size"] + (0 if info["kind"] == "mla" else info["head_size_v"])) * \
            _elem_size(info["dtype"], what)
        if int(content) != want:
            raise ExportError(f"{what}: {type_name} packs {content} bytes a head and token, not the {want} bytes "
                              f"of its {info['head_size']} + {info['head_size_v']} {info['dtype']} elements: refused")


def _check_quantisation(spec, type_name, what):
    """Refuses the quantised caches whose stored bytes are not all in the
    K/V elements a dump covers. fp8 caches (per-tensor scales, kept outside
    the cache) are their bytes as stored and pass."""
    mode = _field(spec, "kv_quant_mode", default=None)
    name = getattr(mode, "name", None) or (str(mode).rsplit(".", 1)[-1] if mode is not None else "NONE")
    if name.endswith("PER_TOKEN_HEAD"):
        raise ExportError(f"{what}: kv_quant_mode {name} keeps per-token-head scales beside the K/V elements, "
                          "outside the cells a dump covers: a corrupted scale would go unseen, so it is refused")
    if name == "NVFP4":
        raise ExportError(f"{what}: kv_quant_mode NVFP4 packs fp4 data and fp8 block scales into each head "
                          "slot, which is no K/V cell of head_size elements: refused")
    slot = int(_field(spec, "tq_slot_size", default=0) or 0)
    if slot > 0:
        raise ExportError(f"{what}: {type_name} packs each head into a {slot}-byte slot, "
                          "which is no K/V cell of head_size elements: refused")


# ---------------------------------------------------------------------------
# Tensors: torch, NumPy, or a raw buffer with explicit strides.

def _is_torch(t):
    return hasattr(t, "data_ptr") and hasattr(t, "stride") and callable(t.stride)


class _Tensor:
    """One tensor's shape, strides (elements), element size and dtype, and
    the means to gather rows of one axis into a host NumPy array."""

    def __init__(self, obj, what):
        self.what = what
        if _is_torch(obj):
            self.obj, self.torch = obj, True
            self.shape = tuple(int(d) for d in obj.shape)
            self.strides = tuple(int(s) for s in obj.stride())
            self.itemsize = obj.element_size()
            self.dtype = _dtype_name(obj.dtype)
            self.ptr = obj.data_ptr()
            self.device = str(obj.device)
        elif isinstance(obj, dict):
            self._raw(obj)
        elif isinstance(obj, np.ndarray):
            self._numpy(obj)
        else:
            raise ExportError(f"{what}: a {type(obj).__name__} is not a tensor (want a torch tensor, "
                              "a NumPy array or {\"buffer\", \"offset\", \"dtype\", \"shape\", \"strides\"})")
        check_strides(self.shape, self.strides, what)
        # The memory as given (KV sharing compares it, whatever view the plan takes).
        self.orig = (self.ptr, self.shape, self.strides, self.itemsize, self.device)

    def split_axis(self, axis, sizes):
        """Views axis as len(sizes) axes (outer first): a pure view."""
        assert int(np.prod(sizes)) == self.shape[axis]
        inner = [int(np.prod(sizes[i + 1:])) * self.strides[axis] for i in range(len(sizes))]
        if self.torch:
            self.obj = self.obj.unflatten(axis, tuple(sizes))
        else:
            self.obj = np.lib.stride_tricks.as_strided(
                self.obj, shape=self.shape[:axis] + tuple(sizes) + self.shape[axis + 1:],
                strides=tuple(s * self.itemsize for s in self.strides[:axis] + tuple(inner) + self.strides[axis + 1:]),
                writeable=False)
        self.shape = self.shape[:axis] + tuple(sizes) + self.shape[axis + 1:]
        self.strides = self.strides[:axis] + tuple(inner) + self.strides[axis + 1:]

    def drop_axis(self, axis):
        """Drops an axis of size 1."""
        assert self.shape[axis] == 1
        if self.torch:
            self.obj = self.obj.select(axis, 0)
        else:
            self.obj = np.take(self.obj, 0, axis=axis)
        self.shape = self.shape[:axis] + self.shape[axis + 1:]
        self.strides = self.strides[:axis] + self.strides[axis + 1:]

    def view_dtype(self, dtype, itemsize):
        """Views a byte tensor whose last axis is contiguous as wider
        elements (what the runner's .view(spec.dtype) does)."""
        if self.itemsize != 1 or not self.torch or self.strides[-1] != 1 or self.shape[-1] % itemsize \
                or any(s % itemsize for s, n in zip(self.strides[:-1], self.shape[:-1]) if n > 1):
            return False
        import torch
        self.obj = self.obj.view(getattr(torch, dtype))
        self.shape = tuple(int(d) for d in self.obj.shape)
        self.strides = tuple(int(x) for x in self.obj.stride())
        self.itemsize, self.dtype = itemsize, dtype
        return True

    def _numpy(self, a):
        self.obj, self.torch = a, False
        self.shape = tuple(int(d) for d in a.shape)
        self.itemsize = a.itemsize
        for s in a.strides:
            if s % a.itemsize:
                raise ExportError(f"{self.what}: byte strides {a.strides} are not whole {a.itemsize}-byte elements")
        self.strides = tuple(int(s) // a.itemsize for s in a.strides)
        self.dtype = _dtype_name(a.dtype)
        self.ptr = a.__array_interface__["data"][0]
        self.device = "cpu"

    def _raw(self, d):
        """A tensor in a raw buffer: dtype, shape, strides (elements) and a
        byte offset, as a docs/spec.md §10 raw source describes it. The description is
        checked against the buffer before anything is read."""
        what = self.what
        try:
            dtype = _dtype_name(d["dtype"])
            shape = [int(x) for x in d["shape"]]
            offset = int(d.get("offset", 0))
            buf = np.frombuffer(d["buffer"], dtype=np.uint8) if not isinstance(d["buffer"], np.ndarray) \
                else d["buffer"].reshape(-1).view(np.uint8)
        except (KeyError, TypeError, ValueError) as e:
            raise ExportError(f"{what}: bad raw tensor description: {e}") from None
        size = _elem_size(dtype, what)
        strides = d.get("strides")
        if strides is None:
            strides, acc = [], 1
            for n in reversed(shape):
                strides.insert(0, acc)
                acc *= n
        strides = [int(s) for s in strides]
        if len(strides) != len(shape):
            raise ExportError(f"{what}: {len(strides)} strides for shape {shape}")
        if any(n < 0 for n in shape) or any(s < 0 for s in strides) or offset < 0:
            raise ExportError(f"{what}: negative shape, stride or offset in {shape}, {strides}, {offset}")
        check_strides(tuple(shape), tuple(strides), what)
        extent = (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * size if all(shape) else 0
        if offset + extent > buf.size:
            raise ExportError(f"{what}: shape {shape} with strides {strides} at offset {offset} needs "
                              f"{offset + extent} bytes, the buffer holds {buf.size}")
        ints = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[size]
        base = buf[offset:offset + max(extent, size)]
        if base.size < size:
            base = np.zeros(size, np.uint8)
        view = np.lib.stride_tricks.as_strided(base.view(ints), shape=shape,
                                               strides=[s * size for s in strides], writeable=False)
        self._numpy(view)
        self.dtype = dtype

    def gather(self, order, axis, rows):
        """Returns a contiguous host array of the tensor with its axes in
        `order`, keeping only `rows` of axis `axis` (a position in order)."""
        if self.torch:
            import torch
            t = self.obj.detach().permute(*order)
            idx = torch.as_tensor(rows, dtype=torch.long, device=t.device)
            g = t.index_select(axis, idx)
            if g.device.type != "cpu":
                g = g.to("cpu")
            g = g.contiguous()
            ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[g.element_size()]
            return g.view(ints).numpy()
        a = np.transpose(self.obj, order)
        return np.take(a, rows, axis=axis)

    def same_memory(self, other):
        return self.orig == other.orig


def check_strides(shape, strides, what):
    """Fails unless shape and strides (in elements) describe distinct
    memory for every element: sorted by stride, each axis must step over
    the whole of the axes inside it."""
    if len(shape) != len(strides):
        raise ExportError(f"{what}: {len(strides)} strides for {len(shape)} dimensions")
    axes = sorted((s, n, i) for i, (n, s) in enumerate(zip(shape, strides)) if n > 1)
    need = 1
    for s, n, i in axes:
        if s < need:
            raise ExportError(f"{what}: strides {list(strides)} do not fit shape {list(shape)}: axis {i} "
                              f"(size {n}) steps {s} elements, inside the {need} the axes within it span "
                              "(overlapping memory is no KV cache)")
        need = s * n


def memory_order(shape, strides):
    """The axes in memory order: outermost (largest stride) first; axes of
    size 1 first of all (their stride is meaningless)."""
    return sorted(range(len(shape)), key=lambda i: (shape[i] != 1, -strides[i], i))


# ---------------------------------------------------------------------------
# State splits (docs/spec.md §6) of vLLM's state layers.

def _conv_axis(conv_layout):
    if conv_layout not in ("SD", "DS"):
        raise ExportError(f"conv_layout {conv_layout!r}: want SD (state_len, dim) or DS (dim, state_len)")
    return 1 if conv_layout == "SD" else 0


def mamba2_state_splits(tp_size, intermediate_size, n_groups, num_heads, state_size, conv_layout="SD"):
    """The TP splits of a Mamba2 layer's (conv, ssm) states as vLLM's
    MambaStateShapeCalculator.mamba2_state_shape lays them out: the conv
    state's channels are [x, B, C], x sharded, B and C sharded by group, or
    replicated when n_groups does not divide the TP size (one group: every
    rank holds it); the ssm state (heads, head_dim, state_size) sharded by
    head. conv_layout is vLLM's VLLM_SSM_CONV_STATE_LAYOUT (SD by default)."""
    if n_groups % tp_size == 0:
        local, reps = n_groups // tp_size, 1
    elif tp_size % n_groups == 0:
        local, reps = 1, tp_size // n_groups
    else:
        raise ExportError(f"mamba2: {n_groups} groups over TP {tp_size} is no split vLLM makes")
    bc = local * state_size
    return [
        {"axis": _conv_axis(conv_layout),
         "segments": [[intermediate_size // tp_size, 1], [bc, reps], [bc, reps]]},
        {"axis": 0, "segments": [[num_heads // tp_size, 1]]},
    ]


def gdn_state_splits(tp_size, num_k_heads, num_v_heads, head_k_dim, head_v_dim, conv_layout="SD"):
    """The TP splits of a gated-delta-net layer's (conv, ssm) states: conv
    channels [q, k, v], each sharded; ssm (v heads, head_v_dim, head_k_dim)
    sharded by value head."""
    qk = num_k_heads * head_k_dim // tp_size
    return [
        {"axis": _conv_axis(conv_layout),
         "segments": [[qk, 1], [qk, 1], [num_v_heads * head_v_dim // tp_size, 1]]},
        {"axis": 0, "segments": [[num_v_heads // tp_size, 1]]},
    ]


def mamba1_state_splits(tp_size, intermediate_size, conv_layout="SD"):
    """The TP splits of a Mamba1 layer's (conv, ssm) states: channels
    sharded in both."""
    n = intermediate_size // tp_size
    return [{"axis": _conv_axis(conv_layout), "segments": [[n, 1]]},
            {"axis": 0, "segments": [[n, 1]]}]


# ---------------------------------------------------------------------------
# The plan: every layer's place in the dump, checked before anything is read.

class LayerPlan:
    """One layer: its group, manifest entry and how to read its blocks.
    For attention: the tensor, its axes in memory order (order, names) and
    the kernel blocks per block (k). For state layers: the state tensors."""

    def __init__(self, name, group):
        self.name, self.group = name, group
        self.tensor = None
        self.states = None  # state layers given as the list of their state tensors
        self.pages = None  # state layers given as one tensor of raw pages
        self.page = 0  # covered bytes of a state layer's page
        self.alias_of = None
        self.order = self.names = None
        self.k = 1
        self.narrow = None  # (axis, size): a padded page's axis, covered up to size
        self.address = None  # the engine's address of the first element
        self.state_addresses = None
        self.entry = {}

    def is_state(self):
        return self.states is not None or self.pages is not None


class Plan:
    """The groups and layers of one rank's cache, as a dump describes them
    (before block selection): groups[i] = {"id", "kind", "block_size",
    "layers": [LayerPlan]}."""

    def __init__(self, num_blocks, groups):
        self.num_blocks, self.groups = num_blocks, groups

    def layers(self):
        for g in self.groups:
            yield from g["layers"]


def _norm_split(split, state_shape, what):
    if split is None:
        return None
    try:
        axis = int(split["axis"])
        segs = [[int(a), int(b)] for a, b in split["segments"]]
    except (KeyError, TypeError, ValueError):
        raise ExportError(f"{what}: a split is {{\"axis\", \"segments\": [[local_size, replicas], ...]}}, got {split!r}") from None
    if not 0 <= axis < len(state_shape):
        raise ExportError(f"{what}: split axis {axis} is not an axis of shape {list(state_shape)}")
    if sum(a for a, _ in segs) != state_shape[axis] or any(a < 1 or b < 1 for a, b in segs):
        raise ExportError(f"{what}: split segments {segs} do not add up to axis {axis} of shape "
                          f"{list(state_shape)} ({state_shape[axis]})")
    return {"axis": axis, "segments": segs}


# vLLM's logical axis orders (the torch shape order of what the runner
# binds), used only to break a tie between two readings of one shape:
# FlashAttention (2, blocks, tokens, heads, dim), FlashInfer and Triton
# (blocks, 2, tokens, heads, dim), MLA (blocks, tokens, dim), fp8_ds_mla
# (blocks, tokens, cell), and the layout refactor's [B, H, N, C] views
# (create_kv_cache_views), C holding K then V of one head and token.
_KNOWN_ORDERS = [
    ("kv", "block", "token", "head", "dim"),
    ("block", "kv", "token", "head", "dim"),
    ("block", "token", "dim"),
    ("block", "token", "cell"),
    ("block", "head", "token", "dim"),
    ("block", "head", "token", "cell"),
]


def _attention_axes(t, info, num_blocks, layout, what):
    """Reads an attention cache tensor's geometry from its shape and the
    layer's spec, whatever the order of its axes (the strides say where
    the memory is): a block axis of num_blocks * k kernel blocks of
    block_size / k tokens, a token axis, the KV heads (an axis of
    num_kv_heads; absent or of size 1 for one head), K and V either split
    by an axis of 2 or concatenated in the last axis (C = head_size +
    head_size_v, as the layout refactor's [B, H, N, C] views hold them),
    and the head's elements (head_size; MLA's latent, head_size_v 0; the
    last axis widened to fill page_size_padded, pre-refactor; fp8_ds_mla's
    656-byte cells). Changes t in place to a view with one axis per name
    (the concatenated K|V split into kv and dim, an MLA head axis of 1
    dropped) and returns (names, k, width) for it. Refuses, naming the
    layer, its shape and strides and what was expected, anything else."""
    mla = info["kind"] == "mla"
    S, H, D = info["block_size"], info["num_kv_heads"], info["head_size"]
    Dv = D if mla else info.get("head_size_v", D)
    if mla and H != 1:
        raise ExportError(f"{what}: an MLA spec has one KV head, this one says {H}")
    cell = info.get("cell_bytes")
    if cell and t.itemsize != 1:
        raise ExportError(f"{what}: an fp8_ds_mla cache is bytes, got {t.itemsize}-byte elements ({t.dtype})")
    last, width = ("cell", cell) if cell else ("dim", D)
    padded = info.get("page_size_padded")
    shape = t.shape
    geometry = f"shape {list(shape)}, strides {list(t.strides)} ({t.itemsize}-byte {t.dtype})"
    if not mla and not cell and Dv != D:
        raise ExportError(f"{what}: head_size {D} and head_size_v {Dv} differ: a cell of K then V of unequal "
                          f"sizes is no K/V cell kvaudit reads (docs/spec.md §1); {geometry}")
    if layout:
        names = tuple(layout)
        if len(names) != len(shape):
            raise ExportError(f"{what}: layout {list(names)} names {len(names)} axes, the tensor has {geometry}")
        candidates = [names]
    else:
        candidates = []
        base = ["block", "token", last] + ([] if mla or cell else ["kv"])
        for extra in ([], ["head"]):
            want = base + extra
            if len(want) != len(shape):
                # K|V concatenated: no kv axis, the last one holds both.
                want = [n for n in want if n != "kv"]
                if len(want) != len(shape):
                    continue
            for perm in _permutations(want):
                if perm not in candidates:
                    candidates.append(perm)

    def fits(names):
        size = dict(zip(names, shape))
        if len(size) != len(names) or set(names) - {"kv", "block", "token", "head", "dim", "cell"} \
                or last not in size or "block" not in size or "token" not in size:
            return None
        N, T = size["block"], size["token"]
        if not N or N % num_blocks or not T:
            return None
        k = N // num_blocks
        if T * k != S:
            return None
        if size.get("head", 1) != (1 if mla else H) or ("kv" in size and (size["kv"] != 2 or mla or cell)):
            return None
        w = size[last]
        if not (mla or cell) and "kv" not in size:
            # K and V concatenated in the last axis (the [B, H, N, C] views).
            return (k, "concat") if w == D + Dv else None
        if w == width:
            return (k, None)
        # A padded page (pre-refactor): the last axis widened to fill page_size_padded.
        block_bytes = int(np.prod(shape)) // num_blocks * t.itemsize
        if padded is not None and w > width and block_bytes == padded and names[-1] == last:
            return (k, "narrow")
        return None

    fitting = [(names, f) for names in candidates for f in [fits(names)] if f is not None]
    if len(fitting) > 1:
        known = [(n, f) for n, f in fitting if tuple(x for x in n) in _KNOWN_ORDERS]
        if len(known) == 1:
            fitting = known
    if len(fitting) != 1:
        heads = "one KV head" if mla else f"{H} KV heads"
        kv = "" if mla or cell else (f", K and V split by an axis of 2 or concatenated in the last axis "
                                     f"({D} + {Dv} elements)")
        pad = f", or the last axis widened to fill page_size_padded {padded} bytes" if padded is not None else ""
        expected = (f"a block axis of {num_blocks} blocks (or k times as many kernel blocks of block_size/k "
                    f"tokens), a token axis making {S} tokens a block, {heads}{kv}, {width} "
                    f"{'bytes a cell' if cell else 'elements a head'}{pad}")
        if fitting:
            readings = " or ".join("[" + ", ".join(n) + "]" for n, _ in fitting)
            raise ExportError(f"{what}: {geometry} reads as {readings} alike; pass its layout (layouts=...); "
                              f"expected {expected}")
        raise ExportError(f"{what}: {geometry} is no KV cache its {info['spec']} describes: expected {expected}")
    names, (k, how) = fitting[0]
    names = list(names)
    if how == "concat":
        i = names.index("dim")
        t.split_axis(i, (2, D))
        names[i:i + 1] = ["kv", "dim"]
    if mla and "head" in names:
        t.drop_axis(names.index("head"))
        names.remove("head")
    return names, k, width


def _permutations(items):
    if len(items) <= 1:
        return [tuple(items)]
    out = []
    for i, x in enumerate(items):
        for rest in _permutations(items[:i] + items[i + 1:]):
            out.append((x,) + rest)
    return out


def build_plan(kv_cache_config, kv_caches, *, state_splits=None, layouts=None, covered_states=None):
    """Checks the cache description and returns its Plan. state_splits
    maps a layer name, a group id or "*" to the splits of the layer's states
    (see mamba2_state_splits); layouts maps a layer name to its logical
    axis names when its shape is none of vLLM's; covered_states maps a layer
    name, a group id or "*" to the number of leading states to cover (all by
    default)."""
    _need_numpy()
    state_splits, layouts, covered_states = state_splits or {}, layouts or {}, covered_states or {}
    num_blocks = int(_field(kv_cache_config, "num_blocks", what="kv_cache_config"))
    if num_blocks < 1:
        raise ExportError(f"kv_cache_config: num_blocks {num_blocks} is not positive")
    group_specs = list(_field(kv_cache_config, "kv_cache_groups", what="kv_cache_config"))
    grouped = {}
    groups = []
    for gid, gs in enumerate(group_specs):
        names = list(_field(gs, "layer_names", what=f"kv_cache_groups[{gid}]"))
        spec = _field(gs, "kv_cache_spec", what=f"kv_cache_groups[{gid}]")
        g = {"id": gid, "layers": []}
        for name in names:
            if name in grouped:
                raise ExportError(f"layer {name!r} is in groups {grouped[name]} and {gid}")
            grouped[name] = gid
            info = _spec_info(spec, name)
            if "kind" in g and (info["kind"], info["block_size"]) != (g["kind"], g["block_size"]):
                raise ExportError(f"layer {name!r}: a {info['kind']} spec of block size {info['block_size']} "
                                  f"in group {gid} of {g['kind']} with block size {g['block_size']}")
            g.setdefault("kind", info["kind"])
            g.setdefault("block_size", info["block_size"])
            if "sliding_window" in info:
                g["sliding_window"] = info["sliding_window"]
            if info["kind"] == "mamba":
                g.setdefault("mamba_cache_mode", info["mamba_cache_mode"])
            g["layers"].append(_plan_layer(name, g, info, kv_caches, num_blocks, state_splits,
                                           layouts.get(name), covered_states))
        if g["layers"]:
            groups.append(g)
    # KV sharing outside the config: the runner adds each KV-sharing layer
    # to its own copy of the KVCacheConfig (add_kv_sharing_layers_to_kv_cache_
    # groups), so the config a connector holds lacks it while the dict it
    # registers binds it to its target's very tensor. Such a layer is an
    # alias in its target's group; any other layer outside the groups has
    # no block table and is refused.
    by_memory = [lp for g in groups for lp in g["layers"] if lp.tensor is not None]
    for name, cache in kv_caches.items():
        if name in grouped:
            continue
        target = None
        if _is_tensor_like(cache):
            t = _Tensor(cache, f"layer {name!r}")
            target = next((lp for lp in by_memory if lp.tensor.same_memory(t)), None)
        if target is None:
            raise ExportError(f"layer {name!r} is in no KV cache group of kv_cache_config and is bound to "
                              "no grouped layer's tensor (its blocks would be numbered by no block table)")
        alias = LayerPlan(name, target.group)
        alias.tensor, alias.alias_of = target.tensor, target.name
        alias.entry = {"name": name, "dtype": target.entry["dtype"]}
        target.group["layers"].append(alias)
        grouped[name] = target.group["id"]
    # KV sharing: a layer bound to the very tensor of another layer of its
    # group is an alias. Across groups, shared memory is vLLM's hybrid
    # allocator (one KVCacheTensor shared_by a layer of each group, kept
    # apart by block ids from one pool): each layer reads its own blocks.
    for g in groups:
        seen = []
        for lp in g["layers"]:
            if lp.tensor is None or lp.alias_of:
                continue
            for other in seen:
                if other.tensor.same_memory(lp.tensor):
                    lp.alias_of = other.name
                    break
            else:
                seen.append(lp)
    return Plan(num_blocks, groups)


def _lookup(table, name, group_id, default=None):
    for key in (name, group_id, str(group_id), "*"):
        if key in table:
            return table[key]
    return default


def _is_tensor_like(x):
    return _is_torch(x) or isinstance(x, (np.ndarray, dict))


def _plan_layer(name, g, info, kv_caches, num_blocks, state_splits, layout, covered_states):
    what = f"layer {name!r}"
    lp = LayerPlan(name, g)
    if name not in kv_caches:
        raise ExportError(f"{what} of group {g['id']} has no tensor in kv_caches")
    cache = kv_caches[name]
    lp.entry = {"name": name}
    if info["spec"] != _DEFAULT_SPEC[info["kind"]]:
        lp.entry["spec"] = info["spec"]
    if info["kind"] == "mamba":
        return _plan_state_layer(lp, cache, info, num_blocks, state_splits, covered_states, what)
    if not _is_tensor_like(cache):
        raise ExportError(f"{what}: an attention layer's cache is one tensor, got a {type(cache).__name__}")
    t = _Tensor(cache, what)
    size = _elem_size(info["dtype"], what)
    if t.itemsize != size and not (info.get("cell_bytes") and t.itemsize == 1) and not t.view_dtype(info["dtype"], size):
        raise ExportError(f"{what}: {t.itemsize}-byte elements ({t.dtype}), the spec says {info['dtype']} "
                          f"(shape {list(t.shape)}, strides {list(t.strides)})")
    names, lp.k, _ = _attention_axes(t, info, num_blocks, layout, what)
    lp.tensor = t
    lp.order = memory_order(t.shape, t.strides)
    lp.names = [names[i] for i in lp.order]
    lp.logical = list(names)
    lp.address = t.ptr
    last = "cell" if info.get("cell_bytes") else "dim"
    width = info.get("cell_bytes") or info["head_size"]
    if dict(zip(names, t.shape))[last] != width:
        lp.narrow = (last, width)  # a padded page: the head only
    if info.get("cell_bytes"):
        lp.entry.update(dtype=t.dtype)
    else:
        lp.entry.update(dtype=info["dtype"], head_size=info["head_size"])
    if info["kind"] != "mla":
        lp.entry["num_kv_heads"] = info["num_kv_heads"]
    return lp


def _plan_state_layer(lp, cache, info, num_blocks, state_splits, covered_states, what):
    """A Mamba / gated-delta-net layer: its states either as the list of
    state tensors (vLLM before the one-tensor registration) or as the one
    tensor a connector now registers, the layer's raw pages ([num_blocks,
    ...] whose inner axes hold a block's page), which the layer itself
    splits into its states as MambaBase.bind_kv_cache does: each state
    packed from the page start, in the spec's order, row-major in its
    dtype."""
    g, shapes, dtypes = lp.group, info["shapes"], info["dtypes"]
    sizes = [int(np.prod(shape)) * _elem_size(dtype, f"{what} state {i}")
             for i, (shape, dtype) in enumerate(zip(shapes, dtypes))]
    if _is_tensor_like(cache):
        t = _Tensor(cache, what)
        if len(t.shape) < 2 or t.shape[0] != num_blocks:
            raise ExportError(f"{what}: one state tensor holds a page per block, [num_blocks {num_blocks}, ...]; "
                              f"got shape {list(t.shape)}")
        inner, acc = [], 1
        for n in reversed(t.shape[1:]):
            inner.insert(0, acc)
            acc *= n
        if any(s != w for s, w, n in zip(t.strides[1:], inner, t.shape[1:]) if n > 1):
            raise ExportError(f"{what}: strides {list(t.strides)} do not hold each block's page contiguously "
                              f"(shape {list(t.shape)})")
        page = acc * t.itemsize
        # The view covers either the whole (padded) page, as before the
        # layout refactor, or just the states' bytes, the padding in the
        # block stride ([B, 1, 1, C] of create_kv_cache_views).
        padded = info.get("page_size_padded")
        if page not in (sum(sizes), padded or sum(sizes)):
            raise ExportError(f"{what}: shape {list(t.shape)}, strides {list(t.strides)}: a page of {page} bytes, "
                              f"its MambaSpec's states take {sum(sizes)} bytes (states {[list(s) for s in shapes]} "
                              f"of {list(dtypes)}){f', its padded page {padded}' if padded else ''}")
        if t.strides[0] * t.itemsize < page:
            raise ExportError(f"{what}: shape {list(t.shape)}, strides {list(t.strides)}: blocks {t.strides[0] * t.itemsize} "
                              f"bytes apart hold no {page}-byte page")
        lp.pages = t
        lp.state_addresses = [t.ptr + sum(sizes[:i]) for i in range(len(sizes))]
        states = None
    else:
        states = [_Tensor(s, f"{what} state {i}") for i, s in enumerate(cache)]
        if len(states) != len(shapes):
            raise ExportError(f"{what}: {len(states)} state tensors for the {len(shapes)} shapes of its MambaSpec")
        for i, (st, shape, dtype) in enumerate(zip(states, shapes, dtypes)):
            sw = f"{what} state {i}"
            if st.shape != (num_blocks,) + shape:
                raise ExportError(f"{sw}: shape {list(st.shape)} is not [num_blocks {num_blocks}] + "
                                  f"the spec's {list(shape)}")
            if st.itemsize != _elem_size(dtype, sw):
                raise ExportError(f"{sw}: {st.itemsize}-byte elements, the spec says {dtype}")
        lp.state_addresses = [st.ptr for st in states]
    n = _lookup(covered_states, lp.name, g["id"], len(shapes))
    if not 1 <= n <= len(shapes):
        raise ExportError(f"{what}: cover 1..{len(shapes)} states, not {n}")
    splits = _lookup(state_splits, lp.name, g["id"])
    if splits is not None and len(splits) < n:
        raise ExportError(f"{what}: {len(splits)} splits for {n} covered states")
    entry_states = []
    for i in range(n):
        e = {"dtype": dtypes[i], "shape": list(shapes[i])}
        if splits is not None:
            e["split"] = _norm_split(splits[i], shapes[i], f"{what} state {i}")
        entry_states.append(e)
    if splits is not None and (None in [e.get("split") for e in entry_states]):
        raise ExportError(f"{what}: give a split for every covered state or for none")
    lp.states = states[:n] if states is not None else None
    lp.page = sum(sizes[:n])
    lp.address = lp.state_addresses[0]
    lp.entry.update(dtype="uint8", layout=["block", "page"], states=entry_states)
    return lp


# ---------------------------------------------------------------------------
# The cross-layer cache: one tensor for all layers.

def _tensor_layers(t, i):
    names = _field(t, "shared_by", "layers", what=f"kv_cache_tensors[{i}]")
    return list(names)


def cross_layer_caches(kv_cache_config, kv_cache, attn_backend, *, kernel_block_sizes=None, cache_dtype="auto"):
    """Returns layer name -> cache: the per-layer views of vLLM's
    cross-layer KV cache, the one tensor a connector that prefers
    cross-layer blocks receives in register_cross_layers_kv_cache(kv_cache,
    attn_backend), carved as the model runner carves them. Layer i of the
    tensor is kv_cache_config.kv_cache_tensors[i] (every layer its
    shared_by names). Two forms are read:

    - typed, in the backend's physical order with a layers axis
      (allocate_uniform_kv_caches: get_kv_cache_stride_order(
      include_num_layers_dimension=True) applied to (num_layers,) +
      get_kv_cache_shape(...)); the views are its permutation back to the
      logical order, indexed by layer;
    - raw bytes [num_blocks, num_layers, page_size_bytes] (the per-page-
      size cross-layer groups): an attention layer's view is its slice,
      typed and shaped as the backend's physical page and permuted to the
      logical order; a state layer's is its [num_blocks, page] bytes, the
      one-tensor form export_dump reads.

    kernel_block_sizes are the runner's per group (the group's block size
    by default); attn_backend needs vLLM's static get_kv_cache_shape and
    get_kv_cache_stride_order."""
    _need_numpy()
    if not _is_torch(kv_cache):
        raise ExportError(f"cross-layer cache: a torch tensor, got a {type(kv_cache).__name__}")
    tensors = list(_field(kv_cache_config, "kv_cache_tensors", what="kv_cache_config"))
    groups = list(_field(kv_cache_config, "kv_cache_groups", what="kv_cache_config"))
    num_layers = len(tensors)
    if not tensors or not groups:
        raise ExportError("cross-layer cache: kv_cache_config has no KV cache tensors or groups")
    spec_of, gid_of = {}, {}
    for gid, gs in enumerate(groups):
        spec = _field(gs, "kv_cache_spec", what=f"kv_cache_groups[{gid}]")
        for name in _field(gs, "layer_names", what=f"kv_cache_groups[{gid}]"):
            per_layer = _field(spec, "kv_cache_specs", default=None)
            spec_of[name] = per_layer[name] if per_layer is not None and name in per_layer else spec
            gid_of[name] = gid
    names = [_tensor_layers(t, i) for i, t in enumerate(tensors)]
    for i, ns in enumerate(names):
        for n in ns:
            if n not in spec_of:
                raise ExportError(f"cross-layer cache: layer {n!r} of kv_cache_tensors[{i}] is in no KV cache group")
    first = names[0][0]
    info = _spec_info(spec_of[first], first)
    num_blocks = int(_field(kv_cache_config, "num_blocks", what="kv_cache_config"))
    shape = tuple(int(d) for d in kv_cache.shape)

    def kernel(name):
        gid = gid_of[name]
        bs = _spec_info(spec_of[name], name)["block_size"]
        kbs = int(kernel_block_sizes[gid]) if kernel_block_sizes is not None else bs
        if kbs < 1 or bs % kbs:
            raise ExportError(f"cross-layer cache: kernel block size {kbs} does not divide block size {bs}")
        return bs // kbs, kbs

    def logical_shape(name, blocks):
        i = _spec_info(spec_of[name], name)
        k, kbs = kernel(name)
        return tuple(int(d) for d in attn_backend.get_kv_cache_shape(
            blocks * k, kbs, i["num_kv_heads"], i["head_size"], cache_dtype_str=cache_dtype))

    def stride_order(with_layers, n):
        try:
            if with_layers:
                order = attn_backend.get_kv_cache_stride_order(include_num_layers_dimension=True)
            else:
                order = attn_backend.get_kv_cache_stride_order()
            order = tuple(int(d) for d in order)
        except (AttributeError, NotImplementedError):
            return None if with_layers else tuple(range(n))
        return order if sorted(order) == list(range(n)) else None

    out = {}
    if info["kind"] != "mamba":
        logical = logical_shape(first, num_blocks)
        order = stride_order(True, len(logical) + 1)
        if order is not None:
            full = (num_layers,) + logical
            if shape == tuple(full[j] for j in order):
                view = kv_cache.permute(*[order.index(j) for j in range(len(order))])
                for i, ns in enumerate(names):
                    for n in ns:
                        out[n] = view[i]
                return out
    page = None
    if len(shape) == 3 and shape[0] == num_blocks and shape[1] == num_layers and kv_cache.element_size() == 1:
        page = shape[2]
    if page is None:
        raise ExportError(f"cross-layer cache: shape {list(shape)} is neither the backend's physical layout "
                          f"with a layers axis nor bytes [num_blocks {num_blocks}, num_layers {num_layers}, page]")
    for i, ns in enumerate(names):
        name = ns[0]
        li = _spec_info(spec_of[name], name)
        if li["kind"] == "mamba":
            view = kv_cache[:, i]
        else:
            dtype = _field(spec_of[name], "dtype", what=f"layer {name!r}: kv_cache_spec")
            k, _ = kernel(name)
            el = _elem_size(li["dtype"], f"layer {name!r}")
            if page % (el * k):
                raise ExportError(f"layer {name!r}: a page of {page} bytes is no whole number of "
                                  f"{k} kernel blocks of {el}-byte elements")
            typed = kv_cache.view(dtype).view(num_blocks * k, num_layers, page // el // k)
            logical = logical_shape(name, num_blocks)
            order = stride_order(False, len(logical))
            sentinel = logical_shape(name, 1234)
            if sentinel.count(1234 * k) != 1:
                raise ExportError(f"layer {name!r}: the backend's shape {list(logical)} has no block axis")
            bpos = order.index(sentinel.index(1234 * k))
            physical = [logical[j] for j in order]
            page_shape = physical[:bpos] + physical[bpos + 1:]
            if int(np.prod(page_shape)) * el * k != page:
                raise ExportError(f"layer {name!r}: the backend's page {page_shape} is not the cache's "
                                  f"{page // k} bytes per kernel block")
            sliced = typed.view(num_blocks * k, num_layers, *page_shape)[:, i]
            ours = [0 if p == bpos else (p + 1 if p < bpos else p) for p in (order.index(j) for j in range(len(order)))]
            view = sliced.permute(*ours)
        for n in ns:
            out[n] = view
    return out


# ---------------------------------------------------------------------------
# Requests and block selection.

def _request_fields(r, i):
    what = f"requests[{i}]"
    rid = _field(r, "id", "req_id", "request_id", what=what)
    block_ids = _field(r, "block_ids", "block_table", what=f"request {rid!r}")
    if hasattr(block_ids, "get_block_ids"):  # KVCacheBlocks
        block_ids = block_ids.get_block_ids()
    out = {
        "id": str(rid),
        "num_tokens": int(_field(r, "num_tokens", what=f"request {rid!r}")),
        "num_local_computed_tokens": int(_field(r, "num_local_computed_tokens", default=0) or 0),
        "producer_id": _field(r, "producer_id", default=None),
        "engine_request_id": _field(r, "engine_request_id", default=None),
        "state_block": _field(r, "state_block", default=None) or {},
        "block_ids": block_ids,
    }
    return out


def _group_table(block_ids, gid):
    if isinstance(block_ids, dict):
        for key in (gid, str(gid)):
            if key in block_ids:
                return block_ids[key]
        return None
    block_ids = list(block_ids)
    return block_ids[gid] if gid < len(block_ids) else None


def _select(plan, requests, null_block_id):
    """Returns (manifest requests with the worker's block ids, the sorted
    block ids to copy)."""
    out, used = [], set()
    for i, r in enumerate(requests):
        f = _request_fields(r, i)
        rid = f["id"]
        m = {"id": rid, "num_tokens": f["num_tokens"]}
        if f["num_local_computed_tokens"]:
            m["num_local_computed_tokens"] = f["num_local_computed_tokens"]
        if f["producer_id"] is not None and str(f["producer_id"]) != rid:
            m["producer_id"] = str(f["producer_id"])
        if f["engine_request_id"] is not None and str(f["engine_request_id"]) != rid:
            m["engine_request_id"] = str(f["engine_request_id"])
        if not 0 <= f["num_local_computed_tokens"] <= f["num_tokens"]:
            raise ExportError(f"request {rid!r}: num_local_computed_tokens {f['num_local_computed_tokens']} "
                              f"is not in 0..num_tokens ({f['num_tokens']})")
        for g in plan.groups:
            gid, S = g["id"], g["block_size"]
            first = g["layers"][0].name
            table = _group_table(f["block_ids"], gid)
            if table is None:
                continue
            ids = [None if (b is None or (null_block_id is not None and int(b) == null_block_id)) else int(b)
                   for b in list(table)]
            for b in ids:
                if b is not None and not 0 <= b < plan.num_blocks:
                    raise ExportError(f"request {rid!r}, group {gid} (layer {first!r}): block id {b} is "
                                      f"past the cache ({plan.num_blocks} blocks)")
            if g["kind"] == "mamba":
                sb = _lookup(f["state_block"], None, gid)
                if sb is None:
                    live = [b for b in ids if b is not None]
                    if not live:
                        continue
                    mode = g.get("mamba_cache_mode", "none")
                    if mode == "none":
                        sb = live[0]  # the running state's block (state_indices = block_table[:, 0])
                    else:
                        # "align" and "all": the state after num_tokens tokens is
                        # in the block at position (num_tokens - 1) // block_size
                        # (mamba_utils' first_state_slot).
                        pos = max(0, (f["num_tokens"] - 1) // S)
                        if pos >= len(ids) or ids[pos] is None:
                            raise ExportError(
                                f"request {rid!r}, group {gid} (layer {first!r}): mamba_cache_mode {mode!r} keeps "
                                f"the running state of {f['num_tokens']} tokens at position {pos}, which is "
                                f"{'past its ' + str(len(ids)) + ' blocks' if pos >= len(ids) else 'a null block'}")
                        sb = ids[pos]
                sb = int(sb)
                if not 0 <= sb < plan.num_blocks:
                    raise ExportError(f"request {rid!r}, group {gid} (layer {first!r}): state block {sb} is "
                                      f"past the cache ({plan.num_blocks} blocks)")
                m.setdefault("state_block", {})[str(gid)] = sb
                used.add(sb)
                continue
            end = -(-f["num_tokens"] // S)
            if len(ids) < end:
                raise ExportError(f"request {rid!r}, group {gid} (layer {first!r}): {len(ids)} blocks hold "
                                  f"no {f['num_tokens']} tokens of {S}")
            ids = ids[:end]
            m.setdefault("block_table", {})[str(gid)] = ids
            used.update(b for b in ids if b is not None)
        out.append(m)
    if not used:
        raise ExportError("the requests hold no block to export")
    return out, sorted(used)


def _remap(requests, selected):
    new = {b: i for i, b in enumerate(selected)}
    for m in requests:
        for key, ids in m.get("block_table", {}).items():
            m["block_table"][key] = [None if b is None else new[b] for b in ids]
        for key, b in m.get("state_block", {}).items():
            m["state_block"][key] = new[b]
    return requests


# ---------------------------------------------------------------------------
# Writing.

def write_safetensors(f, tensors, metadata):
    """Writes a safetensors header (padded with spaces to 8 bytes) for
    tensors [(name, st_dtype, shape, nbytes)] in order, contiguous from 0;
    the caller writes the data after it, in the same order."""
    header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    offset = 0
    for name, st, shape, nbytes in tensors:
        if name in header:
            raise ExportError(f"tensor {name!r} appears twice")
        header[name] = {"dtype": st, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    return offset


def _manifest(plan, requests, num_blocks, *, tp_rank, tp_size, pp_rank, pp_size, model, model_num_kv_heads,
              layer_entry, agent=None):
    groups = []
    for g in plan.groups:
        mg = {"id": g["id"], "kind": g["kind"], "block_size": g["block_size"], "layers": []}
        if "sliding_window" in g and g["kind"] == "sliding_window":
            mg["sliding_window"] = g["sliding_window"]
        for lp in g["layers"]:
            mg["layers"].append(layer_entry(lp))
        groups.append(mg)
    parallel = {"tp_rank": tp_rank, "tp_size": tp_size, "pp_rank": pp_rank, "pp_size": pp_size}
    if agent is not None:
        parallel["agent"] = agent
    return {
        "format": MANIFEST_FORMAT,
        "model": {"name": model, "num_kv_heads": model_num_kv_heads},
        "parallel": parallel,
        "num_blocks": num_blocks,
        "groups": groups,
        "requests": requests,
    }


def _check_parallel(tp_rank, tp_size, pp_rank, pp_size, agent=None):
    if not (0 <= tp_rank < tp_size and 0 <= pp_rank < pp_size):
        raise ExportError(f"tp_rank {tp_rank} of {tp_size}, pp_rank {pp_rank} of {pp_size}: not a rank")
    if agent is not None and (not isinstance(agent, str) or not agent):
        raise ExportError(f"agent {agent!r}: a NIXL agent name is a non-empty string")


def hex_address(ptr):
    """A device address as the manifest writes it: "0x" and lower-case hex."""
    return f"0x{int(ptr):x}"


def _with_addresses(lp, e):
    """The layer entry e with the engine's addresses of its first element
    (and of each covered state's)."""
    if lp.address is not None:
        e["address"] = hex_address(lp.address)
    if lp.state_addresses is not None and "states" in e:
        e["states"] = [dict(st, address=hex_address(a)) for st, a in zip(e["states"], lp.state_addresses)]
    return e


def _publish(tmp, path):
    """Gives the finished file tmp its name path, never replacing a file
    that appeared there meanwhile (a hard link fails on an existing name)."""
    try:
        os.link(tmp, path)
    except OSError as e:
        if os.path.exists(path):
            os.unlink(tmp)
            raise FileExistsError(f"{path!r} exists: not overwritten") from e
        os.replace(tmp, path)  # a file system without hard links
        return
    os.unlink(tmp)


def export_dump(path, kv_cache_config, kv_caches, requests, *, tp_rank=0, tp_size=1, pp_rank=0,
                pp_size=1, model="", model_num_kv_heads=0, state_splits=None, layouts=None,
                covered_states=None, null_block_id=0, agent=None):
    """Writes one rank's dump of the requests' blocks to path (a new
    .safetensors file; an existing file is never overwritten) and returns
    a summary: {"num_blocks", "block_ids" (the worker's id of each dump
    block), "bytes", "max_layer_bytes"}.

    Everything is checked before any file is created; then each layer's
    selected blocks are gathered, copied to the host and written, one layer
    at a time, into a temporary file that takes the name path when
    complete. null_block_id (vLLM's null block, 0) is exported as a null
    table entry; None keeps every id. Each layer records its address (the
    engine's address of its first element, tensor.data_ptr()); agent, the
    rank's NIXL agent name, is recorded as parallel.agent when given."""
    _check_parallel(tp_rank, tp_size, pp_rank, pp_size, agent)
    plan = build_plan(kv_cache_config, kv_caches, state_splits=state_splits, layouts=layouts,
                      covered_states=covered_states)
    reqs, selected = _select(plan, requests, null_block_id)
    reqs = _remap(reqs, selected)
    if os.path.exists(path):
        raise FileExistsError(f"{path!r} exists: not overwritten")
    n = len(selected)
    tensors, sizes, engine = [], {}, {}
    for lp in plan.layers():
        if lp.alias_of:
            continue
        if lp.is_state():
            shape = [n, lp.page]
            st, nbytes = "U8", n * lp.page
        else:
            shape = [n * lp.k if a == "block" else lp.tensor.shape[i] for a, i in zip(lp.names, lp.order)]
            if lp.narrow:
                shape[lp.names.index(lp.narrow[0])] = lp.narrow[1]
            st = ST_DTYPES[lp.entry["dtype"]][0]
            nbytes = int(np.prod(shape)) * lp.tensor.itemsize
            engine[lp.name] = {"shape": [lp.tensor.shape[i] for i in lp.order],
                               "strides": [lp.tensor.strides[i] for i in lp.order],
                               "itemsize": lp.tensor.itemsize}
        tensors.append((lp.name, st, shape, nbytes))
        sizes[lp.name] = nbytes

    def entry(lp):
        e = dict(lp.entry)
        if lp.alias_of:
            return {"name": lp.name, "dtype": e["dtype"], "alias_of": lp.alias_of}
        e["tensor"] = lp.name
        if not lp.is_state():
            e["layout"] = list(lp.names)
        return _with_addresses(lp, e)

    manifest = _manifest(plan, reqs, n, tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size,
                         model=model, model_num_kv_heads=model_num_kv_heads, layer_entry=entry, agent=agent)
    metadata = {METADATA_KEY: json.dumps(manifest), BLOCK_IDS_KEY: json.dumps(selected),
                ENGINE_KEY: json.dumps(engine)}
    total = 0
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "xb") as f:
            write_safetensors(f, tensors, metadata)
            for lp in plan.layers():
                if lp.alias_of:
                    continue
                data = _gather(lp, selected)
                if data.nbytes != sizes[lp.name]:  # never a dump that does not hold what it says
                    raise ExportError(f"layer {lp.name!r}: gathered {data.nbytes} bytes, planned {sizes[lp.name]}")
                f.write(memoryview(np.ascontiguousarray(data)).cast("B"))
                total += data.nbytes
                del data
        _publish(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return {"num_blocks": n, "block_ids": selected, "bytes": total,
            "max_layer_bytes": max(sizes.values()) if sizes else 0}


def _gather(lp, selected):
    """A layer's selected blocks as a contiguous host array: attention in
    memory order (a padded axis cut to the head), a state layer as [block,
    page] bytes (its covered states packed from the page start)."""
    if lp.pages is not None:
        part = lp.pages.gather(list(range(len(lp.pages.shape))), 0, selected)
        pages = part.reshape(len(selected), -1).view(np.uint8).reshape(len(selected), -1)
        return pages[:, :lp.page]
    if lp.states is not None:
        out = np.empty((len(selected), lp.page), dtype=np.uint8)
        at = 0
        for st in lp.states:
            part = st.gather(list(range(len(st.shape))), 0, selected)
            size = part.nbytes // len(selected)
            out[:, at:at + size] = part.reshape(len(selected), -1).view(np.uint8).reshape(len(selected), size)
            at += size
            del part
        return out
    rows = [b * lp.k + i for b in selected for i in range(lp.k)]
    data = lp.tensor.gather(lp.order, lp.names.index("block"), rows)
    if lp.narrow:
        axis, size = lp.names.index(lp.narrow[0]), lp.narrow[1]
        data = np.ascontiguousarray(np.take(data, np.arange(size), axis=axis))
    return data


# ---------------------------------------------------------------------------
# Live tensors (CUDA IPC): the same plan, sources instead of copies.

def _state_page(lp, what):
    """Checks that a state layer's tensors are views of one page per block,
    packed from the page start (as the runner's as_strided views are), and
    returns the page stride in bytes."""
    s0 = lp.states[0]
    page = s0.strides[0] * s0.itemsize
    at = 0
    for i, st in enumerate(lp.states):
        sw = f"{what} state {i}"
        inner, acc = [], 1
        for n in reversed(st.shape[1:]):
            inner.insert(0, acc)
            acc *= n
        if st.strides[0] * st.itemsize != page or list(st.strides[1:]) != inner:
            raise ExportError(f"{sw}: strides {list(st.strides)} are not one row-major state per "
                              f"page of {page} bytes")
        if st.ptr - s0.ptr != at or st.device != s0.device:
            raise ExportError(f"{sw}: starts {st.ptr - s0.ptr} bytes into the page, packed states put it at {at}")
        at += acc * st.itemsize
    if at > page:
        raise ExportError(f"{what}: its states take {at} bytes, more than the page of {page}")
    return page


def live_manifest(kv_cache_config, kv_caches, requests, handle_fn, *, tp_rank=0, tp_size=1, pp_rank=0,
                  pp_size=1, model="", model_num_kv_heads=0, state_splits=None, layouts=None,
                  covered_states=None, null_block_id=0, agent=None):
    """Returns (manifest, device): the dump manifest of the live cache,
    every layer a docs/spec.md §10 cuda_ipc source over the worker's own tensor (its
    shape and strides as they are, block ids as the worker numbers them).
    handle_fn(tensor) returns (64-byte IPC handle, byte offset of the
    tensor's first element in the allocation the handle maps, device index)."""
    import base64
    _check_parallel(tp_rank, tp_size, pp_rank, pp_size, agent)
    plan = build_plan(kv_cache_config, kv_caches, state_splits=state_splits, layouts=layouts,
                      covered_states=covered_states)
    reqs, _ = _select(plan, requests, null_block_id)
    devices = set()

    def source(t, dtype, shape, strides):
        handle, offset, device = handle_fn(t.obj)
        handle = bytes(handle)
        if len(handle) != 64:
            raise ExportError(f"{t.what}: an IPC handle is 64 bytes, got {len(handle)}")
        devices.add(int(device))
        return {"cuda_ipc": base64.b64encode(handle).decode("ascii"), "offset": int(offset),
                "dtype": dtype, "shape": list(shape), "strides": list(strides)}

    def entry(lp):
        e = dict(lp.entry)
        if lp.alias_of:
            return {"name": lp.name, "dtype": e["dtype"], "alias_of": lp.alias_of}
        if lp.pages is not None:
            t = lp.pages
            page = int(np.prod(t.shape[1:])) * t.itemsize
            e["source"] = source(t, "U8", [plan.num_blocks, page], [t.strides[0] * t.itemsize, 1])
            return _with_addresses(lp, e)
        if lp.states is not None:
            page = _state_page(lp, f"layer {lp.name!r}")
            e["source"] = source(lp.states[0], "U8", [plan.num_blocks, page], [page, 1])
            return _with_addresses(lp, e)
        t = lp.tensor
        shape = list(t.shape)
        if lp.narrow:
            shape[lp.logical.index(lp.narrow[0])] = lp.narrow[1]
        e["source"] = source(t, ST_DTYPES[e["dtype"]][0], shape, t.strides)
        e["layout"] = list(lp.logical)
        return _with_addresses(lp, e)

    manifest = _manifest(plan, reqs, plan.num_blocks, tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank,
                         pp_size=pp_size, model=model, model_num_kv_heads=model_num_kv_heads, layer_entry=entry,
                         agent=agent)
    if len(devices) > 1:
        raise ExportError(f"the KV cache spans devices {sorted(devices)}: export one dump per device")
    return manifest, (devices.pop() if devices else 0)
