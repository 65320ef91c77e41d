"""Stand-ins for SGLang's memory pools, laid out as SGLang lays them out.

Paraphrased from sgl-project/sglang python/sglang/srt/mem_cache/memory_pool.py
@000ccdba (no code copied): ReqToTokenPool holds an int32 table
[size, max_context_len] of token slots per request; MHATokenToKVPool holds,
per layer, a K and a V tensor [size + page_size, head_num, head_dim] (the
first page is padding, never allocated); MLATokenToKVPool one tensor
[size + page_size, 1, kv_lora_rank + qk_rope_head_dim] per layer; both list
their buffers for transfer with get_contiguous_buf_infos (K of every layer
then V for MHA), item length = bytes of one slot x page_size.
"""

import torch


def nbytes(t):
    """Tensor.nbytes (PyTorch 1.13 has no such attribute)."""
    return t.numel() * t.element_size()


class ReqToTokenPool:
    def __init__(self, size, max_context_len):
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32)


class MHATokenToKVPool:
    def __init__(self, size, page_size, dtype, head_num, head_dim, layer_num, start_layer=0):
        self.size, self.page_size, self.dtype = size, page_size, dtype
        self.head_num, self.head_dim, self.layer_num = head_num, head_dim, layer_num
        self.start_layer = start_layer
        shape = (size + page_size, head_num, head_dim)
        self.k_buffer = [torch.zeros(shape, dtype=dtype) for _ in range(layer_num)]
        self.v_buffer = [torch.zeros(shape, dtype=dtype) for _ in range(layer_num)]

    def get_contiguous_buf_infos(self):
        bufs = self.k_buffer + self.v_buffer
        return ([b.data_ptr() for b in bufs], [nbytes(b) for b in bufs],
                [nbytes(b[0]) * self.page_size for b in bufs])


class MLATokenToKVPool:
    def __init__(self, size, page_size, dtype, kv_lora_rank, qk_rope_head_dim, layer_num, start_layer=0):
        self.size, self.page_size, self.dtype = size, page_size, dtype
        self.layer_num, self.start_layer = layer_num, start_layer
        shape = (size + page_size, 1, kv_lora_rank + qk_rope_head_dim)
        self.kv_buffer = [torch.zeros(shape, dtype=dtype) for _ in range(layer_num)]

    def get_contiguous_buf_infos(self):
        return ([b.data_ptr() for b in self.kv_buffer], [nbytes(b) for b in self.kv_buffer],
                [nbytes(b[0]) * self.page_size for b in self.kv_buffer])


def place(req_to_token, req_pool_idx, pages, num_tokens, page_size):
    """Write a request's slots into req_to_token as a paged allocator does:
    token t on slot pages[t // page_size] * page_size + t % page_size."""
    for t in range(num_tokens):
        req_to_token[req_pool_idx, t] = pages[t // page_size] * page_size + t % page_size


def reference_adler32(buffers, pages, page_size):
    """SGLang's value the way its tests check it: join the item bytes of
    every buffer at every page and call zlib.adler32."""
    import zlib
    stream = b""
    for b in buffers:
        raw = b.contiguous().view(torch.uint8).reshape(b.shape[0] // page_size, -1)
        for p in pages:
            stream += raw[p].numpy().tobytes()
    return zlib.adler32(stream)
