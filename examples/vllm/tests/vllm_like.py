"""KV caches built the way vLLM's GPU model runner builds them, on the CPU.

There is no vLLM here: this module writes out the runner's rules (no vLLM
import), as read from vllm-project/vllm (gpu_model_runner.py at 000fc94b754f,
v1/worker/utils.py at 0027b02769fb, model_executor/layers/mamba/abstract.py
at 00b08dc44519, the cross-layer allocation of
kv_connector_model_runner_mixin.py, v1/worker/gpu/attn_utils.py at
001cabc1be16 for padded attention pages, flash_attn.py's stride orders).

The runner allocates one raw int8 tensor per KVCacheTensor (shared by the
layers its shared_by names), then, per layer of each KV cache group: for
attention, views it as the spec's dtype in the backend's memory order
(get_kv_cache_shape for num_blocks * k kernel blocks of block_size / k
tokens, the last axis widened when the spec pads its page to
page_size_padded, permuted by get_kv_cache_stride_order) and permutes it back
to the backend's logical shape; for Mamba, today's runner registers one raw
[num_blocks, 1, 1, page] int8 view per layer, which the layer splits into
its states itself (MambaBase.bind_kv_cache), where the older runner made one
as_strided view per state with a page stride ("list", still accepted); in a
hybrid model it then re-strides FlashAttention's (2, blocks, ...) caches so
each block's K and V share the block's page. KV-sharing layers get their
target's tensor. allocate_cross_layer builds the one tensor of the
cross-layer cache (use_uniform_kv_cache). This module does the same and
fills the caches token by token from a logical KV, so the tests know what
each block must checksum to.
"""

import math
from types import SimpleNamespace

import numpy as np
import torch

INT_OF = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
NP_INT_OF = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def esize(dtype):
    return torch.empty((), dtype=dtype).element_size()


# Backend rules (the logical shapes and stride orders of vLLM's backends).
def kv_cache_shape(backend, num_blocks, block_size, heads, head_size, cache_dtype_str="auto"):
    if backend == "flash":
        return (2, num_blocks, block_size, heads, head_size)
    if backend == "flashinfer":
        return (num_blocks, 2, block_size, heads, head_size)
    if backend == "mla":
        if cache_dtype_str == "fp8_ds_mla":
            return (num_blocks, block_size, FP8_DS_MLA_TOKEN_BYTES)
        return (num_blocks, block_size, head_size)
    raise ValueError(backend)


def stride_order(backend, cache_layout, include_num_layers_dimension=False):
    """get_kv_cache_stride_order of FlashAttention (flash), FlashInfer and
    Triton (flashinfer) and MLA, with the cross-layer layers axis when
    asked (flash_attn.py: NHD (2, 0, 1, 3, 4, 5), HND (2, 4, 0, 1, 3, 5))."""
    if backend == "mla":
        return (1, 0, 2, 3) if include_num_layers_dimension else (0, 1, 2)
    if include_num_layers_dimension:
        if backend == "flash":
            return (2, 0, 1, 3, 4, 5) if cache_layout == "NHD" else (2, 4, 0, 1, 3, 5)
        return (1, 0, 2, 3, 4, 5) if cache_layout == "NHD" else (1, 2, 4, 0, 3, 5)
    return (0, 1, 2, 3, 4) if cache_layout == "NHD" else (0, 1, 3, 2, 4)


def backend_class(backend, cache_layout="NHD"):
    """A stand-in for a vLLM attention backend class: its static
    get_kv_cache_shape and get_kv_cache_stride_order, by the rules above."""
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
        return kv_cache_shape(backend, num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str)

    def get_kv_cache_stride_order(include_num_layers_dimension=False):
        return stride_order(backend, cache_layout, include_num_layers_dimension)

    return type(f"{backend}_{cache_layout}_backend", (), {
        "get_kv_cache_shape": staticmethod(get_kv_cache_shape),
        "get_kv_cache_stride_order": staticmethod(get_kv_cache_stride_order)})


def padded_shape(shape, num_blocks, spec):
    """The V2 runner's _reshape_kv_cache for a spec with page_size_padded:
    the last axis widened so that one block fills the padded page."""
    if getattr(spec, "page_size_padded", None) is None:
        return tuple(shape)
    per_block = math.prod(shape) // num_blocks
    last = (spec.page_size_padded // esize(spec.dtype)) // (per_block // shape[-1])
    return tuple(shape[:-1]) + (last,)


def attention_spec(kind, block_size, heads, head_size, dtype, window=None, page_size_padded=None, **extra):
    cls = {"full": "FullAttentionSpec", "swa": "SlidingWindowSpec", "mla": "MLAAttentionSpec"}[kind]
    fields = dict(block_size=block_size, num_kv_heads=heads, head_size=head_size, dtype=dtype,
                  page_size_padded=page_size_padded, **extra)
    if window:
        fields["sliding_window"] = window
    # A class of the spec's name: the exporter reads type(spec).__name__ as vLLM's class name.
    return type(cls, (SimpleNamespace,), {})(**fields)


def mamba_spec(block_size, shapes, dtypes, page_size_padded=None, mamba_cache_mode="none"):
    return type("MambaSpec", (SimpleNamespace,), {})(
        block_size=block_size, shapes=tuple(shapes), dtypes=tuple(dtypes),
        page_size_padded=page_size_padded, mamba_type="mamba2", mamba_cache_mode=mamba_cache_mode)


FP8_DS_MLA_TOKEN_BYTES = 656  # MLAAttentionSpec.real_page_size_bytes for fp8_ds_mla


def real_attention_page_bytes(spec):
    if getattr(spec, "cache_dtype_str", None) == "fp8_ds_mla":
        return spec.block_size * FP8_DS_MLA_TOKEN_BYTES
    heads = spec.num_kv_heads
    kv = 1 if type(spec).__name__ == "MLAAttentionSpec" else 2
    return kv * spec.block_size * heads * spec.head_size * esize(spec.dtype)


def attention_page_bytes(spec):
    """AttentionSpec.page_size_bytes: page_size_padded when given."""
    return getattr(spec, "page_size_padded", None) or real_attention_page_bytes(spec)


def mamba_page_bytes(spec):
    real = sum(math.prod(s) * esize(d) for s, d in zip(spec.shapes, spec.dtypes))
    return spec.page_size_padded or real


def page_bytes(spec):
    return mamba_page_bytes(spec) if type(spec).__name__ == "MambaSpec" else attention_page_bytes(spec)


def mamba_state_views(pages, spec):
    """MambaBase.bind_kv_cache: a layer's [num_blocks, 1, 1, page] raw
    view split into its state views, packed from the page start."""
    pages = pages.squeeze(2).squeeze(1)
    states, offset = [], 0
    for shape, dtype in zip(spec.shapes, spec.dtypes):
        nbytes = math.prod(shape) * esize(dtype)
        states.append(pages[:, offset:offset + nbytes].view(dtype).view(-1, *shape))
        offset += nbytes
    return states


def state_views(cache, spec):
    """The state tensors of a state layer's cache in either form."""
    return cache if isinstance(cache, list) else mamba_state_views(cache, spec)


def allocate(kv_cache_config, backends, kernel_block_sizes, cache_layout="NHD", seed=0, fill=None,
             device="cpu", raw_out=None, mamba_form="tensor", shared_layers=None, cache_dtype_str="auto",
             pad_form="widen"):
    """Returns layer name -> cache (a tensor; for a state layer its raw
    page view, or with mamba_form "list" the list of its state tensors)
    for kv_cache_config (SimpleNamespace like vLLM's KVCacheConfig),
    backends (group id -> flash, flashinfer or mla) and kernel block sizes
    (group id -> tokens per kernel block), raw memory filled with noise
    (or with the byte fill), on device. shared_layers maps a KV-sharing
    layer (in no group) to the layer whose cache it reads. raw_out, a dict,
    receives layer name -> its raw tensor. pad_form says how an attention
    spec's page_size_padded is laid out: "widen" (v1/worker/gpu/attn_utils.py
    at 001cabc1be16: the last axis widened to fill the page) or "stride"
    (gpu_model_runner.py _reshape_kv_cache_tensors at 9aaf83ef5: the
    physical first axis, the block's, strided by the padded page, the rest
    contiguous)."""
    gen = torch.Generator().manual_seed(seed)
    raw = {}
    for t in kv_cache_config.kv_cache_tensors:
        if fill is None:
            buf = torch.randint(-128, 128, (t.size,), dtype=torch.int8, generator=gen)
        else:
            buf = torch.full((t.size,), fill, dtype=torch.int8)
        buf = buf.to(device)
        for name in t.shared_by:
            raw[name] = buf
    caches = {}
    has_attn = has_mamba = False
    for gid, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        for name in group.layer_names:
            buf = raw[name]
            pb = page_bytes(spec)
            assert buf.numel() % pb == 0
            num_blocks = buf.numel() // pb
            if type(spec).__name__ == "MambaSpec":
                has_mamba = True
                if mamba_form == "tensor":
                    caches[name] = buf.view(num_blocks, 1, 1, pb)
                    continue
                states, offset = [], 0
                for shape, dtype in zip(spec.shapes, spec.dtypes):
                    size = esize(dtype)
                    inner = torch.empty((1, *shape)).stride()[1:]
                    states.append(torch.as_strided(buf.view(dtype), (num_blocks, *shape),
                                                   (pb // size, *inner), offset // size))
                    offset += math.prod(shape) * size
                caches[name] = states
                continue
            has_attn = True
            backend = backends[gid]
            kbs = kernel_block_sizes.get(gid, spec.block_size)
            k = spec.block_size // kbs
            shape = kv_cache_shape(backend, num_blocks * k, kbs, spec.num_kv_heads, spec.head_size,
                                   getattr(spec, "cache_dtype_str", None) or cache_dtype_str)
            order = stride_order(backend, cache_layout)
            inv = [order.index(i) for i in range(len(order))]
            if pad_form == "stride" and getattr(spec, "page_size_padded", None) is not None:
                physical = tuple(shape[i] for i in order)
                strides = list(torch.empty(physical).stride())
                strides[0] = spec.page_size_padded // esize(spec.dtype)
                caches[name] = torch.as_strided(buf.view(spec.dtype), physical, strides).permute(*inv)
                continue
            shape = padded_shape(shape, num_blocks * k, spec)
            caches[name] = buf.view(spec.dtype).view(tuple(shape[i] for i in order)).permute(*inv)
    for name, target in (shared_layers or {}).items():
        caches[name] = caches[target]
        raw[name] = raw[target]
    if raw_out is not None:
        raw_out.update(raw)
    if has_attn and has_mamba:
        for name, c in caches.items():
            if isinstance(c, torch.Tensor) and c.dim() == 5 and c.shape[0] == 2:
                hidden = math.prod(c.shape[2:])
                c.as_strided_(c.shape, (hidden, 2 * hidden, *c.stride()[2:]))
    return caches


def config(num_blocks, groups, shared=None):
    """A KVCacheConfig: groups is [(layer names, spec)]; every layer gets
    its own tensor, unless shared lists tuples of layers sharing one."""
    specs = {n: s for names, s in groups for n in names}
    tensors = []
    if shared:
        for names in shared:
            tensors.append(SimpleNamespace(size=num_blocks * page_bytes(specs[names[0]]), shared_by=list(names)))
    else:
        for n, s in specs.items():
            tensors.append(SimpleNamespace(size=num_blocks * page_bytes(s), shared_by=[n]))
    return SimpleNamespace(num_blocks=num_blocks, kv_cache_tensors=tensors,
                           kv_cache_groups=[SimpleNamespace(layer_names=list(n), kv_cache_spec=s) for n, s in groups])


# Writing logical KV into the caches (through int views of the same memory).
def write_token(cache, backend, spec, kbs, block_id, token_in_block, local_head, cell):
    """Writes one token's cell (np int array: [2, head_size] K and V, or
    [head_size] for MLA) of one local head at its place in the cache."""
    k = spec.block_size // kbs
    kb = block_id * k + token_in_block // kbs
    kt = token_in_block % kbs
    iv = cache.view(INT_OF[cache.element_size()])
    c = torch.from_numpy(np.ascontiguousarray(cell))
    d = c.shape[-1]  # a padded page: the head's elements, the padding after them untouched
    if backend == "flash":
        iv[0, kb, kt, local_head, :d] = c[0]
        iv[1, kb, kt, local_head, :d] = c[1]
    elif backend == "flashinfer":
        iv[kb, 0, kt, local_head, :d] = c[0]
        iv[kb, 1, kt, local_head, :d] = c[1]
    else:
        iv[kb, kt, :d] = c


def flip(cache, backend, spec, kbs, block_id, token_in_block, local_head, dim=0):
    """XORs the low bit of one element's first byte (K of the cell)."""
    k = spec.block_size // kbs
    kb = block_id * k + token_in_block // kbs
    kt = token_in_block % kbs
    iv = cache.view(INT_OF[cache.element_size()])
    if backend == "flash":
        iv[0, kb, kt, local_head, dim] ^= 1
    elif backend == "flashinfer":
        iv[kb, 0, kt, local_head, dim] ^= 1
    else:
        iv[kb, kt, dim] ^= 1


def allocate_cross_layer(kv_cache_config, backend, kernel_block_size, cache_layout="NHD", seed=0, form="typed"):
    """The cross-layer cache of a model whose layers are one attention
    group: returns (the one tensor, layer name -> its view).

    form "typed" is allocate_uniform_kv_caches: one int8 buffer viewed as
    the spec's dtype in the backend's physical order of (num_layers,) +
    get_kv_cache_shape (get_kv_cache_stride_order(include_num_layers_
    dimension=True)), each layer's view its logical permutation's slice;
    form "bytes" is the per-page-size cross-layer group: int8 [num_blocks,
    num_layers, page], each layer's view its slice typed as the backend's
    physical page and permuted to the logical shape."""
    gen = torch.Generator().manual_seed(seed)
    spec = kv_cache_config.kv_cache_groups[0].kv_cache_spec
    tensors = kv_cache_config.kv_cache_tensors
    L, page = len(tensors), page_bytes(spec)
    N = tensors[0].size // page
    k = spec.block_size // kernel_block_size
    logical = kv_cache_shape(backend, N * k, kernel_block_size, spec.num_kv_heads, spec.head_size)
    raw = torch.randint(-128, 128, (L * N * page,), dtype=torch.int8, generator=gen)
    views = {}
    if form == "typed":
        order = stride_order(backend, cache_layout, include_num_layers_dimension=True)
        full = (L,) + logical
        cross = raw.view(spec.dtype).view(tuple(full[i] for i in order))
        permuted = cross.permute(*[order.index(i) for i in range(len(order))])
        for i, t in enumerate(tensors):
            for name in t.shared_by:
                views[name] = permuted[i]
        return cross, views
    cross = raw.view(N, L, page)
    order = stride_order(backend, cache_layout)
    physical = [logical[j] for j in order]
    bpos = order.index(logical.index(N * k) if logical.count(N * k) == 1 else 1)
    page_shape = physical[:bpos] + physical[bpos + 1:]
    typed = raw.view(spec.dtype).view(N * k, L, *page_shape)
    ours = [0 if p == bpos else (p + 1 if p < bpos else p) for p in (order.index(j) for j in range(len(order)))]
    for i, t in enumerate(tensors):
        for name in t.shared_by:
            views[name] = typed[:, i].permute(*ours)
    return cross, views


# ---------------------------------------------------------------------------
# After the KV-cache layout refactor (RFC #42082): every layer a 4-D
# [B, H, N, C] view of one flat int8 buffer. Paraphrased (not imported, not
# copied) from vllm/v1/kv_cache_layout.py at vllm-project/vllm e78684ecbf33
# (KVCacheLayout: each member a stride permutation of the logical axes
# [L, B, H, N, C]) and from vllm/v1/kv_cache_interface.py as the fork
# LingHangwangxianjiui/vllm carries it at 71bbe3910b5c (KVCacheTensor:
# layer l's page of block b at offset + l * layer_stride + b * block_stride;
# compute_layer_kv_cache_shape_bytes: (B, H, N, C) with C = (head_size +
# head_size_v) * dtype size, one head and one state for a MambaSpec whose C
# is its states' bytes unpadded; compute_layout_strides: strides built from
# the innermost physical axis out, fixed layer and block strides, the page
# padding applied where the page grid starts; create_kv_cache_views:
# as_strided over the buffer at the tensor's offset, a view per layer, then
# .view(spec.dtype) when the spec has one, MambaSpec not).

REFACTOR_LAYOUTS = {  # KVCacheLayout members: physical order of the logical [L, B, H, N, C]
    "LBHNC": (0, 1, 2, 3, 4), "LBNHC": (0, 1, 3, 2, 4), "LHBNC": (0, 2, 1, 3, 4),
    "BLHNC": (1, 0, 2, 3, 4), "BLNHC": (1, 0, 3, 2, 4), "BHLNC": (1, 2, 0, 3, 4),
}


def is_mamba(spec):
    return type(spec).__name__ == "MambaSpec"


def content_bytes(spec):
    """C of [B, H, N, C] in bytes (state_content_size_bytes)."""
    if is_mamba(spec):
        return sum(math.prod(s) * esize(d) for s, d in zip(spec.shapes, spec.dtypes))
    if getattr(spec, "cache_dtype_str", None) == "fp8_ds_mla":
        return FP8_DS_MLA_TOKEN_BYTES
    hv = getattr(spec, "head_size_v", None)
    hv = spec.head_size if hv is None else hv
    return (spec.head_size + hv) * esize(spec.dtype)


def refactor_page_bytes(spec):
    heads = 1 if is_mamba(spec) else spec.num_kv_heads
    tokens = 1 if is_mamba(spec) else spec.block_size
    real = heads * tokens * content_bytes(spec)
    return getattr(spec, "page_size_padded", None) or real


def refactor_config(num_blocks, groups, layout="LBNHC", overlay=False, layers_per_tensor=None):
    """A post-refactor KVCacheConfig: groups [(layer names, spec)]. Each
    group's layers are one KVCacheTensor (or tensors of layers_per_tensor
    layers): layer-outermost layouts give each layer a contiguous region
    (layer_stride = page * num_blocks, block_stride = page), block-outermost
    ones make each block all its layers' pages (layer_stride = page,
    block_stride = layers * page). overlay: every group's tensors start at
    offset 0 of one backing allocation, so layer l of each group shares its
    bytes with layer l of the others (a hybrid model's groups overlaid; a
    block id belongs to one group at a time)."""
    order = REFACTOR_LAYOUTS[layout]
    tensors, offset = [], 0
    for names, spec in groups:
        page = refactor_page_bytes(spec)
        chunks = [names] if not layers_per_tensor else [names[i:i + layers_per_tensor]
                                                       for i in range(0, len(names), layers_per_tensor)]
        for chunk in chunks:
            L = len(chunk)
            if order[0] == 0:
                ls, bs = page * num_blocks, page
            else:
                ls, bs = page, L * page
            size = L * num_blocks * page
            tensors.append(SimpleNamespace(size=size, layers=list(chunk), layer_stride=ls, block_stride=bs,
                                           offset=0 if overlay else offset))
            if not overlay:
                offset += size
    total = max(t.offset + t.size for t in tensors)
    return SimpleNamespace(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_layout=layout, backing_size=total,
                           kv_cache_groups=[SimpleNamespace(layer_names=list(n), kv_cache_spec=s) for n, s in groups])


def refactor_views(raw, spec, num_blocks, layout, tensor, kernel_block_size=None):
    """One [B, H, N, C] view per layer of tensor (the paraphrase of
    create_kv_cache_views described above)."""
    order = REFACTOR_LAYOUTS[layout]
    mamba = is_mamba(spec)
    kbs = spec.block_size if mamba or kernel_block_size is None else kernel_block_size
    ratio = spec.block_size // kbs
    L = len(tensor.layers)
    shape = (L, num_blocks * ratio, 1 if mamba else spec.num_kv_heads, 1 if mamba else kbs, content_bytes(spec))
    block_stride = tensor.block_stride
    padded = getattr(spec, "page_size_padded", None)
    if ratio > 1:
        assert block_stride == math.prod(shape[2:]) * ratio, "kernel blocks need dense pages"
        block_stride //= ratio
    fixed = (tensor.layer_stride, block_stride, None, None, None)
    grid_end = max(order.index(0), order.index(1)) + 1
    strides, cur = [0] * 5, 1
    for pos in reversed(range(5)):
        dim = order[pos]
        if padded is not None and pos == grid_end - 1:
            cur = max(cur, padded)
        strides[dim] = fixed[dim] or cur
        cur = strides[dim] * shape[dim]
    v5 = torch.as_strided(raw, shape, strides, raw.storage_offset() + tensor.offset)
    dtype = None if mamba else spec.dtype
    return [v5[i].view(dtype) if dtype is not None else v5[i] for i in range(L)]


def allocate_refactor(kv_cache_config, kernel_block_sizes=None, seed=0, fill=None, device="cpu",
                      shared_layers=None, raw_out=None):
    """layer name -> its [B, H, N, C] view, raw memory noise (or fill),
    KV-sharing layers bound to their target's view."""
    gen = torch.Generator().manual_seed(seed)
    size = kv_cache_config.backing_size
    if fill is None:
        raw = torch.randint(-128, 128, (size,), dtype=torch.int8, generator=gen)
    else:
        raw = torch.full((size,), fill, dtype=torch.int8)
    raw = raw.to(device)
    spec_of, gid_of = {}, {}
    for gid, g in enumerate(kv_cache_config.kv_cache_groups):
        for n in g.layer_names:
            spec_of[n], gid_of[n] = g.kv_cache_spec, gid
    caches = {}
    for t in kv_cache_config.kv_cache_tensors:
        spec = spec_of[t.layers[0]]
        kbs = (kernel_block_sizes or {}).get(gid_of[t.layers[0]])
        for name, view in zip(t.layers, refactor_views(raw, spec, kv_cache_config.num_blocks,
                                                         kv_cache_config.kv_cache_layout, t, kbs)):
            caches[name] = view
    for name, target in (shared_layers or {}).items():
        caches[name] = caches[target]
    if raw_out is not None:
        raw_out["backing"] = raw
    return caches


def refactor_write_token(cache, spec, kbs, block_id, token_in_block, local_head, cell):
    """Writes one token's cell (K then V, or MLA's latent) of a local head
    into its [B, H, N, C] view."""
    k = spec.block_size // kbs
    kb, kt = block_id * k + token_in_block // kbs, token_in_block % kbs
    iv = cache.view(INT_OF[cache.element_size()])
    c = torch.from_numpy(np.ascontiguousarray(cell).reshape(-1))
    iv[kb, local_head, kt, :c.shape[0]] = c


def refactor_flip(cache, spec, kbs, block_id, token_in_block, local_head, dim=0):
    k = spec.block_size // kbs
    kb, kt = block_id * k + token_in_block // kbs, token_in_block % kbs
    cache.view(INT_OF[cache.element_size()])[kb, local_head, kt, dim] ^= 1
