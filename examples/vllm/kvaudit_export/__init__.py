"""kvaudit dumps from a vLLM worker's KV cache.

A kvaudit dump is one rank's KV cache: a .safetensors file whose
__metadata__ holds a JSON manifest (kvaudit's docs/spec.md §10). This package
builds one from the objects a vLLM worker already holds, with NumPy only
(and PyTorch when the caches are torch tensors); it never imports vLLM:

- ``kv_cache_config``: vLLM's ``KVCacheConfig`` (``num_blocks`` and
  ``kv_cache_groups``, each a ``KVCacheGroupSpec`` with ``layer_names`` and
  a ``kv_cache_spec``), or a dict with the same fields;
- ``kv_caches``: layer name -> the tensor the model runner bound to the
  layer (an attention layer's KV cache; a Mamba / gated-delta-net layer's
  list of state tensors), as torch tensors, NumPy arrays or raw buffers
  described by ``{"buffer", "offset", "dtype", "shape", "strides"}``;
- ``requests``: the requests to export, each with its id, ``num_tokens``,
  ``num_local_computed_tokens`` (a consumer's local prefix-cache hit),
  ``block_ids`` (one list per KV cache group, as the scheduler's
  ``KVCacheBlocks.get_block_ids()`` and the worker's
  ``CachedRequestState.block_ids`` hold them) and, on a consumer, the
  producer's request id as ``producer_id``.

What each layer holds is read from the tensors themselves, never from a
backend name: the shape is matched against the logical shapes vLLM's
attention backends return from ``get_kv_cache_shape`` (FlashAttention
``(2, blocks, block_size, heads, head_size)``, FlashInfer and Triton
``(blocks, 2, block_size, heads, head_size)``, MLA ``(blocks, block_size,
head_size)``), with the block axis holding ``num_blocks * k`` kernel blocks of
``block_size / k`` tokens when the runner split blocks for the kernel; the
strides say where the memory really is (FlashInfer's HND is a stride order
under an NHD-shaped tensor; a hybrid model's FlashAttention cache has K and V
interleaved per block). A dump writes each layer in its memory order, so its
manifest layout is the memory's.

Only the requests' blocks are copied: each layer's selected blocks are
gathered (on the device for torch tensors), copied to the host and written
before the next layer is read, so host memory stays within about two copies
of one layer's selected blocks whatever the size of the cache. Block ids are
renumbered in the dump (``num_blocks`` is the number of selected blocks);
the metadata key ``kvaudit_export.block_ids`` keeps the worker's ids.

Written for vLLM's v1 engine as on its main branch at commit 001cabc1be16
(vllm-project/vllm): ``vllm/v1/kv_cache_interface.py`` (FullAttentionSpec,
SlidingWindowSpec, MLAAttentionSpec, MambaSpec, UniformTypeKVCacheSpecs,
KVCacheConfig), the runner's ``_reshape_kv_cache_tensors`` (kernel block
sizes, stride orders, Mamba state views with a page stride, the hybrid
attention layout update) and ``mamba_utils`` (conv states ``SD``
``(state_len, dim)`` by default or ``DS`` ``(dim, state_len)``). Block id 0
is vLLM's null block (the BlockPool reserves it), so it is exported as a
null entry.
"""

import json
import struct

import numpy as np

MANIFEST_FORMAT = "kvaudit-dump/1"
METADATA_KEY = "kvaudit.manifest"
BLOCK_IDS_KEY = "kvaudit_export.block_ids"

__all__ = [
    "ExportError", "export_dump", "live_manifest", "build_plan", "Plan",
    "mamba2_state_splits", "mamba1_state_splits", "gdn_state_splits",
    "write_safetensors", "ST_DTYPES",
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


def _dtype_name(dt):
    """A PyTorch dtype name from a torch.dtype, a NumPy dtype or a string."""
    if isinstance(dt, str):
        return dt.removeprefix("torch.")
    if isinstance(dt, np.dtype) or (isinstance(dt, type) and issubclass(dt, np.generic)):
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
        info.update(shapes=shapes, dtypes=dtypes,
                    mamba_cache_mode=str(_field(spec, "mamba_cache_mode", default="none")))
        return info
    info.update(dtype=_dtype_name(_field(spec, "dtype", what=what)),
                num_kv_heads=int(_field(spec, "num_kv_heads", what=what)),
                head_size=int(_field(spec, "head_size", what=what)))
    hv = _field(spec, "head_size_v", default=None)
    if hv is not None and int(hv) != info["head_size"]:
        raise ExportError(f"{what}: head_size_v {hv} differs from head_size {info['head_size']} (not a K/V cell kvaudit reads)")
    if kind == "sliding_window":
        info["sliding_window"] = int(_field(spec, "sliding_window", what=what))
    return info


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
        return (self.ptr, self.shape, self.strides, self.itemsize, self.device) == \
            (other.ptr, other.shape, other.strides, other.itemsize, other.device)


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
        self.states = None
        self.alias_of = None
        self.order = self.names = None
        self.k = 1
        self.entry = {}


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


def _attention_axes(t, info, num_blocks, layout, what):
    """Names the axes of an attention cache tensor (its logical order) and
    returns (names, k): the shape must be one of vLLM's backend shapes for
    this spec (or the explicit layout), with num_blocks * k kernel blocks of
    block_size / k tokens."""
    mla = info["kind"] == "mla"
    S, H, D = info["block_size"], info["num_kv_heads"], info["head_size"]
    if mla and H != 1:
        raise ExportError(f"{what}: an MLA spec has one KV head, this one says {H}")
    shapes = [tuple(layout)] if layout else (_MLA_SHAPES if mla else _ATTENTION_SHAPES)
    fits = []
    for names in shapes:
        if len(names) != len(t.shape):
            continue
        size = dict(zip(names, t.shape))
        N, T = size.get("block", 0), size.get("token", 0)
        if not N or N % num_blocks or not T:
            continue
        k = N // num_blocks
        if T * k != S or size.get("kv", 2) != 2 or size.get("head", 1 if mla else H) != (1 if mla else H) \
                or size.get("dim") != D or set(names) - {"kv", "block", "token", "head", "dim"}:
            continue
        fits.append((names, k))
    if len(fits) == 1:
        return fits[0]
    want = " or ".join("[" + ", ".join(n) + "]" for n in shapes)
    if len(fits) > 1:
        raise ExportError(f"{what}: shape {list(t.shape)} reads as {want} alike; pass its layout")
    raise ExportError(
        f"{what}: shape {list(t.shape)} is not {want} for {num_blocks} blocks of {S} tokens "
        f"(or kernel blocks dividing them), {1 if mla else H} KV heads of size {D}: the tensor and "
        "its kv_cache_spec disagree")


def build_plan(kv_cache_config, kv_caches, *, state_splits=None, layouts=None, covered_states=None):
    """Checks the cache description and returns its Plan. state_splits
    maps a layer name, a group id or "*" to the splits of the layer's states
    (see mamba2_state_splits); layouts maps a layer name to its logical
    axis names when its shape is none of vLLM's; covered_states maps a layer
    name, a group id or "*" to the number of leading states to cover (all by
    default)."""
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
    for name in kv_caches:
        if name not in grouped:
            raise ExportError(f"layer {name!r} is in no KV cache group of kv_cache_config "
                              "(its blocks would be numbered by no block table)")
    # KV sharing: a layer bound to the very tensor of another layer of its
    # group is an alias. Across groups, shared memory is vLLM's hybrid
    # allocator (one KVCacheTensor shared_by a layer of each group, kept
    # apart by block ids from one pool): each layer reads its own blocks.
    for g in groups:
        seen = []
        for lp in g["layers"]:
            if lp.tensor is None:
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
        if _is_torch(cache) or isinstance(cache, (np.ndarray, dict)):
            raise ExportError(f"{what}: a state layer's cache is the list of its state tensors "
                              f"({len(info['shapes'])} for its MambaSpec), got one tensor")
        states = [_Tensor(s, f"{what} state {i}") for i, s in enumerate(cache)]
        if len(states) != len(info["shapes"]):
            raise ExportError(f"{what}: {len(states)} state tensors for the {len(info['shapes'])} shapes of its MambaSpec")
        n = _lookup(covered_states, name, g["id"], len(states))
        if not 1 <= n <= len(states):
            raise ExportError(f"{what}: cover 1..{len(states)} states, not {n}")
        splits = _lookup(state_splits, name, g["id"])
        if splits is not None and len(splits) < n:
            raise ExportError(f"{what}: {len(splits)} splits for {n} covered states")
        entry_states = []
        for i, (st, shape, dtype) in enumerate(zip(states, info["shapes"], info["dtypes"])):
            sw = f"{what} state {i}"
            if st.shape != (num_blocks,) + shape:
                raise ExportError(f"{sw}: shape {list(st.shape)} is not [num_blocks {num_blocks}] + "
                                  f"the spec's {list(shape)}")
            if st.itemsize != _elem_size(dtype, sw):
                raise ExportError(f"{sw}: {st.itemsize}-byte elements, the spec says {dtype}")
            if i < n:
                e = {"dtype": dtype, "shape": list(shape)}
                if splits is not None:
                    e["split"] = _norm_split(splits[i], shape, sw)
                entry_states.append(e)
        if splits is not None and (None in [e.get("split") for e in entry_states]):
            raise ExportError(f"{what}: give a split for every covered state or for none")
        lp.states = states[:n]
        lp.page = sum(int(np.prod(s.shape[1:])) * s.itemsize for s in lp.states)
        lp.entry.update(dtype="uint8", layout=["block", "page"], states=entry_states)
        return lp
    if not (_is_torch(cache) or isinstance(cache, (np.ndarray, dict))):
        raise ExportError(f"{what}: an attention layer's cache is one tensor, got a {type(cache).__name__}")
    t = _Tensor(cache, what)
    if t.itemsize != _elem_size(info["dtype"], what):
        raise ExportError(f"{what}: {t.itemsize}-byte elements ({t.dtype}), the spec says {info['dtype']}")
    names, lp.k = _attention_axes(t, info, num_blocks, layout, what)
    lp.tensor = t
    lp.order = memory_order(t.shape, t.strides)
    lp.names = [names[i] for i in lp.order]
    lp.logical = list(names)
    lp.entry.update(dtype=info["dtype"], head_size=info["head_size"])
    if info["kind"] != "mla":
        lp.entry["num_kv_heads"] = info["num_kv_heads"]
    return lp


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
                    if g.get("mamba_cache_mode", "none") == "none":
                        sb = live[0]  # the running state's block (state_indices = block_table[:, 0])
                    else:
                        pos = max(0, -(-f["num_tokens"] // S) - 1)
                        sb = ids[pos] if pos < len(ids) and ids[pos] is not None else live[-1]
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


def _manifest(plan, requests, num_blocks, *, tp_rank, tp_size, pp_rank, pp_size, model, model_num_kv_heads, layer_entry):
    groups = []
    for g in plan.groups:
        mg = {"id": g["id"], "kind": g["kind"], "block_size": g["block_size"], "layers": []}
        if "sliding_window" in g and g["kind"] == "sliding_window":
            mg["sliding_window"] = g["sliding_window"]
        for lp in g["layers"]:
            mg["layers"].append(layer_entry(lp))
        groups.append(mg)
    return {
        "format": MANIFEST_FORMAT,
        "model": {"name": model, "num_kv_heads": model_num_kv_heads},
        "parallel": {"tp_rank": tp_rank, "tp_size": tp_size, "pp_rank": pp_rank, "pp_size": pp_size},
        "num_blocks": num_blocks,
        "groups": groups,
        "requests": requests,
    }


def _check_parallel(tp_rank, tp_size, pp_rank, pp_size):
    if not (0 <= tp_rank < tp_size and 0 <= pp_rank < pp_size):
        raise ExportError(f"tp_rank {tp_rank} of {tp_size}, pp_rank {pp_rank} of {pp_size}: not a rank")


def export_dump(path, kv_cache_config, kv_caches, requests, *, tp_rank=0, tp_size=1, pp_rank=0,
                pp_size=1, model="", model_num_kv_heads=0, state_splits=None, layouts=None,
                covered_states=None, null_block_id=0):
    """Writes one rank's dump of the requests' blocks to path (a new
    .safetensors file; an existing file is never overwritten) and returns
    a summary: {"num_blocks", "block_ids" (the worker's id of each dump
    block), "bytes", "max_layer_bytes"}.

    Everything is checked before the file is created; then each layer's
    selected blocks are gathered, copied to the host and written, one layer
    at a time. null_block_id (vLLM's null block, 0) is exported as a null
    table entry; None keeps every id."""
    _check_parallel(tp_rank, tp_size, pp_rank, pp_size)
    plan = build_plan(kv_cache_config, kv_caches, state_splits=state_splits, layouts=layouts,
                      covered_states=covered_states)
    reqs, selected = _select(plan, requests, null_block_id)
    reqs = _remap(reqs, selected)
    n = len(selected)
    tensors, sizes = [], {}
    for lp in plan.layers():
        if lp.alias_of:
            continue
        if lp.states is not None:
            shape = [n, lp.page]
            st, nbytes = "U8", n * lp.page
        else:
            shape = [n * lp.k if a == "block" else lp.tensor.shape[i] for a, i in zip(lp.names, lp.order)]
            st = ST_DTYPES[lp.entry["dtype"]][0]
            nbytes = int(np.prod(shape)) * lp.tensor.itemsize
        tensors.append((lp.name, st, shape, nbytes))
        sizes[lp.name] = nbytes

    def entry(lp):
        e = dict(lp.entry)
        if lp.alias_of:
            return {"name": lp.name, "dtype": e["dtype"], "alias_of": lp.alias_of}
        e["tensor"] = lp.name
        if lp.states is None:
            e["layout"] = list(lp.names)
        return e

    manifest = _manifest(plan, reqs, n, tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size,
                         model=model, model_num_kv_heads=model_num_kv_heads, layer_entry=entry)
    metadata = {METADATA_KEY: json.dumps(manifest), BLOCK_IDS_KEY: json.dumps(selected)}
    total = 0
    with open(path, "xb") as f:
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
    return {"num_blocks": n, "block_ids": selected, "bytes": total,
            "max_layer_bytes": max(sizes.values()) if sizes else 0}


def _gather(lp, selected):
    """A layer's selected blocks as a contiguous host array: attention in
    memory order, a state layer as [block, page] bytes (its covered states
    packed from the page start)."""
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
    return lp.tensor.gather(lp.order, lp.names.index("block"), rows)


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
                  covered_states=None, null_block_id=0):
    """Returns (manifest, device): the dump manifest of the live cache,
    every layer a docs/spec.md §10 cuda_ipc source over the worker's own tensor (its
    shape and strides as they are, block ids as the worker numbers them).
    handle_fn(tensor) returns (64-byte IPC handle, byte offset of the
    tensor's first element in the allocation the handle maps, device index)."""
    import base64
    _check_parallel(tp_rank, tp_size, pp_rank, pp_size)
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
        if lp.states is not None:
            page = _state_page(lp, f"layer {lp.name!r}")
            e["source"] = source(lp.states[0], "U8", [plan.num_blocks, page], [page, 1])
            return e
        t = lp.tensor
        e["source"] = source(t, ST_DTYPES[e["dtype"]][0], t.shape, t.strides)
        e["layout"] = list(lp.logical)
        return e

    manifest = _manifest(plan, reqs, plan.num_blocks, tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank,
                         pp_size=pp_size, model=model, model_num_kv_heads=model_num_kv_heads, layer_entry=entry)
    if len(devices) > 1:
        raise ExportError(f"the KV cache spans devices {sorted(devices)}: export one dump per device")
    return manifest, (devices.pop() if devices else 0)
