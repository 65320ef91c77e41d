"""Tests of kvaudit_sglang_export on pools laid out as SGLang lays them out.

Each test builds a rank's pools with sglang_like (paraphrased from SGLang's
memory_pool.py @000ccdba), writes KV into the requests' pages through
req_to_token, exports, and compares `kvaudit checksum --scheme
sglang-adler32` with zlib.adler32 over the same bytes (and, for the worked
example of docs/spec.md §1, with the fixed values of docs/sglang.md); then
it checks `kvaudit diff` of a producer and a consumer, clean and with one
byte changed.

Needs PyTorch (Debian: python3-torch) and the kvaudit executable in
$KVAUDIT_BIN (examples/sglang/export_test.go builds it).
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import torch
    import sglang_like as sl
    import kvaudit_sglang_export as kx
except ImportError:  # pragma: no cover - CI requires it
    torch = None

KVAUDIT = os.environ.get("KVAUDIT_BIN", "")
needs = unittest.skipIf((torch is None or not KVAUDIT) and not os.environ.get("KVAUDIT_REQUIRE_TORCH"), "no PyTorch or no $KVAUDIT_BIN")


def kvaudit(*args):
    p = subprocess.run([KVAUDIT, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def values(path):
    rc, out, err = kvaudit("checksum", "--scheme", "sglang-adler32", "-o", "json", path)
    if rc not in (0, 1):
        raise AssertionError(f"kvaudit checksum: exit {rc}: {err}")
    return {(v["request"], v["tp"]): v for v in json.loads(out)["values"]}


def worked_pool(pages, tail):
    """docs/spec.md §1's worked example as an SGLang MHA pool: int64, 2
    layers, 2 heads, head_dim 1, page_size 2, K piece 0 and V piece 1."""
    pool = sl.MHATokenToKVPool(size=16, page_size=2, dtype=torch.int64, head_num=2, head_dim=1, layer_num=2)
    rtt = sl.ReqToTokenPool(4, 8)
    sl.place(rtt.req_to_token, 1, pages, 3, 2)
    for layer in range(2):
        for kv, bufs in ((0, pool.k_buffer), (1, pool.v_buffer)):
            for t in range(4):
                slot = pages[t // 2] * 2 + t % 2
                for h in range(2):
                    if t < 3:
                        bufs[layer][slot, h, 0] = (layer + 1) * 1000 + (h + 1) * 100 + t * 10 + kv
                    else:
                        bufs[layer][slot, h].view(torch.uint8)[:] = tail
    return pool, rtt


@needs
class TestWorkedExample(unittest.TestCase):
    def test_values(self):
        cases = [(0x00, 0xAFDA0C3D, 0x4C4F0465), (0xFF, 0xB7404BFD, 0x5F014425)]
        with tempfile.TemporaryDirectory() as d:
            for tail, full, suffix in cases:
                for pages in ([0, 1], [5, 2]):
                    pool, rtt = worked_pool(pages, tail)
                    self.assertEqual(kx.request_pages(rtt.req_to_token, 1, 3, 2), pages)
                    for whole in (False, True):
                        out = os.path.join(d, f"w-{tail}-{pages[0]}-{whole}")
                        kx.export_pool(out, pool, rtt.req_to_token, [
                            {"id": "r", "req_pool_idx": 1, "num_tokens": 3, "kv_checksum": full},
                            {"id": "s", "req_pool_idx": 1, "num_tokens": 3, "start_send_idx": 2, "kv_checksum": suffix}], whole=whole)
                        v = values(out)
                        self.assertEqual(v[("r", 0)]["value"], "0x%08x" % full, (tail, pages, whole))
                        self.assertEqual(v[("s", 0)]["value"], "0x%08x" % suffix, (tail, pages, whole))
                        self.assertTrue(v[("r", 0)]["agrees"])
                    self.assertEqual(sl.reference_adler32(pool.k_buffer + pool.v_buffer, pages, 2), full)


@needs
class TestPools(unittest.TestCase):
    def random_pools(self, mla, page_size, tp_size, seed):
        g = torch.Generator().manual_seed(seed)
        size = 128
        rtt = sl.ReqToTokenPool(4, 64)
        # Distinct pages for both requests, from page 1 on (page 0 is padding).
        perm = (torch.randperm(size // page_size, generator=g) + 1).tolist()
        placed = []
        for idx, n in ((0, 37), (2, 20)):
            npages = -(-n // page_size)
            pages, perm = perm[:npages], perm[npages:]
            sl.place(rtt.req_to_token, idx, pages, n, page_size)
            placed.append((idx, pages, n))
        pools = []
        for rank in range(tp_size):
            if mla:
                pool = sl.MLATokenToKVPool(size, page_size, torch.bfloat16, 48, 16, 3)
                bufs = pool.kv_buffer
            else:
                pool = sl.MHATokenToKVPool(size, page_size, torch.bfloat16, 4 // tp_size, 32, 3)
                bufs = pool.k_buffer + pool.v_buffer
            for b in bufs:
                b.copy_(torch.randn(b.shape, generator=g).to(torch.bfloat16))
            pools.append(pool)
        return pools, rtt, placed

    def check(self, mla, page_size, tp_size):
        pools, rtt, placed = self.random_pools(mla, page_size, tp_size, 11 + page_size + tp_size)
        with tempfile.TemporaryDirectory() as d:
            side = os.path.join(d, "producer")
            os.mkdir(side)
            for rank, pool in enumerate(pools):
                reqs = [{"id": f"req-{i}", "req_pool_idx": idx, "num_tokens": n} for i, (idx, _, n) in enumerate(placed)]
                kx.export_pool(os.path.join(side, f"rank-0-{rank}"), pool, rtt.req_to_token, reqs, tp_rank=rank, tp_size=tp_size)
            v = values(side)
            for rank, pool in enumerate(pools):
                bufs = pool.kv_buffer if mla else pool.k_buffer + pool.v_buffer
                for i, (idx, _, n) in enumerate(placed):
                    pages = kx.request_pages(rtt.req_to_token, idx, n, page_size)
                    want = sl.reference_adler32(bufs, pages, page_size)
                    self.assertEqual(v[(f"req-{i}", rank)]["value"], "0x%08x" % want, (mla, page_size, rank, i))
            # kvaudit's own checks read the same pools through the layers.
            rc, out, err = kvaudit("checksum", side)
            self.assertEqual(rc, 0, err)

    def test_mha(self):
        for ps in (1, 16):
            for tp in (1, 2):
                self.check(False, ps, tp)

    def test_mla(self):
        for ps in (1, 16):
            self.check(True, ps, 1)


@needs
class TestDiff(unittest.TestCase):
    def test_producer_consumer(self):
        pool, rtt = worked_pool([5, 2], 0x00)
        # The consumer: the same KV copied page by page into pages [3, 6].
        cons = sl.MHATokenToKVPool(size=16, page_size=2, dtype=torch.int64, head_num=2, head_dim=1, layer_num=2)
        crtt = sl.ReqToTokenPool(4, 8)
        sl.place(crtt.req_to_token, 0, [3, 6], 3, 2)
        for src, dst in ((pool.k_buffer, cons.k_buffer), (pool.v_buffer, cons.v_buffer)):
            for layer in range(2):
                for sp, dp in ((5, 3), (2, 6)):
                    dst[layer][dp * 2:dp * 2 + 2] = src[layer][sp * 2:sp * 2 + 2]
        with tempfile.TemporaryDirectory() as d:
            p, c = os.path.join(d, "p"), os.path.join(d, "c")
            kx.export_pool(p, pool, rtt.req_to_token, [{"id": "r", "req_pool_idx": 1, "num_tokens": 3, "kv_checksum": 0xAFDA0C3D}])
            kx.export_pool(c, cons, crtt.req_to_token, [{"id": "r", "req_pool_idx": 0, "num_tokens": 3, "kv_checksum": 0xAFDA0C3D}])
            rc, out, err = kvaudit("diff", p, c)
            self.assertEqual(rc, 0, out + err)
            # One byte of V of layer 1, token 2, head 0 changed on the consumer.
            cons.v_buffer[1][6 * 2, 0].view(torch.uint8)[1] ^= 0x10
            c2 = os.path.join(d, "c2")
            kx.export_pool(c2, cons, crtt.req_to_token, [{"id": "r", "req_pool_idx": 0, "num_tokens": 3, "kv_checksum": 0xAFDA0C3D}])
            rc, out, err = kvaudit("diff", p, c2)
            self.assertEqual(rc, 1, out + err)
            self.assertEqual(values(c2)[("r", 0)]["agrees"], False)


if __name__ == "__main__":
    unittest.main()
