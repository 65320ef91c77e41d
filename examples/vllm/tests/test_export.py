"""Tests of kvaudit_export on caches built the way vLLM builds them.

Each scenario allocates a rank's caches as the model runner does (raw int8
tensors viewed through the backend's shape and stride order; Mamba state
views with a page stride; the hybrid FlashAttention re-striding), writes a
logical KV into the requests' blocks, exports, and compares `kvaudit
checksum` with reference.py's checksums of the logical KV; then it flips one
bit in the cache, exports a consumer and checks that `kvaudit diff` finds
the mismatch at that block position.

Needs PyTorch (Debian: python3-torch) and the kvaudit executable in
$KVAUDIT_BIN (the Go test that runs this builds it). With
KVAUDIT_REQUIRE_TORCH set (CI sets it), a missing PyTorch fails the tests
instead of skipping them.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import kvaudit_export as kx  # noqa: E402
import reference  # noqa: E402

try:
    import torch
    import vllm_like as vl
except ImportError:  # pragma: no cover - CI requires it
    torch = None

KVAUDIT = os.environ.get("KVAUDIT_BIN", "")
needs_torch = unittest.skipIf(torch is None and not os.environ.get("KVAUDIT_REQUIRE_TORCH"), "no PyTorch")
needs_kvaudit = unittest.skipIf(not KVAUDIT, "KVAUDIT_BIN is not set")


def setUpModule():
    if torch is None and os.environ.get("KVAUDIT_REQUIRE_TORCH"):
        raise RuntimeError("KVAUDIT_REQUIRE_TORCH is set but PyTorch does not import (install python3-torch)")


def kvaudit(*args, ok=(0,)):
    p = subprocess.run([KVAUDIT, *args], capture_output=True, text=True)
    if p.returncode not in ok:
        raise AssertionError(f"kvaudit {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout) if "-o" in args and "json" in args else p.stdout


def attn_name(L):
    return f"model.layers.{L}.self_attn.attn"


def mixer_name(L):
    return f"model.layers.{L}.mixer"


class Model:
    """A small model in one of vLLM's cache layouts, TP-split, with its
    logical KV per request. attention layers: even numbers when hybrid."""

    def __init__(self, backend, *, cache_layout="NHD", block_size=16, kernel_block_size=None, heads=4,
                 head_size=64, tp=1, layers=2, num_blocks=12, hybrid=False, window=None, seed=1, device="cpu",
                 conv_layout="SD", mamba_form="tensor", mamba_cache_mode="none", shared=None, cross=None,
                 page_size_padded=None, dtype=None, refactor=None, pad_form="widen"):
        # refactor: a KVCacheLayout name (LBNHC, LBHNC, BLNHC, ...): the
        # caches are the layout refactor's [B, H, N, C] views (vllm_like).
        self.backend, self.cache_layout, self.tp, self.device = backend, cache_layout, tp, device
        self.refactor, self.pad_form = refactor, pad_form
        self.conv_layout, self.mamba_form, self.cross = conv_layout, mamba_form, cross
        self.S, self.kbs = block_size, kernel_block_size or block_size
        self.mla = backend == "mla"
        self.heads = 1 if self.mla else heads
        self.local_heads = 1 if self.mla else heads // tp
        self.D, self.num_blocks, self.hybrid = head_size, num_blocks, hybrid
        self.dtype = dtype or torch.bfloat16
        self.attn_layers = [L for L in range(layers) if not hybrid or L % 2 == 0]
        self.state_layers = [L for L in range(layers) if hybrid and L % 2 == 1]
        # KV sharing: layer name -> the layer whose cache it reads; the
        # sharing layers are in no group (a connector's KVCacheConfig).
        self.shared = shared or {}
        self.rng = np.random.default_rng(seed)
        kind = "mla" if self.mla else ("swa" if window else "full")
        extra = {"head_size_v": 0} if self.mla and refactor else {}
        self.attn_spec = vl.attention_spec(kind, block_size, self.local_heads, head_size, self.dtype, window,
                                           page_size_padded=page_size_padded, **extra)
        # Mamba2 with one group: conv channels [x, B, C] (B, C replicated
        # over TP), ssm [heads, head_dim, state_size].
        self.I, self.N, self.W, self.MH, self.hd = 64, 16, 4, 8, 8
        groups = [([attn_name(L) for L in self.attn_layers], self.attn_spec)]
        shared = None
        if hybrid:
            conv = (self.W - 1, self.I // tp + 2 * self.N)
            if conv_layout == "DS":
                conv = conv[::-1]
            ssm = (self.MH // tp, self.hd, self.N)
            self.state_spec = vl.mamba_spec(block_size, [conv, ssm], [torch.bfloat16, torch.float32],
                                            page_size_padded=vl.attention_page_bytes(self.attn_spec),
                                            mamba_cache_mode=mamba_cache_mode)
            assert vl.mamba_page_bytes(self.state_spec) >= sum(
                np.prod(s) * vl.esize(d) for s, d in zip(self.state_spec.shapes, self.state_spec.dtypes))
            groups.append(([mixer_name(L) for L in self.state_layers], self.state_spec))
            shared = list(zip([attn_name(L) for L in self.attn_layers], [mixer_name(L) for L in self.state_layers]))
        if refactor:
            self.config = vl.refactor_config(num_blocks, groups, refactor, overlay=hybrid)
        else:
            self.config = vl.config(num_blocks, groups, shared)
        self.kv, self.states = {}, {}

    def splits(self):
        return kx.mamba2_state_splits(self.tp, self.I, 1, self.MH, self.N, conv_layout=self.conv_layout)

    def add_request(self, rid, num_tokens):
        """Draws the request's logical KV: kv[L][global head] = [tokens, cell
        elements] int16 (bf16 bits); state layers: global conv [x; B; C] rows
        and ssm."""
        cell = self.D if self.mla else 2 * self.D
        bits = 8 * vl.esize(self.dtype)
        ints = {8: np.int8, 16: np.int16, 32: np.int32}[bits]
        self.kv[rid] = {L: [self.rng.integers(-2**(bits - 1), 2**(bits - 1), (num_tokens, cell), dtype=ints)
                            for _ in range(self.heads)] for L in self.attn_layers}
        self.states[rid] = {L: (self.rng.integers(-2**15, 2**15, (self.I + 2 * self.N, self.W - 1), dtype=np.int16),
                                self.rng.integers(-2**31, 2**31, (self.MH, self.hd, self.N), dtype=np.int32))
                            for L in self.state_layers}

    def rank_caches(self, rank, tables, seed, raw_out=None):
        """Allocates rank's caches and writes each request's KV into its
        blocks; tables: rid -> (num_tokens, attention block ids, state
        block). With cross set, the caches are views of the cross-layer
        tensor (self.cross_tensor)."""
        if self.refactor:
            caches = vl.allocate_refactor(self.config, {0: self.kbs}, seed=seed, device=self.device,
                                          shared_layers=self.shared, raw_out=raw_out)
        elif self.cross:
            self.cross_tensor, caches = vl.allocate_cross_layer(self.config, self.backend, self.kbs, self.cache_layout,
                                                                seed=seed, form=self.cross)
        else:
            caches = vl.allocate(self.config, {0: self.backend}, {0: self.kbs}, self.cache_layout, seed=seed,
                                 device=self.device, raw_out=raw_out, mamba_form=self.mamba_form,
                                 shared_layers=self.shared, pad_form=self.pad_form)
        for rid, (n, ids, sb) in tables.items():
            for L in self.attn_layers:
                cache = caches[attn_name(L)]
                for hl in range(self.local_heads):
                    g = 0 if self.mla else rank * self.local_heads + hl
                    cells = self.kv[rid][L][g]
                    for t in range(n):
                        c = cells[t] if self.mla else cells[t].reshape(2, self.D)
                        if self.refactor:
                            vl.refactor_write_token(cache, self.attn_spec, self.kbs, ids[t // self.S], t % self.S, hl, c)
                        else:
                            vl.write_token(cache, self.backend, self.attn_spec, self.kbs, ids[t // self.S], t % self.S,
                                           hl, c)
            for L in self.state_layers:
                conv, ssm = self.states[rid][L]
                xl = self.I // self.tp
                local = np.concatenate([conv[rank * xl:(rank + 1) * xl], conv[self.I:]])  # [x shard; B; C]
                st = vl.state_views(caches[mixer_name(L)], self.state_spec)
                local = local.T if self.conv_layout == "SD" else local
                b = self.state_block(sb, n)
                st[0].view(torch.int16)[b] = torch.from_numpy(np.ascontiguousarray(local))
                ml = self.MH // self.tp
                st[1].view(torch.int32)[b] = torch.from_numpy(ssm[rank * ml:(rank + 1) * ml].copy())
        return caches

    def state_block(self, sb, n):
        """The block holding a request's running state: sb itself, or in a
        state table (mamba_cache_mode align / all) the block at position
        (n - 1) // block_size (mamba_utils' first_state_slot)."""
        if not isinstance(sb, list):
            return sb
        return sb[max(0, (n - 1) // self.S)]

    def exported_caches(self, caches):
        """What the exporter is given: the per-layer caches, or those it
        derives from the one cross-layer tensor."""
        if not self.cross:
            return caches
        return kx.cross_layer_caches(self.config, self.cross_tensor, vl.backend_class(self.backend, self.cache_layout),
                                     kernel_block_sizes=[self.kbs])

    def requests(self, tables, **extra):
        out = []
        for rid, (n, ids, sb) in tables.items():
            state_table = sb if isinstance(sb, list) else [sb]
            block_ids = [list(ids)] + ([state_table] if self.hybrid else [])
            r = {"id": rid, "num_tokens": n, "block_ids": block_ids}
            r.update(extra.get(rid, {}))
            out.append(r)
        return out

    def expected(self, rid, n, start=0):
        """{group id: [checks]}: the reference's values by block position."""
        blocks = -(-n // self.S)
        out = {0: [reference.attention_block(self.kv[rid], self.attn_layers, self.S, n, b) for b in range(start, blocks)]}
        if self.hybrid:
            total = 0
            for L in self.state_layers:
                conv, ssm = self.states[rid][L]
                total += reference.state_block([conv, ssm], L)
            out[1] = [total & reference.MASK]
        return out

    def export(self, out_dir, tables, flip=None, seed=7, extra=None, tables_of=None):
        """Exports every rank into out_dir; flip=(rank, L, rid, token, local
        head) flips a bit there first; a state flip is (rank, L, rid, None, 0)."""
        os.makedirs(out_dir, exist_ok=True)
        for rank in range(self.tp):
            caches = self.rank_caches(rank, tables, seed + rank)
            if flip and flip[0] == rank:
                _, L, rid, t, hl = flip
                n, ids, sb = tables[rid]
                if t is None:
                    vl.state_views(caches[mixer_name(L)], self.state_spec)[0].view(torch.int16)[self.state_block(sb, n), 0, 0] ^= 1
                elif self.refactor:
                    vl.refactor_flip(caches[attn_name(L)], self.attn_spec, self.kbs, ids[t // self.S], t % self.S, hl)
                else:
                    vl.flip(caches[attn_name(L)], self.backend, self.attn_spec, self.kbs, ids[t // self.S], t % self.S, hl)
            kx.export_dump(os.path.join(out_dir, f"rank-0-{rank}.safetensors"), self.config, self.exported_caches(caches),
                           self.requests(tables, **(extra or {})), tp_rank=rank, tp_size=self.tp,
                           model="test/model", model_num_kv_heads=self.heads,
                           state_splits={1: self.splits()} if self.hybrid else None)


def checks_by_group(result, rid):
    req = next(r for r in result["requests"] if r["id"] == rid)
    return {g["id"]: g for g in req["groups"]}


class Cases:
    """run_case: checksums of an exported producer equal the reference; each
    flipped bit in a consumer is a mismatch at its block position."""

    def run_case(self, model, tables, flips):
        for rid, (n, _, _) in tables.items():
            model.add_request(rid, n)
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            prod = os.path.join(tmp, "producer")
            model.export(prod, tables)
            got = kvaudit("checksum", "-o", "json", prod)
            for rid, (n, _, _) in tables.items():
                want = model.expected(rid, n)
                groups = checks_by_group(got, rid)
                self.assertEqual(sorted(groups), sorted(want), f"{rid}: groups")
                for gid, values in want.items():
                    g = groups[gid]
                    self.assertEqual(g["start"], 0)
                    self.assertGreaterEqual(len(g["checks"]), 1)
                    for k, check in enumerate(g["checks"]):
                        self.assertEqual(check, [reference.hex64(v) for v in values], f"{rid} group {gid} check {k}")
            for i, (flip, gid, pos) in enumerate(flips):
                cons = os.path.join(tmp, f"consumer-{i}")
                model.export(cons, tables, flip=flip, seed=100 + i)
                d = kvaudit("diff", "-o", "json", prod, cons, ok=(1,))
                self.assertEqual(d["verdict"], "mismatch")
                rid = flip[2]
                req = next(r for r in d["requests"] if r["id"] == rid)
                bad = {g["id"]: g["positions"] for g in req["groups"] if g["verdict"] == "mismatch"}
                self.assertEqual(bad, {gid: [pos]}, f"flip {flip}")
                for r in d["requests"]:
                    if r["id"] != rid:
                        self.assertEqual(r["verdict"], "verified")



@needs_torch
@needs_kvaudit
class TestBackends(Cases, unittest.TestCase):
    """Each of vLLM's layouts: checksums equal the reference; a flipped bit
    is a mismatch at its block position."""

    def test_flash_attention(self):
        m = Model("flash", tp=1)
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((0, 1, "A", 17, 2), 0, 1), ((0, 0, "B", 19, 0), 0, 1)])

    def test_flashinfer_nhd_tp2(self):
        m = Model("flashinfer", heads=8, tp=2)
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((1, 1, "A", 33, 3), 0, 2)])

    def test_flashinfer_hnd(self):
        m = Model("flashinfer", cache_layout="HND")
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((0, 0, "A", 2, 1), 0, 0)])

    def test_flash_hnd_kernel_blocks(self):
        # 32-token blocks, split by the runner into 16-token kernel blocks.
        m = Model("flash", cache_layout="HND", block_size=32, kernel_block_size=16, tp=2, heads=4)
        tables = {"A": (40, [5, 2], None), "B": (20, [7], None)}
        self.run_case(m, tables, [((1, 1, "A", 20, 1), 0, 0), ((0, 0, "A", 39, 0), 0, 1)])

    def test_flashinfer_kernel_blocks(self):
        m = Model("flashinfer", block_size=64, kernel_block_size=16, num_blocks=6)
        tables = {"A": (100, [5, 2], None), "B": (20, [3], None)}
        self.run_case(m, tables, [((0, 1, "A", 70, 3), 0, 1)])

    def test_mla_tp2(self):
        m = Model("mla", head_size=96, tp=2)
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        # MLA is held whole by every rank: the copy on rank 1 differs.
        self.run_case(m, tables, [((1, 0, "B", 5, 0), 0, 0)])

    def test_hybrid_mamba2_tp2(self):
        # Attention on even layers (FlashAttention re-strided to share each
        # block's page with the Mamba layer of its KVCacheTensor, 32-token
        # blocks in 16-token kernel blocks), Mamba2 state lists on odd ones.
        m = Model("flash", block_size=32, kernel_block_size=16, tp=2, heads=4, layers=4, hybrid=True)
        tables = {"A": (40, [3, 8], 4), "B": (20, [6], 10)}
        self.run_case(m, tables, [((1, 3, "A", None, 0), 1, 0), ((0, 2, "B", 19, 1), 0, 0)])

    def test_hybrid_mamba2_state_lists(self):
        # The runner before one-tensor registration (001cabc1be16): each
        # Mamba layer's cache a list of as_strided state views.
        m = Model("flash", block_size=32, kernel_block_size=16, tp=2, heads=4, layers=4, hybrid=True,
                  mamba_form="list")
        tables = {"A": (40, [3, 8], 4), "B": (20, [6], 10)}
        self.run_case(m, tables, [((1, 3, "A", None, 0), 1, 0), ((0, 2, "B", 19, 1), 0, 0)])

    def test_hybrid_mamba2_conv_dim_first(self):
        # VLLM_SSM_CONV_STATE_LAYOUT=DS: conv states (dim, state_len); FlashInfer.
        m = Model("flashinfer", block_size=32, kernel_block_size=16, tp=2, heads=4, layers=4, hybrid=True,
                  conv_layout="DS")
        tables = {"A": (40, [3, 8], 4), "B": (20, [6], 10)}
        self.run_case(m, tables, [((0, 1, "B", None, 0), 1, 0)])


@needs_torch
@needs_kvaudit
class TestLayoutRefactor(Cases, unittest.TestCase):
    """vLLM after the KV-cache layout refactor: each layer a 4-D [B, H, N, C]
    view of one int8 buffer (vllm_like.refactor_views names the commits it
    paraphrases), K and V of a head and token concatenated in C, the axes
    strided by a KVCacheLayout. Checksums equal docs/spec.md's definition
    computed by reference.py; a flipped bit is a mismatch at its position."""

    def test_nhd_default(self):
        m = Model("flash", refactor="LBNHC")
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((0, 1, "A", 17, 2), 0, 1), ((0, 0, "B", 19, 0), 0, 1)])

    def test_hnd_tp2(self):
        m = Model("flash", refactor="LBHNC", heads=8, tp=2)
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((1, 1, "A", 33, 3), 0, 2), ((0, 0, "B", 2, 1), 0, 0)])

    def test_block_outermost(self):
        m = Model("flash", refactor="BLNHC", layers=3)
        caches = m.rank_caches(0, {}, seed=0)
        a, b = caches[attn_name(0)], caches[attn_name(1)]
        # Block-outermost: the layers' pages of one block are adjacent.
        self.assertEqual((b.data_ptr() - a.data_ptr()), vl.refactor_page_bytes(m.attn_spec))
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((0, 2, "A", 20, 1), 0, 1)])

    def test_kernel_blocks(self):
        m = Model("flash", refactor="LBNHC", block_size=32, kernel_block_size=16, heads=4, tp=2)
        tables = {"A": (40, [5, 2], None), "B": (20, [7], None)}
        self.run_case(m, tables, [((1, 1, "A", 20, 1), 0, 0), ((0, 0, "A", 39, 0), 0, 1)])

    def test_fp8_uint8(self):
        # fp8 KV: the spec's dtype is uint8, the view's too; exported as its bytes.
        m = Model("flash", refactor="LBNHC", dtype=torch.uint8)
        tables = {"A": (40, [5, 2, 9], None)}
        self.run_case(m, tables, [((0, 1, "A", 3, 2), 0, 0)])

    def test_mla_576(self):
        # MLA: one latent of 576 elements a token (head_size_v 0), [B, 1, N, 576].
        m = Model("mla", refactor="LBNHC", head_size=576, tp=2)
        self.assertEqual(m.attn_spec.head_size_v, 0)
        self.assertEqual(tuple(m.rank_caches(0, {}, seed=0)[attn_name(0)].shape), (12, 1, 16, 576))
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((1, 0, "B", 5, 0), 0, 0)])

    def test_kv_sharing_alias(self):
        m = Model("flash", refactor="LBNHC", layers=2, shared={attn_name(2): attn_name(0)})
        tables = {"A": (40, [5, 2, 9], None)}
        self.run_case(m, tables, [((0, 0, "A", 20, 3), 0, 1)])
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            path = os.path.join(tmp, "rank.safetensors")
            kx.export_dump(path, m.config, m.rank_caches(0, tables, seed=2), m.requests(tables))
            layers = read_manifest(path)["groups"][0]["layers"]
        self.assertEqual(layers[-1], {"name": attn_name(2), "dtype": "bfloat16", "alias_of": attn_name(0)})

    def test_hybrid_mamba2_tp2(self):
        # Mamba2 hybrid, one [B, 1, 1, C] int8 view per layer whose C is the
        # states' bytes unpadded (the padding is in the block stride); the
        # groups overlay one buffer.
        m = Model("flash", refactor="LBNHC", tp=2, heads=4, layers=4, hybrid=True)
        caches = m.rank_caches(0, {}, seed=0)
        mix = caches[mixer_name(1)]
        states = sum(int(np.prod(s)) * vl.esize(d) for s, d in zip(m.state_spec.shapes, m.state_spec.dtypes))
        self.assertEqual((tuple(mix.shape), mix.dtype), ((12, 1, 1, states), torch.int8))
        self.assertEqual(mix.stride(0), vl.refactor_page_bytes(m.attn_spec))
        self.assertLess(states, mix.stride(0))
        tables = {"A": (40, [3, 8, 1], 4), "B": (20, [6, 2], 10)}
        self.run_case(m, tables, [((1, 3, "A", None, 0), 1, 0), ((0, 2, "B", 19, 1), 0, 1)])

    def test_pre_refactor_padded_block_stride(self):
        """9aaf83ef5 (pre-refactor): a spec with page_size_padded (an MLA
        page aligned, DeepSeek-V4 style) keeps its logical shape and pads
        the block axis's stride; the padding is never covered."""
        m = Model("mla", head_size=96, page_size_padded=16 * 96 * 2 + 512, pad_form="stride")
        c = m.rank_caches(0, {}, seed=0)[attn_name(0)]
        self.assertEqual((tuple(c.shape), c.stride(0)), ((12, 16, 96), (16 * 96 * 2 + 512) // 2))
        tables = {"A": (40, [5, 2, 9], None)}
        self.run_case(m, tables, [((0, 1, "A", 17, 0), 0, 1)])
        m = Model("flashinfer", page_size_padded=2 * 16 * 4 * 64 * 2 + 256, pad_form="stride")
        self.run_case(m, tables, [((0, 0, "A", 33, 2), 0, 2)])

    def test_refused_forms_name_layer_shape_strides(self):
        """A view that fits no reading of its spec is refused naming the
        layer, its shape and strides and what was expected; never a dump."""
        m = Model("flash", refactor="LBNHC")
        caches = m.rank_caches(0, {}, seed=0)
        name = attn_name(1)
        bad = caches[name][..., :100]  # C cut short: neither 64 + 64 nor split K/V
        caches = dict(caches, **{name: bad})
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            path = os.path.join(tmp, "rank.safetensors")
            with self.assertRaises(kx.ExportError) as cm:
                kx.export_dump(path, m.config, caches, [{"id": "A", "num_tokens": 20, "block_ids": [[5, 2]]}])
            self.assertFalse(os.path.exists(path))
        msg = str(cm.exception)
        for w in (repr(name), "[12, 4, 16, 100]", f"strides {list(bad.stride())}", "64 + 64", "expected"):
            self.assertIn(w, msg)
        # Unequal K and V head sizes: no cell of docs/spec.md §1.
        m2 = Model("flash", refactor="LBNHC")
        m2.attn_spec.head_size_v = 32
        with self.assertRaises(kx.ExportError) as cm:
            kx.build_plan(m2.config, caches)
        self.assertIn("head_size_v 32", str(cm.exception))


@needs_torch
@needs_kvaudit
class TestConsumer(unittest.TestCase):
    def test_producer_id_and_local_prefix(self):
        """A consumer's own request ids, other block ids and a 16-token
        local prefix hit: verified, and a flip in a loaded block is found."""
        m = Model("flashinfer", cache_layout="HND")
        m.add_request("A", 40)
        prod_tables = {"A": (40, [5, 2, 9], None)}
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            prod = os.path.join(tmp, "producer")
            m.export(prod, prod_tables)
            m.kv["cmpl-A"] = m.kv["A"]
            cons_tables = {"cmpl-A": (40, [3, 10, 1], None)}
            extra = {"cmpl-A": {"producer_id": "A", "num_local_computed_tokens": 16}}
            cons = os.path.join(tmp, "consumer")
            m.export(cons, cons_tables, seed=50, extra=extra)
            self.assertEqual(checks_by_group(kvaudit("checksum", "-o", "json", cons), "cmpl-A")[0]["start"], 1)
            d = kvaudit("diff", "-o", "json", prod, cons)
            self.assertEqual(d["verdict"], "verified")
            bad = os.path.join(tmp, "consumer-bad")
            m.export(bad, cons_tables, seed=51, extra=extra, flip=(0, 1, "cmpl-A", 35, 0))
            d = kvaudit("diff", "-o", "json", prod, bad, ok=(1,))
            g = d["requests"][0]["groups"][0]
            self.assertEqual((g["verdict"], g["positions"]), ("mismatch", [2]))


@needs_torch
@needs_kvaudit
class TestCurrentMain(Cases, unittest.TestCase):
    """The caches of vLLM main (the commits vllm_like names) as a connector
    receives them: one tensor per Mamba layer, KV-sharing layers missing
    from the connector's KVCacheConfig, the cross-layer cache, padded
    attention pages, mamba_cache_mode align and all, quantised caches."""

    def test_hybrid_registered_one_tensor_per_layer(self):
        m = Model("flashinfer", block_size=32, kernel_block_size=16, tp=2, heads=4, layers=4, hybrid=True)
        caches = m.rank_caches(0, {}, seed=0)
        pages = caches[mixer_name(1)]
        self.assertIsInstance(pages, torch.Tensor)  # the raw page view, as registered
        self.assertEqual(tuple(pages.shape), (m.num_blocks, 1, 1, vl.mamba_page_bytes(m.state_spec)))
        tables = {"A": (40, [3, 8], 4), "B": (20, [6], 10)}
        self.run_case(m, tables, [((1, 1, "A", None, 0), 1, 0), ((0, 3, "B", None, 0), 1, 0),
                                  ((1, 2, "A", 35, 1), 0, 1)])

    def test_kv_sharing_layer_not_in_connector_config(self):
        """Layer 2 reads layer 0's cache: the runner bound it in the dict but
        only its own copy of the config lists it. It is exported as an alias
        of layer 0 and counted once."""
        m = Model("flash", layers=2, shared={attn_name(2): attn_name(0)})
        self.assertNotIn(attn_name(2), [n for g in m.config.kv_cache_groups for n in g.layer_names])
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((0, 0, "A", 20, 3), 0, 1), ((0, 1, "B", 3, 0), 0, 0)])
        caches = m.rank_caches(0, tables, seed=2)
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            path = os.path.join(tmp, "rank.safetensors")
            kx.export_dump(path, m.config, caches, m.requests(tables), model_num_kv_heads=m.heads)
            layers = read_manifest(path)["groups"][0]["layers"]
        self.assertEqual(layers[-1], {"name": attn_name(2), "dtype": "bfloat16", "alias_of": attn_name(0)})

    def test_cross_layer_typed_nhd(self):
        m = Model("flash", layers=3, cross="typed")
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((0, 2, "A", 33, 1), 0, 2), ((0, 0, "B", 0, 3), 0, 0)])

    def test_cross_layer_typed_hnd_kernel_blocks(self):
        m = Model("flash", cache_layout="HND", block_size=32, kernel_block_size=16, layers=3, cross="typed",
                  heads=4, tp=2)
        tables = {"A": (40, [5, 2], None), "B": (20, [7], None)}
        self.run_case(m, tables, [((1, 1, "A", 20, 1), 0, 0), ((0, 2, "A", 39, 0), 0, 1)])

    def test_cross_layer_bytes_flashinfer(self):
        m = Model("flashinfer", cache_layout="HND", layers=3, cross="bytes")
        self.assertEqual(tuple(m.rank_caches(0, {}, seed=0) and m.cross_tensor.shape),
                         (m.num_blocks, 3, vl.attention_page_bytes(m.attn_spec)))
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((0, 1, "A", 17, 2), 0, 1), ((0, 2, "B", 19, 3), 0, 1)])

    def test_padded_attention_page(self):
        """page_size_padded widens the last axis (64 -> 80 elements); the
        dump covers the head only, so a flip in the padding is no mismatch."""
        real = 2 * 16 * 4 * 64 * 2
        m = Model("flash", page_size_padded=real // 64 * 80)
        self.assertEqual(m.rank_caches(0, {}, seed=0)[attn_name(0)].shape[-1], 80)
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((0, 1, "A", 17, 2), 0, 1)])
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            prod, cons = os.path.join(tmp, "p"), os.path.join(tmp, "c")
            m.export(prod, tables)
            os.makedirs(cons)
            caches = m.rank_caches(0, tables, seed=9)
            caches[attn_name(0)].view(torch.int16)[0, 2, 3, 1, 70] ^= 1  # padding of block 2's token 3
            kx.export_dump(os.path.join(cons, "rank-0-0.safetensors"), m.config, caches, m.requests(tables),
                           model="test/model", model_num_kv_heads=m.heads)
            self.assertEqual(kvaudit("diff", "-o", "json", prod, cons)["verdict"], "verified")

    def test_mamba_cache_mode_align_and_all(self):
        """The running state is the block at position (num_tokens - 1) //
        block_size of the state table; the other blocks hold other states."""
        for mode in ("align", "all"):
            with self.subTest(mode=mode):
                m = Model("flash", block_size=32, kernel_block_size=16, layers=4, hybrid=True, mamba_cache_mode=mode)
                tables = {"A": (40, [3, 8], [4, 7]), "B": (20, [6], [10])}
                self.run_case(m, tables, [((0, 1, "A", None, 0), 1, 0), ((0, 3, "B", None, 0), 1, 0)])

    def test_fp8_cache(self):
        """kv_cache_dtype fp8: vLLM stores the cache as uint8 (the spec's
        dtype); the checksum covers the bytes as stored."""
        m = Model("flashinfer", cache_layout="HND", dtype=torch.uint8, head_size=128)
        tables = {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)}
        self.run_case(m, tables, [((0, 1, "A", 17, 2), 0, 1)])

    def test_fp8_ds_mla(self):
        """MLA's fp8_ds_mla cache: 656 bytes per token, uint8 [blocks,
        block_size, 656], exported as raw cells [block, token, cell]."""
        S, n, width = 16, 40, vl.FP8_DS_MLA_TOKEN_BYTES
        spec = vl.attention_spec("mla", S, 1, 576, torch.uint8, cache_dtype_str="fp8_ds_mla")
        cfg = vl.config(12, [([attn_name(0), attn_name(1)], spec)])
        rng = np.random.default_rng(4)
        kv = {L: [rng.integers(0, 256, (n, width), dtype=np.uint8)] for L in (0, 1)}
        ids = [5, 2, 9]
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            for side, flip in (("p", False), ("c", True)):
                caches = vl.allocate(cfg, {0: "mla"}, {}, seed=1 if side == "p" else 2)
                self.assertEqual(tuple(caches[attn_name(0)].shape), (12, S, width))
                for L in (0, 1):
                    for t in range(n):
                        caches[attn_name(L)][ids[t // S], t % S] = torch.from_numpy(kv[L][0][t])
                if flip:
                    caches[attn_name(1)][ids[1], 5, 600] ^= 1
                os.makedirs(os.path.join(tmp, side))
                path = os.path.join(tmp, side, "rank-0-0.safetensors")
                kx.export_dump(path, cfg, caches, [{"id": "A", "num_tokens": n, "block_ids": [ids]}],
                               model="test/mla", model_num_kv_heads=1)
            layer = read_manifest(os.path.join(tmp, "p", "rank-0-0.safetensors"))["groups"][0]["layers"][0]
            self.assertEqual((layer["dtype"], layer["layout"]), ("uint8", ["block", "token", "cell"]))
            got = checks_by_group(kvaudit("checksum", "-o", "json", os.path.join(tmp, "p")), "A")[0]["checks"][0]
            self.assertEqual(got, [reference.hex64(reference.attention_block(kv, [0, 1], S, n, b)) for b in range(3)])
            d = kvaudit("diff", "-o", "json", os.path.join(tmp, "p"), os.path.join(tmp, "c"), ok=(1,))
            g = d["requests"][0]["groups"][0]
            self.assertEqual((g["verdict"], g["positions"]), ("mismatch", [1]))

    def test_addresses_and_agent(self):
        """Each layer and state records the address of its first element as
        the engine registered it (data_ptr()); the agent name is
        parallel.agent."""
        m = Model("flash", block_size=32, kernel_block_size=16, layers=2, hybrid=True, shared={attn_name(4): attn_name(0)})
        tables = {"A": (40, [3, 8], 4)}
        m.add_request("A", 40)
        caches = m.rank_caches(0, tables, seed=3)
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            path = os.path.join(tmp, "rank-0-0.safetensors")
            kx.export_dump(path, m.config, caches, m.requests(tables), agent="a1b2-rank0",
                           state_splits={1: m.splits()})
            manifest = read_manifest(path)
            self.assertEqual(kvaudit("checksum", "-o", "json", path)["requests"][0]["id"], "A")
        self.assertEqual(manifest["parallel"]["agent"], "a1b2-rank0")
        attn = {l["name"]: l for l in manifest["groups"][0]["layers"]}
        self.assertEqual(attn[attn_name(0)]["address"], hex(caches[attn_name(0)].data_ptr()))
        self.assertNotIn("address", attn[attn_name(4)])  # the alias
        state = manifest["groups"][1]["layers"][0]
        pages = caches[mixer_name(1)]
        conv_bytes = int(np.prod(m.state_spec.shapes[0])) * 2
        self.assertEqual(state["address"], hex(pages.data_ptr()))
        self.assertEqual([st["address"] for st in state["states"]],
                         [hex(pages.data_ptr()), hex(pages.data_ptr() + conv_bytes)])
        views = vl.mamba_state_views(pages, m.state_spec)
        self.assertEqual([st["address"] for st in state["states"]], [hex(v.data_ptr()) for v in views])
        with self.assertRaises(kx.ExportError):
            kx.export_dump(os.path.join(tempfile.gettempdir(), "never.safetensors"), m.config, caches,
                           m.requests(tables), agent="")


def read_manifest(path):
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return json.loads(header["__metadata__"][kx.METADATA_KEY])


class TestReference(unittest.TestCase):
    def test_spec_worked_example(self):
        """reference.py reproduces docs/spec.md §1's golden vector."""
        kv = {L: [np.array([[(L + 1) * 1000 + (h + 1) * 100 + t * 10 + p for p in range(2)] for t in range(4)],
                           dtype=np.uint64) for h in range(2)] for L in range(2)}
        got = [reference.attention_block(kv, [0, 1], 2, 3, b) for b in range(2)]
        self.assertEqual([reference.hex64(v) for v in got], ["0x000000021b8b4990", "0x00000002a65023b8"])


@needs_torch
class TestRefusals(unittest.TestCase):
    """Descriptions that would audit nothing fail in the exporter, naming
    the layer, and leave no file behind."""

    def setUp(self):
        self.m = Model("flashinfer", cache_layout="HND")
        self.caches = self.m.rank_caches(0, {}, seed=3)
        self.reqs = [{"id": "A", "num_tokens": 20, "block_ids": [[5, 2]]}]
        self.tmp = tempfile.TemporaryDirectory(prefix="kvaudit-export-")
        self.path = os.path.join(self.tmp.name, "rank.safetensors")

    def tearDown(self):
        self.tmp.cleanup()

    def refused(self, config, caches, reqs, *words, **kw):
        with self.assertRaises(kx.ExportError) as cm:
            kx.export_dump(self.path, config, caches, reqs, **kw)
        for w in words:
            self.assertIn(w, str(cm.exception))
        self.assertFalse(os.path.exists(self.path), "a refused export left a file")
        return str(cm.exception)

    @needs_kvaudit
    def test_hnd_shaped_tensor(self):
        """HND bytes with an HND shape (not vLLM's logical shape) are read
        by their sizes as [block, kv, head, token, dim], not taken for NHD:
        the dump checksums as the original does."""
        name = attn_name(1)
        c = dict(self.caches)
        c[name] = c[name].permute(0, 1, 3, 2, 4).contiguous()
        other = os.path.join(self.tmp.name, "hnd-shaped.safetensors")
        kx.export_dump(self.path, self.m.config, self.caches, self.reqs)
        kx.export_dump(other, self.m.config, c, self.reqs)
        with open(other, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            manifest = json.loads(json.loads(f.read(n))["__metadata__"][kx.METADATA_KEY])
        layouts = {lay["name"]: lay["layout"] for g in manifest["groups"] for lay in g["layers"]}
        self.assertEqual(layouts[name], ["block", "kv", "head", "token", "dim"])
        self.assertEqual(kvaudit("checksum", "-o", "json", self.path)["requests"],
                         kvaudit("checksum", "-o", "json", other)["requests"])
        # Swap two heads' data in place: the same shape now checksums differently.
        c[name] = c[name].clone()
        c[name][:, :, [0, 1]] = c[name][:, :, [1, 0]]
        third = os.path.join(self.tmp.name, "swapped.safetensors")
        kx.export_dump(third, self.m.config, c, self.reqs)
        self.assertNotEqual(kvaudit("checksum", "-o", "json", self.path)["requests"],
                            kvaudit("checksum", "-o", "json", third)["requests"])

    def test_ambiguous_shape_is_refused(self):
        """A shape two readings fit and no vLLM order breaks the tie
        (tokens and heads of equal size, in neither of vLLM's orders) is
        refused, naming both readings."""
        m = Model("flashinfer", heads=16, block_size=16)
        caches = m.rank_caches(0, {}, seed=3)
        name = attn_name(0)
        caches[name] = caches[name].permute(1, 0, 2, 3, 4)  # (2, blocks, 16, 16, dim) is FlashAttention's: read
        kx.build_plan(m.config, caches)
        caches[name] = caches[name].permute(0, 2, 1, 3, 4)  # (2, 16, blocks, 16, dim): no vLLM order
        self.refused(m.config, caches, self.reqs, repr(name), "alike", "[2, 16, 12, 16, 64]", "strides")

    def test_strides_do_not_fit_shape(self):
        name = attn_name(0)
        t = self.caches[name]
        raw = {"buffer": np.zeros(t.numel() * 2, np.uint8), "offset": 0, "dtype": "bfloat16",
               "shape": list(t.shape), "strides": [t.stride(0), t.stride(1), 1, 1, 1]}
        c = dict(self.caches, **{name: raw})
        self.refused(self.m.config, c, self.reqs, repr(name), "strides")

    def test_strides_past_the_buffer(self):
        name = attn_name(0)
        t = self.caches[name]
        raw = {"buffer": np.zeros(t.numel(), np.uint8), "offset": 0, "dtype": "bfloat16",
               "shape": list(t.shape), "strides": list(t.stride())}
        c = dict(self.caches, **{name: raw})
        self.refused(self.m.config, c, self.reqs, repr(name), "buffer holds")

    def test_layer_in_no_group(self):
        """A layer outside the groups that is no KV-sharing alias (its own
        tensor, not a grouped layer's) has no block table."""
        c = dict(self.caches, **{"model.layers.9.self_attn.attn": self.caches[attn_name(0)].clone()})
        self.refused(self.m.config, c, self.reqs, "'model.layers.9.self_attn.attn'", "no KV cache group")

    def test_group_layer_without_tensor(self):
        c = dict(self.caches)
        del c[attn_name(1)]
        self.refused(self.m.config, c, self.reqs, repr(attn_name(1)))

    def test_block_past_the_cache(self):
        reqs = [{"id": "A", "num_tokens": 20, "block_ids": [[5, 12]]}]
        self.refused(self.m.config, self.caches, reqs, repr(attn_name(0)), "block id 12", "past the cache")

    def test_wrong_dtype(self):
        name = attn_name(0)
        c = dict(self.caches, **{name: self.caches[name].float()})
        self.refused(self.m.config, c, self.reqs, repr(name), "bfloat16")

    def test_state_layer_given_one_of_its_states(self):
        """One state view where the layer's pages belong: not a page per
        block of the MambaSpec's page size."""
        m = Model("flash", block_size=32, kernel_block_size=16, layers=2, hybrid=True, mamba_form="list")
        caches = m.rank_caches(0, {}, seed=1)
        caches[mixer_name(1)] = caches[mixer_name(1)][0]
        reqs = [{"id": "A", "num_tokens": 20, "block_ids": [[5], [6]]}]
        self.refused(m.config, caches, reqs, repr(mixer_name(1)), "a page of 576 bytes", "32768")

    def test_state_pages_not_a_block_each(self):
        m = Model("flash", block_size=32, kernel_block_size=16, layers=2, hybrid=True)
        caches = m.rank_caches(0, {}, seed=1)
        caches[mixer_name(1)] = caches[mixer_name(1)].view(1, 1, -1)
        reqs = [{"id": "A", "num_tokens": 20, "block_ids": [[5], [6]]}]
        self.refused(m.config, caches, reqs, repr(mixer_name(1)), "a page per block")

    def test_state_list_of_wrong_length(self):
        m = Model("flash", block_size=32, kernel_block_size=16, layers=2, hybrid=True, mamba_form="list")
        caches = m.rank_caches(0, {}, seed=1)
        caches[mixer_name(1)] = caches[mixer_name(1)][:1]
        reqs = [{"id": "A", "num_tokens": 20, "block_ids": [[5], [6]]}]
        self.refused(m.config, caches, reqs, repr(mixer_name(1)), "1 state tensors for the 2 shapes")

    def test_quantised_caches_with_scales_beside_the_cells(self):
        from types import SimpleNamespace
        for mode, word in (("FP8_PER_TOKEN_HEAD", "per-token-head scales"), ("INT8_PER_TOKEN_HEAD", "per-token-head"),
                           ("NVFP4", "fp4 data")):
            with self.subTest(mode=mode):
                m = Model("flashinfer", cache_layout="HND")
                m.attn_spec.kv_quant_mode = SimpleNamespace(name=mode)
                self.refused(m.config, self.caches, self.reqs, repr(attn_name(0)), f"kv_quant_mode {mode}", word)

    def test_padded_page_of_the_wrong_size(self):
        m = Model("flash", page_size_padded=2 * 16 * 4 * 80 * 2)
        caches = m.rank_caches(0, {}, seed=0)
        m.attn_spec.page_size_padded = 2 * 16 * 4 * 96 * 2
        self.refused(m.config, caches, self.reqs, repr(attn_name(0)), "page_size_padded 24576 bytes",
                     "[2, 12, 16, 4, 80]", "strides [61440, 5120, 320, 80, 1]")

    def test_running_state_in_a_null_block(self):
        """mamba_cache_mode align: the running state is at position
        (num_tokens - 1) // block_size of the state group's table; a null
        block there is an error, not another block's state."""
        m = Model("flash", block_size=32, kernel_block_size=16, layers=2, hybrid=True, mamba_cache_mode="align")
        caches = m.rank_caches(0, {}, seed=1)
        reqs = [{"id": "A", "num_tokens": 40, "block_ids": [[5, 2], [6, 0]]}]
        self.refused(m.config, caches, reqs, "request 'A'", "group 1", "null block")

    def test_state_split_that_does_not_add_up(self):
        m = Model("flash", block_size=32, kernel_block_size=16, layers=2, hybrid=True)
        caches = m.rank_caches(0, {}, seed=1)
        reqs = [{"id": "A", "num_tokens": 20, "block_ids": [[5], [6]]}]
        bad = kx.mamba2_state_splits(2, m.I, 1, m.MH, m.N)  # TP 2's split on a TP 1 rank
        self.refused(m.config, caches, reqs, repr(mixer_name(1)), "split", state_splits={1: bad})

    def test_nothing_overwritten(self):
        with open(self.path, "wb") as f:
            f.write(b"keep")
        with self.assertRaises(FileExistsError):
            kx.export_dump(self.path, self.m.config, self.caches, self.reqs)
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), b"keep")

    def test_null_block_and_remap(self):
        """Block id 0 is vLLM's null block; the dump renumbers the selected
        blocks and keeps the worker's ids in its metadata."""
        m = Model("flash", window=None)
        caches = m.rank_caches(0, {}, seed=2)
        reqs = [{"id": "A", "num_tokens": 40, "block_ids": [[0, 9, 4]]}]
        out = kx.export_dump(self.path, m.config, caches, reqs)
        self.assertEqual(out["block_ids"], [4, 9])
        with open(self.path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        manifest = json.loads(header["__metadata__"][kx.METADATA_KEY])
        self.assertEqual(manifest["num_blocks"], 2)
        self.assertEqual(manifest["requests"][0]["block_table"], {"0": [None, 1, 0]})
        self.assertEqual(json.loads(header["__metadata__"][kx.BLOCK_IDS_KEY]), [4, 9])
        self.assertEqual(header[attn_name(0)]["shape"], [2, 2, 16, 4, 64])


MEMORY_SCRIPT = r"""
import json, os, resource, sys, tracemalloc
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import numpy as np, torch
import kvaudit_export as kx, vllm_like as vl
total, layers, use_numpy, out = int(sys.argv[3]), 8, sys.argv[4] == "numpy", sys.argv[5]
spec = vl.attention_spec("full", 16, 8, 128, torch.bfloat16)
page = vl.attention_page_bytes(spec)
nb = total // layers // page
cfg = vl.config(nb, [([f"model.layers.{i}.self_attn.attn" for i in range(layers)], spec)])
caches = vl.allocate(cfg, {0: "flash"}, {0: 16}, "NHD", fill=1)
if use_numpy:
    caches = {k: v.view(torch.int16).numpy() for k, v in caches.items()}
reqs = [{"id": "A", "num_tokens": 60, "block_ids": [[3, nb - 1, 17, 40]]},
        {"id": "B", "num_tokens": 50, "block_ids": [[nb // 2, 5, 6, 7]]}]
tracemalloc.start()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
s = kx.export_dump(out, cfg, caches, reqs, model_num_kv_heads=8)
peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
peak_py = tracemalloc.get_traced_memory()[1]
cache = sum(t.nbytes if use_numpy else t.numel() * t.element_size() for t in caches.values())
print(json.dumps({"cache": cache, "selected": s["bytes"], "layer": s["max_layer_bytes"],
                  "rss_growth": peak_rss, "traced_peak": peak_py}))
"""


@needs_torch
class TestMemory(unittest.TestCase):
    """Exporting 2 requests from a big cache copies their blocks, one layer
    at a time: the peak growth of resident memory and of traced (NumPy)
    allocations stays within a few times the selected blocks.
    The cache is 1 GiB (KVAUDIT_MEMORY_TEST_MIB sets another size)."""

    def measure(self, kind):
        size = int(os.environ.get("KVAUDIT_MEMORY_TEST_MIB", "1024")) << 20
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            out = os.path.join(tmp, "rank.safetensors")
            p = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, os.path.dirname(HERE), HERE, str(size), kind, out],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            r = json.loads(p.stdout)
        print(f"\n  memory ({kind}): cache {r['cache'] >> 20} MiB, selected {r['selected'] >> 10} KiB "
              f"({r['layer'] >> 10} KiB a layer), resident growth {r['rss_growth'] >> 10} KiB, "
              f"traced peak {r['traced_peak'] >> 10} KiB", file=sys.stderr)
        self.assertGreaterEqual(r["cache"], size * 0.99)
        self.assertEqual(r["selected"], 8 * 8 * 2 * 16 * 8 * 128 * 2)  # 8 layers x 8 blocks x 64 KiB
        return r

    def test_torch(self):
        r = self.measure("torch")
        # resident growth: the gathered layer, its host copy, Python's own
        # working set (a few MiB); never the cache.
        self.assertLess(r["rss_growth"], 3 * r["selected"] + (8 << 20))

    def test_numpy(self):
        r = self.measure("numpy")
        self.assertLess(r["traced_peak"], 3 * r["layer"] + (1 << 20))
        self.assertLess(r["rss_growth"], 3 * r["selected"] + (8 << 20))


@needs_torch
@needs_kvaudit
class TestIPCManifest(unittest.TestCase):
    """export_ipc's manifest, without a GPU: a fake handle function stands
    for CUDA IPC (one handle per raw allocation, the tensor's byte offset in
    it). Swapping each handle for a file holding that allocation's bytes,
    with the same offsets, shapes and strides, lets the cpu engine read the
    live description: it must give the reference's checksums."""

    def run_model(self, m, tables):
        import base64
        import export_ipc
        for rid, (n, _, _) in tables.items():
            m.add_request(rid, n)
        with tempfile.TemporaryDirectory(prefix="kvaudit-ipc-") as tmp:
            live = os.path.join(tmp, "live")
            for rank in range(m.tp):
                raw = {}
                caches = m.rank_caches(rank, tables, seed=rank, raw_out=raw)
                allocs = list({b.data_ptr(): b for b in raw.values()}.values())

                def fake(t):
                    p = t.data_ptr()
                    for i, b in enumerate(allocs):
                        if b.data_ptr() <= p < b.data_ptr() + b.numel():
                            return bytes([i]) * 64, p - b.data_ptr(), 0
                    raise AssertionError("a tensor outside the allocations")

                d = os.path.join(live, f"rank-0-{rank}")
                dev = export_ipc.export_ipc(d, m.config, caches, m.requests(tables), handle_fn=fake,
                                            tp_rank=rank, tp_size=m.tp, model_num_kv_heads=m.heads,
                                            state_splits={1: m.splits()} if m.hybrid else None)
                self.assertEqual(dev, 0)
                with open(os.path.join(d, "manifest.json")) as f:
                    manifest = json.load(f)
                self.assertEqual(manifest["num_blocks"], m.num_blocks)  # the worker's own block ids
                for g in manifest["groups"]:
                    for layer in g["layers"]:
                        src = layer["source"]
                        name = layer["name"]
                        if g["kind"] == "mamba":
                            self.assertEqual(layer["layout"], ["block", "page"])
                            self.assertEqual(src["strides"], [src["shape"][1], 1])
                        else:
                            t = caches[name]
                            self.assertEqual(src["shape"], list(t.shape))
                            self.assertEqual(src["strides"], list(t.stride()))
                        i = base64.b64decode(src.pop("cuda_ipc"))[0]
                        src["file"] = f"alloc{i}.bin"
                for i, b in enumerate(allocs):
                    b.numpy().tofile(os.path.join(d, f"alloc{i}.bin"))
                os.remove(os.path.join(d, "manifest.json"))
                with open(os.path.join(d, "manifest.json"), "w") as f:
                    json.dump(manifest, f)
            got = kvaudit("checksum", "-o", "json", live)
            for rid, (n, _, _) in tables.items():
                groups = checks_by_group(got, rid)
                for gid, values in m.expected(rid, n).items():
                    for check in groups[gid]["checks"]:
                        self.assertEqual(check, [reference.hex64(v) for v in values], f"{rid} group {gid}")
            return manifest

    def test_flashinfer_hnd_tp2(self):
        m = Model("flashinfer", cache_layout="HND", heads=8, tp=2)
        manifest = self.run_model(m, {"A": (40, [5, 2, 9], None), "B": (20, [7, 11], None)})
        # vLLM's logical shape, HND strides: the layout names the logical axes.
        self.assertEqual(manifest["groups"][0]["layers"][0]["layout"], ["block", "kv", "token", "head", "dim"])

    def test_hybrid_mamba2_tp2(self):
        m = Model("flash", block_size=32, kernel_block_size=16, tp=2, heads=4, layers=4, hybrid=True)
        self.run_model(m, {"A": (40, [3, 8], 4), "B": (20, [6], 10)})

    def test_mla(self):
        m = Model("mla", head_size=96)
        self.run_model(m, {"A": (40, [5, 2, 9], None)})


@needs_torch
@needs_kvaudit
class TestGroupsAndSharing(unittest.TestCase):
    def test_uniform_type_specs_and_kv_sharing(self):
        """A group whose spec is UniformTypeKVCacheSpecs (one spec per
        layer), and a layer bound to another layer's cache (vLLM's KV
        sharing): the alias is exported once and counted once, under the
        lower layer."""
        from types import SimpleNamespace
        m = Model("flash", layers=2)
        tables = {"A": (40, [5, 2, 9], None)}
        m.add_request("A", 40)
        caches = m.rank_caches(0, tables, seed=4)
        names = [attn_name(0), attn_name(1), attn_name(2)]
        caches[attn_name(2)] = caches[attn_name(0)]  # layer 2 reads layer 0's cache
        uniform = type("UniformTypeKVCacheSpecs", (SimpleNamespace,), {})(
            block_size=16, kv_cache_specs={n: m.attn_spec for n in names})
        cfg = SimpleNamespace(num_blocks=m.num_blocks, kv_cache_groups=[SimpleNamespace(layer_names=names, kv_cache_spec=uniform)])
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            path = os.path.join(tmp, "rank.safetensors")
            kx.export_dump(path, cfg, caches, m.requests(tables), model_num_kv_heads=m.heads)
            with open(path, "rb") as f:
                header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
            layers = json.loads(header["__metadata__"][kx.METADATA_KEY])["groups"][0]["layers"]
            self.assertEqual(layers[2], {"name": attn_name(2), "dtype": "bfloat16", "alias_of": attn_name(0)})
            self.assertNotIn(attn_name(2), header)
            got = checks_by_group(kvaudit("checksum", "-o", "json", path), "A")[0]["checks"][0]
            want = [reference.attention_block(m.kv["A"], [0, 1], 16, 40, b) for b in range(3)]
            self.assertEqual(got, [reference.hex64(v) for v in want])

    def test_full_and_sliding_window_groups_sharing_tensors(self):
        """vLLM's hybrid allocator: a full-attention group and a
        sliding-window group whose layers share KVCacheTensors, block ids
        from one pool, the blocks out of the window replaced by the null
        block (0)."""
        S, D, heads = 16, 64, 2
        full = vl.attention_spec("full", S, heads, D, torch.bfloat16)
        swa = vl.attention_spec("swa", S, heads, D, torch.bfloat16, window=32)
        cfg = vl.config(12, [([attn_name(0)], full), ([attn_name(1)], swa)], shared=[(attn_name(0), attn_name(1))])
        caches = vl.allocate(cfg, {0: "flash", 1: "flash"}, {}, "HND", seed=5)
        n, rng = 70, np.random.default_rng(9)
        kv = {L: [rng.integers(-2**15, 2**15, (n, 2 * D), dtype=np.int16) for _ in range(heads)] for L in (0, 1)}
        tables = {0: [5, 2, 9, 1, 7], 1: [0, 0, 3, 4, 6]}
        for L, spec in ((0, full), (1, swa)):
            for h in range(heads):
                for t in range(n):
                    b = tables[L][t // S]
                    if b:
                        vl.write_token(caches[attn_name(L)], "flash", spec, S, b, t % S, h, kv[L][h][t].reshape(2, D))
        with tempfile.TemporaryDirectory(prefix="kvaudit-export-") as tmp:
            path = os.path.join(tmp, "rank.safetensors")
            kx.export_dump(path, cfg, caches, [{"id": "A", "num_tokens": n, "block_ids": [tables[0], tables[1]]}])
            groups = checks_by_group(kvaudit("checksum", "-o", "json", path), "A")
        self.assertEqual(groups[1]["kind"], "sliding_window")
        self.assertEqual(groups[0]["checks"][0], [reference.hex64(reference.attention_block(kv, [0], S, n, b)) for b in range(5)])
        self.assertEqual(groups[1]["start"], 2)
        self.assertEqual(groups[1]["checks"][0], [reference.hex64(reference.attention_block(kv, [1], S, n, b)) for b in range(2, 5)])


class TestSplitHelpers(unittest.TestCase):
    """The split helpers against vLLM's state shape formulas
    (MambaStateShapeCalculator), written out here."""

    def test_mamba2(self):
        for tp, groups in ((1, 1), (2, 1), (4, 2), (4, 8)):
            I, H, N = 256, 8, 16
            extra = 0 if groups % tp == 0 else tp - groups
            conv_dim = (I + 2 * (groups + extra) * N) // tp
            conv, ssm = kx.mamba2_state_splits(tp, I, groups, H, N)
            self.assertEqual(conv["axis"], 1)  # SD: (state_len, dim)
            self.assertEqual(sum(a for a, _ in conv["segments"]), conv_dim)
            self.assertEqual(conv["segments"][1][1], max(1, tp // groups))
            self.assertEqual(ssm["segments"], [[H // tp, 1]])

    def test_gdn_and_mamba1(self):
        tp, hk, hv, dk, dv = 2, 4, 8, 32, 16
        conv, ssm = kx.gdn_state_splits(tp, hk, hv, dk, dv, conv_layout="DS")
        self.assertEqual(conv["axis"], 0)
        self.assertEqual(sum(a for a, _ in conv["segments"]), (dk * hk * 2 + dv * hv) // tp)
        self.assertEqual(ssm["segments"], [[hv // tp, 1]])
        conv, ssm = kx.mamba1_state_splits(4, 512)
        self.assertEqual((conv["segments"], ssm["segments"]), ([[128, 1]], [[128, 1]]))
