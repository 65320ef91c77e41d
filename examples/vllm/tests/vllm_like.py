"""KV caches built the way vLLM's GPU model runner builds them, on the CPU.

The runner allocates one raw int8 tensor per KVCacheTensor (shared by the
layers its shared_by names), then, per layer of each KV cache group: for
attention, views it as the spec's dtype in the backend's memory order
(get_kv_cache_shape for num_blocks * k kernel blocks of block_size / k
tokens, permuted by get_kv_cache_stride_order) and permutes it back to the
backend's logical shape; for Mamba, makes one as_strided view per state
with a page stride; in a hybrid model it then re-strides FlashAttention's
(2, blocks, ...) caches so each block's K and V share the block's page.
This module does the same with written-out rules (no vLLM import), and
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
def kv_cache_shape(backend, num_blocks, block_size, heads, head_size):
    if backend == "flash":
        return (2, num_blocks, block_size, heads, head_size)
    if backend == "flashinfer":
        return (num_blocks, 2, block_size, heads, head_size)
    if backend == "mla":
        return (num_blocks, block_size, head_size)
    raise ValueError(backend)


def stride_order(backend, cache_layout):
    if backend == "mla":
        return (0, 1, 2)
    return (0, 1, 2, 3, 4) if cache_layout == "NHD" else (0, 1, 3, 2, 4)


def attention_spec(kind, block_size, heads, head_size, dtype, window=None):
    cls = {"full": "FullAttentionSpec", "swa": "SlidingWindowSpec", "mla": "MLAAttentionSpec"}[kind]
    fields = dict(block_size=block_size, num_kv_heads=heads, head_size=head_size, dtype=dtype)
    if window:
        fields["sliding_window"] = window
    # A class of the spec's name: the exporter reads type(spec).__name__ as vLLM's class name.
    return type(cls, (SimpleNamespace,), {})(**fields)


def mamba_spec(block_size, shapes, dtypes, page_size_padded=None):
    return type("MambaSpec", (SimpleNamespace,), {})(
        block_size=block_size, shapes=tuple(shapes), dtypes=tuple(dtypes),
        page_size_padded=page_size_padded, mamba_type="mamba2", mamba_cache_mode="none")


def attention_page_bytes(spec):
    heads = spec.num_kv_heads
    kv = 1 if type(spec).__name__ == "MLAAttentionSpec" else 2
    return kv * spec.block_size * heads * spec.head_size * esize(spec.dtype)


def mamba_page_bytes(spec):
    real = sum(math.prod(s) * esize(d) for s, d in zip(spec.shapes, spec.dtypes))
    return spec.page_size_padded or real


def page_bytes(spec):
    return mamba_page_bytes(spec) if type(spec).__name__ == "MambaSpec" else attention_page_bytes(spec)


def allocate(kv_cache_config, backends, kernel_block_sizes, cache_layout="NHD", seed=0, fill=None,
             device="cpu", raw_out=None):
    """Returns layer name -> cache (a tensor, or a list of state tensors)
    for kv_cache_config (SimpleNamespace like vLLM's KVCacheConfig),
    backends (group id -> flash, flashinfer or mla) and kernel block sizes
    (group id -> tokens per kernel block), raw memory filled with noise
    (or with the byte fill), on device. raw_out, a dict, receives layer
    name -> its raw tensor."""
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
            shape = kv_cache_shape(backend, num_blocks * k, kbs, spec.num_kv_heads, spec.head_size)
            order = stride_order(backend, cache_layout)
            inv = [order.index(i) for i in range(len(order))]
            caches[name] = buf.view(spec.dtype).view(tuple(shape[i] for i in order)).permute(*inv)
    if raw_out is not None:
        raw_out.update(raw)
    if has_attn and has_mamba:
        for name, c in caches.items():
            if isinstance(c, torch.Tensor) and c.shape[0] == 2:
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
    if backend == "flash":
        iv[0, kb, kt, local_head] = c[0]
        iv[1, kb, kt, local_head] = c[1]
    elif backend == "flashinfer":
        iv[kb, 0, kt, local_head] = c[0]
        iv[kb, 1, kt, local_head] = c[1]
    else:
        iv[kb, kt] = c


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
