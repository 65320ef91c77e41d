"""kvaudit's block checksums (docs/spec.md §1 and §6) in NumPy, from a
model's logical KV and states: no layout, no TP split, no dump. The tests
compare `kvaudit checksum` on exported dumps with these values.

Piece products are summed in uint64 arrays (which wrap modulo 2^64, as
docs/spec.md asks); the rest is Python integers, masked to 64 bits.
"""

import numpy as np

H = 65536
MASK = (1 << 64) - 1


def cell_pieces(cell):
    """A cell's bytes (K then V, little-endian elements) as uint64 pieces."""
    b = np.ascontiguousarray(cell).astype(cell.dtype.newbyteorder("<"), copy=False).tobytes()
    assert len(b) % 8 == 0
    return np.frombuffer(b, dtype="<u8")


def attention_block(kv, layers, block_size, num_tokens, pos):
    """The checksum of block position pos: kv[layer][head] is an array of
    the request's cells by token ([num_tokens, ...] of ints, K then V
    flattened per token); layers maps layer number -> kv index."""
    S = block_size
    total = 0
    first, last = pos * S, min((pos + 1) * S, num_tokens)
    for L in layers:
        for h, cells in enumerate(kv[L]):
            s = 0
            for t in range(first, last):
                x = cell_pieces(cells[t])
                P = len(x)
                j = np.arange(t * P, t * P + P, dtype=np.uint64)
                s += int(np.sum(x * (np.uint64(2) * j + np.uint64(1)), dtype=np.uint64))
            total += (2 * (L * H + h) + 1) * s
    return total & MASK


def state_block(states, layer_number):
    """The checksum of a state layer's block: states is the layer's
    covered states at their global shape, each with its split axis first
    ([rows, ...]); rows are numbered across the states in order; elements
    are read as unsigned integers of their own width."""
    total = 0
    row = 0
    for st in states:
        width = st.dtype.itemsize
        u = st.view({2: "<u2", 4: "<u4"}[width]).astype(np.uint64)
        for r in range(st.shape[0]):
            x = u[r].reshape(-1)
            j = np.arange(len(x), dtype=np.uint64)
            s = int(np.sum(x * (np.uint64(2) * j + np.uint64(1)), dtype=np.uint64))
            total += (2 * (layer_number * H + row) + 1) * s
            row += 1
    return total & MASK


def hex64(v):
    return f"0x{v & 0xFFFFFFFFFFFFFFFF:016x}"
