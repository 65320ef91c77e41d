"""Tests of the capture connector (kvaudit_export.connector) driven as vLLM
drives KV connectors, inside MultiConnector beside a NIXL-like connector.

There is no vLLM and no NIXL here: vllm_standin.py calls the scheduler-side
and worker-side methods in vLLM's order with vLLM's arguments (its
docstring names the sources), and moves KV between the producer's and the
consumer's CPU caches with nixl_standin's agent. kvaudit (the executable
the Go harness builds, $KVAUDIT_BIN) then checks the dumps the connector
wrote: a correct transfer verifies, a byte flipped in transit is a
mismatch at its block position.
"""

import errno
import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import kvaudit_export as kx  # noqa: E402
from kvaudit_export import connector as kc  # noqa: E402
from kvaudit_export import nixl_log  # noqa: E402

try:
    import torch
    import vllm_like as vl
    import vllm_standin as vs
    from test_export import Model, attn_name
    from test_nixl_log import read_log
except ImportError:  # pragma: no cover - CI requires it
    torch = None

KVAUDIT = os.environ.get("KVAUDIT_BIN", "")
needs_torch = unittest.skipIf(torch is None and not os.environ.get("KVAUDIT_REQUIRE_TORCH"), "no PyTorch")
needs_kvaudit = unittest.skipIf(not KVAUDIT, "KVAUDIT_BIN is not set")


def kvaudit(*args, ok=(0,)):
    p = subprocess.run([KVAUDIT, *args], capture_output=True, text=True)
    if p.returncode not in ok:
        raise AssertionError(f"kvaudit {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def request(rid, n, params, logical):
    return vs.SimpleNamespace(request_id=rid, prompt_token_ids=list(range(n)), num_prompt_tokens=n,
                              num_computed_tokens=0, num_tokens=n, kv_transfer_params=params, logical=logical)


@needs_torch
@needs_kvaudit
class TestProducerConsumer(unittest.TestCase):
    def setUp(self):
        self.saved = vs.install_fake_vllm_modules()
        self.tmp = tempfile.TemporaryDirectory(prefix="kvaudit-connector-")
        self.dir = self.tmp.name

    def tearDown(self):
        vs.restore_modules(self.saved)
        self.tmp.cleanup()

    def engine(self, m, kv_role, engine_id, extra, seed, corrupt=None):
        """An engine whose connector is MultiConnector([KvauditConnector,
        NixlStandin]): kvaudit's first, so that its worker installs the NIXL
        recorder before the NIXL connector creates its agent."""
        nixl = []

        def make(role, rank):
            cfg = vs.vllm_config(kv_role, extra, m.tp, engine_id, m.heads, connectors=True)
            children = [kc.KvauditConnector(cfg, role, m.config), vs.NixlStandin(cfg, role, m.config)]
            if corrupt is not None:
                children[1].corrupt = corrupt
            nixl.append(children[1])
            return vs.MultiConnectorStandin(children)

        return vs.Engine(m, make, m.tp, seed=seed)

    # vLLM's internal ids: the user's id, "-" and 8 random hex digits (PR
    # #27987); the user (and a proxy's X-Request-Id) knows "R" and "cmpl-R-0".
    PROD_ID, CONS_ID = "R-0a1b2c3d", "cmpl-R-0-4e5f6a7b"

    def run_pair(self, corrupt=None):
        """Both engines with the README's kv_both config."""
        m = Model("flashinfer", heads=4, tp=2, layers=2)
        m.add_request("R", 40)
        extra = {"dump_dir": self.dir, "nixl_log": True, "lease_s": 30}
        prod = self.engine(m, "kv_both", "prefill-engine", extra, seed=1)
        r = request(self.PROD_ID, 40, {"do_remote_decode": True}, "R")
        prod.add(r)
        prod.step()  # prefill: the request finishes, the connectors keep its blocks
        self.assertIn(self.PROD_ID, prod.done)
        self.assertNotIn(self.PROD_ID, prod.freed, "blocks freed before the dump was written")
        params = dict(prod.params[self.PROD_ID])
        self.assertEqual(params["remote_request_id"], self.PROD_ID)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "producer", "R", "kv_transfer_params.json")))

        # The proxy forwards the producer's params; the producer's scheduler
        # would have added its kv_checksums (kvaudit computes the same).
        pdir = os.path.join(self.dir, "producer", "R")
        step = 0
        while not os.path.exists(os.path.join(pdir, "rank-0-1.safetensors")):
            prod.step()  # the workers dump in the step after, before its forward
            step += 1
            self.assertLess(step, 3)
        payloads = json.loads(kvaudit("checksum", "-o", "payload", pdir))
        params["kv_checksums"] = payloads["R"]

        cons = self.engine(m, "kv_both", "decode-engine", extra, seed=2, corrupt=corrupt)
        # A local prefix-cache hit of one block, computed by an earlier request.
        cid = self.CONS_ID
        c = request(cid, 40, params, "R")
        prefix_block = cons.free.pop()
        cons.requests[cid] = c
        for rank, (_, caches) in enumerate(cons.workers):
            cons.blocks[cid] = [prefix_block]
            cons._forward(rank, caches, cid, 0, 16)
        cons.prefix[cid] = (16, [prefix_block])
        cons.wrong.add((cid, 39))  # its recompute of the last prompt token is not bit-identical
        cons.add(c)
        cons.step()  # schedule: the NIXL connector matches 24 tokens, the load starts
        self.assertEqual(c.status, "WAITING_FOR_REMOTE_KVS")
        # The NIXL connector changed the request's own params, as vLLM's does.
        self.assertEqual((c.kv_transfer_params["do_remote_prefill"], c.kv_transfer_params["_remote_blocks_processed"]),
                         (False, True))
        for _ in range(3):
            cons.step()
            if cid in cons.done:
                break
        self.assertIn(cid, cons.done)
        # kv_both: the decode request is dumped once, as a consumer: no
        # producer dump of it, its blocks freed in the step it finished.
        self.assertIn(cid, cons.freed, "the consumer's blocks were held")
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, "producer"))), ["R"])
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, "consumer"))), ["R"])
        self.assertEqual(cons.sched.children[0]._consumers, {})
        prod.step()  # the producer learns the READ finished and frees the blocks
        for _ in range(3):
            if self.PROD_ID in prod.freed:
                break
            prod.step()
        self.assertIn(self.PROD_ID, prod.freed)
        return m, pdir, os.path.join(self.dir, "consumer", "R"), prod, cons

    def test_verified_then_a_flipped_byte(self):
        m, pdir, cdir, prod, cons = self.run_pair()
        self.assertEqual(sorted(f for f in os.listdir(cdir)),
                         ["kv_transfer_params.json", "rank-0-0.safetensors", "rank-0-1.safetensors"])
        out = kvaudit("diff", "-o", "json", pdir, cdir)
        d = json.loads(out)
        self.assertEqual(d["verdict"], "verified", out)
        req = d["requests"][0]
        self.assertEqual(req["id"], "cmpl-R-0")  # the user's id, not vLLM's
        # What the consumer received (kv_checksums) verifies its dump too.
        d2 = json.loads(kvaudit("diff", "-o", "json", os.path.join(cdir, "kv_transfer_params.json"), cdir))
        self.assertEqual(d2["verdict"], "verified")
        with open(os.path.join(cdir, "rank-0-0.safetensors"), "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        manifest = json.loads(header["__metadata__"]["kvaudit.manifest"])
        r = manifest["requests"][0]
        self.assertEqual((r["id"], r["engine_request_id"], r["num_tokens"], r["num_local_computed_tokens"],
                          r["producer_id"]), ("cmpl-R-0", self.CONS_ID, 40, 16, "R"))
        with open(os.path.join(pdir, "rank-0-1.safetensors"), "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        pr = json.loads(header["__metadata__"]["kvaudit.manifest"])["requests"][0]
        self.assertEqual((pr["id"], pr["engine_request_id"]), ("R", self.PROD_ID))
        self.assertEqual(manifest["parallel"]["agent"], "decode-engine-tp0")

        # The NIXL log of consumer rank 1: its memory, its READ of the
        # producer's blocks, DONE.
        logs = os.path.join(self.dir, "nixl")
        for conn in (prod, cons):
            for child in conn.workers:
                for c in child[0].children:
                    if hasattr(c, "agent"):
                        c.agent.kvaudit_close()
        log = read_log(os.path.join(logs, "decode-engine-tp1.jsonl"))
        self.assertEqual(log[0], {"format": "kvaudit-nixl-log/1", "agent": "decode-engine-tp1", "tp_rank": 1,
                                  "pp_rank": 0, "lease_s": 30, "engine_id": "decode-engine"})
        caches = cons.workers[1][1]
        reg = next(x for x in log if x.get("op") == "register")
        self.assertEqual([d[0] for d in reg["descs"]], [hex(caches[n].data_ptr()) for n in sorted(caches)])
        xfer = next(x for x in log if x.get("op") == "xfer")
        # The notif as vLLM sent it; the request it serves by the user's id, as the dumps name it.
        self.assertEqual((xfer["kind"], xfer["notif"], xfer["request"]), ("READ", self.PROD_ID + ":2", "R"))
        remote = next(x for x in log if x.get("op") == "dlist" and x["handle"] == xfer["remote"])
        self.assertEqual(remote["agent"], "prefill-engine-tp1")
        self.assertEqual(len(xfer["local_ids"]), 2 * 2)  # 2 layers x 2 loaded blocks
        self.assertIn({"op": "state", "id": xfer["id"], "state": "DONE"}, log)

        # kvaudit resolves every descriptor of the logs through the dumps'
        # addresses (the exporter's engine geometry: it renumbered the
        # blocks it dumped) and finds every invariant kept.
        t = json.loads(kvaudit("transfers", logs, "--producer", pdir, "--consumer", cdir, "-o", "json"))
        self.assertEqual((t["verdict"], t["findings"], t["unresolved"]), ("clean", [], []), t)
        self.assertEqual(sorted((r["id"], r["producer_id"], r["rank"]["tp"]) for r in t["requests"]),
                         [("cmpl-R-0", "R", 0), ("cmpl-R-0", "R", 1)])
        # A descriptor pair dropped from rank 1's READ: the tokens it
        # carried are not covered, and the block holds bytes no transfer
        # delivered (here, what the stand-in did move).
        bad = os.path.join(self.dir, "bad-nixl")
        os.makedirs(bad)
        for name in os.listdir(logs):
            with open(os.path.join(logs, name)) as f:
                lines = [json.loads(line) for line in f]
            for x in lines:
                if x.get("op") == "xfer" and name == "decode-engine-tp1.jsonl":
                    x["local_ids"], x["remote_ids"] = x["local_ids"][1:], x["remote_ids"][1:]
            with open(os.path.join(bad, name), "w") as f:
                f.writelines(json.dumps(x, separators=(",", ":")) + "\n" for x in lines)
        t = json.loads(kvaudit("transfers", bad, "--producer", pdir, "--consumer", cdir, "-o", "json", ok=(1,)))
        self.assertEqual(sorted({f["invariant"] for f in t["findings"]}), ["covered", "zeroed"])
        f = t["findings"][0]
        self.assertEqual((f["request"], f["rank"]["tp"], f["position"], f["layer"], f["tokens"]), ("cmpl-R-0", 1, 1, 0, [16, 31]))

    def test_byte_flipped_in_transit(self):
        # Rank 1, layer 0, the second loaded block (block position 2), a byte
        # of token 3's K.
        page = 2 * 16 * 2 * 64 * 2
        m, pdir, cdir, _, _ = self.run_pair(corrupt=(1, 0, 1, 3 * 2 * 64 * 2 + 5))
        self.assertLess(3 * 2 * 64 * 2 + 5, page)
        d = json.loads(kvaudit("diff", "-o", "json", pdir, cdir, ok=(1,)))
        self.assertEqual(d["verdict"], "mismatch")
        g = d["requests"][0]["groups"][0]
        self.assertEqual((g["verdict"], g["positions"]), ("mismatch", [2]))


@needs_torch
class TestSelection(unittest.TestCase):
    """Which requests are captured, and the disk budget (scheduler side)."""

    def connector(self, **extra):
        m = Model("flashinfer", layers=2)
        cfg = vs.vllm_config("kv_both", dict({"dump_dir": self.tmp.name}, **extra), 1, "e", m.heads)
        return kc.KvauditConnector(cfg, vs.Role.SCHEDULER, m.config), m

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kvaudit-connector-")

    def tearDown(self):
        self.tmp.cleanup()

    def finish(self, conn, rid, params=None):
        r = request(rid, 40, params or {"do_remote_decode": True}, rid)
        r.num_computed_tokens = 40
        return conn.request_finished_all_groups(r, ([3, 4, 5],))

    def test_listed_ids_and_fractions(self):
        conn, _ = self.connector(requests=["keep", "cmpl-x"])
        self.assertEqual(self.finish(conn, "keep"), (True, None))
        self.assertEqual(self.finish(conn, "other"), (False, None))
        ids = [f"req-{i}" for i in range(400)]
        conn, _ = self.connector(requests=0.25)
        kept = [i for i in ids if self.finish(conn, i)[0]]
        self.assertTrue(60 < len(kept) < 140, len(kept))
        conn2, _ = self.connector(requests=0.25)  # the same requests on any engine
        self.assertEqual(kept, [i for i in ids if self.finish(conn2, i)[0]])
        meta = conn2.build_connector_meta(None)
        self.assertEqual([d.req_id for d in meta.dumps], kept)
        self.assertEqual(conn2.build_connector_meta(None).dumps, [])

    def test_consumer_picks_by_the_producers_id(self):
        conn, _ = self.connector(requests=["R"])
        r = request("cmpl-R-0", 40, {"do_remote_prefill": True, "remote_request_id": "R"}, "R")
        self.assertEqual(conn.get_num_new_matched_tokens(r, 16), (0, False))
        conn.update_state_after_alloc(r, vs.KVCacheBlocks([7, 8, 9], 1), 0)
        self.assertEqual(conn.build_connector_meta(None).dumps, [])  # not before the load finished
        conn.update_connector_output(vs.SimpleNamespace(finished_recving={"cmpl-R-0"}, failed_recving=set()))
        dumps = conn.build_connector_meta(None).dumps
        self.assertEqual([(d.req_id, d.producer_id, d.num_local_computed_tokens, d.block_ids) for d in dumps],
                         [("cmpl-R-0", "R", 16, ([7, 8, 9],))])
        self.assertTrue(dumps[0].directory.endswith(os.path.join("consumer", "R")))

    def test_disk_budget(self):
        m = Model("flashinfer", layers=2)
        page = vl.attention_page_bytes(m.attn_spec)
        for g in m.config.kv_cache_groups:  # vLLM's specs give page_size_bytes
            g.kv_cache_spec.page_size_bytes = page
        cfg = vs.vllm_config("kv_both", {"dump_dir": self.tmp.name, "max_bytes": 5 * page}, 1, "e", m.heads)
        conn = kc.KvauditConnector(cfg, vs.Role.SCHEDULER, m.config)
        # 3 blocks x 2 layers = 6 pages: not in 5, twice in 13, not thrice.
        self.assertEqual(self.finish(conn, "a")[0], False)
        cfg = vs.vllm_config("kv_both", {"dump_dir": self.tmp.name, "max_bytes": 13 * page}, 1, "e", m.heads)
        conn = kc.KvauditConnector(cfg, vs.Role.SCHEDULER, m.config)
        self.assertEqual([self.finish(conn, r)[0] for r in ("a", "b", "c")], [True, True, False])

    def test_a_failed_dump_still_frees_the_blocks(self):
        """A worker that cannot dump (here: no caches registered) says why
        beside the dump and still reports the request, so that its blocks
        are freed."""
        m = Model("flashinfer", layers=2)
        cfg = vs.vllm_config("kv_both", {"dump_dir": self.tmp.name}, 1, "e", m.heads)
        w = kc.KvauditConnector(cfg, vs.Role.WORKER, m.config)
        d = os.path.join(self.tmp.name, "producer", "x")
        w.bind_connector_metadata(kc.KvauditConnectorMetadata(
            dumps=[kc.Dump(req_id="x", side="producer", directory=d, block_ids=([3],), num_tokens=10)]))
        self.assertEqual(w.get_finished(set()), (None, None))  # not before the scheduler reports it finished
        self.assertEqual(w.get_finished({"x"}), ({"x"}, None))
        with open(os.path.join(d, "rank-0-0.safetensors.error.json")) as f:
            self.assertIn("no KV caches were registered", json.load(f)["error"])
        self.assertFalse(os.path.exists(os.path.join(d, "rank-0-0.safetensors")))

    def test_options(self):
        self.assertEqual(kc.parse_bytes("50GiB"), 50 << 30)
        self.assertEqual(kc.parse_bytes("2.5G"), int(2.5 * (1 << 30)))
        self.assertEqual(kc.parse_bytes(1000), 1000)
        for bad in ("lots", "5 parsecs"):
            with self.assertRaises(ValueError):
                kc.parse_bytes(bad)
        for bad in ({"requests": 2}, {"requests": "some"}, {"role": "both"}):
            with self.assertRaises(ValueError):
                self.connector(**bad)


class FullDisk:
    """The writer's file calls made to fail as a full disk fails them: the
    modules' open (kvaudit_export's and the connector's; builtins are left
    alone) returns files under root whose writes raise ENOSPC once `room`
    bytes have been written in all (or, with errno_, another error)."""

    def __init__(self, root, room, errno_=errno.ENOSPC):
        self.root, self.room, self.errno = os.path.realpath(root), room, errno_
        self.written = 0
        self.failures = 0

    def __enter__(self):
        import builtins
        real = builtins.open
        disk = self

        class File:
            def __init__(self, f):
                self._f = f

            def write(self, data):
                n = len(data) if not isinstance(data, memoryview) else data.nbytes
                if disk.failures or disk.written + n > disk.room:  # once full, it stays full
                    disk.failures += 1
                    raise OSError(disk.errno, os.strerror(disk.errno))
                disk.written += n
                return self._f.write(data)

            def __getattr__(self, name):
                return getattr(self._f, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self._f.close()

        def fake_open(path, mode="r", *args, **kwargs):
            f = real(path, mode, *args, **kwargs)
            if any(c in mode for c in "wxa") and os.path.realpath(str(path)).startswith(disk.root):
                return File(f)
            return f

        self.modules = [kx, kc]
        for mod in self.modules:
            mod.open = fake_open
        return self

    def __exit__(self, *exc):
        for mod in self.modules:
            del mod.open


def files_under(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


@needs_torch
class TestNeverRaises(unittest.TestCase):
    """The connector never takes vLLM down: driven by vllm_standin's engine
    (vLLM's order of calls, alone as the engine's connector), a full disk,
    a permission error and an exporter failure are logged once a kind,
    counted and stop capture (all of it, for a full disk), while every
    request is served and its blocks freed."""

    def setUp(self):
        self.saved = vs.install_fake_vllm_modules()
        self.tmp = tempfile.TemporaryDirectory(prefix="kvaudit-connector-")
        self.dir = self.tmp.name
        self.m = Model("flashinfer", heads=4, tp=2, layers=2)
        for rid in ("A", "B", "C"):
            self.m.add_request(rid, 40)

    def tearDown(self):
        vs.restore_modules(self.saved)
        self.tmp.cleanup()

    def engine(self, **extra):
        conns = []

        def make(role, rank):
            cfg = vs.vllm_config("kv_producer", dict({"dump_dir": self.dir}, **extra), self.m.tp, "p", self.m.heads)
            c = kc.KvauditConnector(cfg, role, self.m.config)
            conns.append(c)
            return c

        e = vs.Engine(self.m, make, self.m.tp, seed=1)
        return e, conns

    def serve(self, e, rids):
        for rid in rids:
            e.add(request(rid + "-0a1b2c3d", 40, {"do_remote_decode": True}, rid))
            e.step()
            e.step()  # the workers dump (or fail to) and report it; the blocks are freed
            self.assertIn(rid + "-0a1b2c3d", e.done)
            self.assertIn(rid + "-0a1b2c3d", e.freed, f"{rid}: blocks held")

    def test_full_disk_mid_dump_stops_all_capture(self):
        e, conns = self.engine()
        sched, workers = conns[0], conns[1:]
        with self.assertLogs("kvaudit_export.connector", level="ERROR") as logs, \
                FullDisk(self.dir, room=20000) as disk:  # room for the JSON, not for a dump
            self.serve(e, ["A", "B", "C"])
        self.assertGreater(disk.failures, 0)
        # Each worker: one failed dump, then nothing; the full disk logged once.
        for w in workers:
            self.assertEqual(w.errors, {kc.DISK_FULL: 1})
            self.assertIsNotNone(w.stopped)
        full = [r for r in logs.records if "disk is full" in r.getMessage()]
        self.assertEqual(len(full), len(workers) + (1 if sched.stopped else 0), [r.getMessage() for r in logs.records])
        # Nothing half-written: no dump, no temporary file, no error note on a full disk.
        left = files_under(self.dir)
        self.assertFalse([f for f in left if ".tmp-" in f or f.endswith(".safetensors") or "error" in f], left)
        # The scheduler's own writes hit the full disk too: it stopped, and
        # the requests after that were not captured (nor held).
        self.assertIsNotNone(sched.stopped)
        self.assertEqual(sched.errors, {kc.DISK_FULL: 1})

    def test_disk_full_on_the_scheduler_first(self):
        e, conns = self.engine()
        with self.assertLogs("kvaudit_export.connector", level="ERROR"), FullDisk(self.dir, room=0, errno_=errno.EFBIG):
            self.serve(e, ["A", "B"])
        self.assertEqual(conns[0].errors, {kc.DISK_FULL: 1})
        self.assertEqual(files_under(self.dir), [])

    def test_permission_error_stops_that_request(self):
        e, conns = self.engine()
        real = os.makedirs
        denied = os.path.join(self.dir, "producer", "A")

        def makedirs(path, *a, **kw):
            if os.path.normpath(path) == denied:
                raise PermissionError(errno.EACCES, "Permission denied", path)
            return real(path, *a, **kw)

        with self.assertLogs("kvaudit_export.connector", level="ERROR") as logs, \
                mock.patch.object(kc.os, "makedirs", makedirs):
            self.serve(e, ["A", "B"])
            e.add(request("A-99999999", 40, {"do_remote_decode": True}, "A"))  # again denied: counted, not logged
            e.step()
            e.step()
        self.assertEqual(conns[0].errors, {kc.PERMISSION: 2})
        self.assertIsNone(conns[0].stopped)
        self.assertEqual(len(logs.records), 1, [r.getMessage() for r in logs.records])
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, "producer"))), ["B"])
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, "producer", "B"))),
                         ["kv_transfer_params.json", "rank-0-0.safetensors", "rank-0-1.safetensors"])

    def test_any_exporter_exception(self):
        e, conns = self.engine()

        def broken(*a, **kw):
            raise RuntimeError("something the exporter did not expect")

        with self.assertLogs("kvaudit_export.connector", level="ERROR") as logs, \
                mock.patch.object(kc, "export_dump", broken):
            self.serve(e, ["A", "B"])
        for w in conns[1:]:
            self.assertEqual(w.errors, {kc.OTHER: 2})
            self.assertIsNone(w.stopped)
        self.assertEqual(len(logs.records), 2)  # once per worker
        with open(os.path.join(self.dir, "producer", "B", "rank-0-1.safetensors.error.json")) as f:
            note = json.load(f)
        self.assertEqual((note["request"], note["engine_request_id"], note["kind"]), ("B", "B-0a1b2c3d", kc.OTHER))
        self.assertIn("did not expect", note["error"])

    def test_scheduler_methods_survive_hostile_input(self):
        """Objects vLLM would never pass (no ids, no params, broken blocks)
        are counted, never raised."""
        cfg = vs.vllm_config("kv_both", {"dump_dir": self.dir}, 1, "e", self.m.heads)
        conn = kc.KvauditConnector(cfg, vs.Role.SCHEDULER, self.m.config)
        broken = vs.SimpleNamespace(request_id="x", kv_transfer_params={"do_remote_prefill": True})

        class Blocks:
            def get_block_ids(self):
                raise RuntimeError("no blocks")

        self.assertEqual(conn.get_num_new_matched_tokens(broken, 0), (0, False))
        conn.update_state_after_alloc(broken, Blocks(), 0)
        conn.update_connector_output(vs.SimpleNamespace(finished_recving={"x"}, failed_recving=None))
        self.assertEqual(conn.build_connector_meta(vs.SimpleNamespace(scheduled_new_reqs=[object()])).dumps, [])
        self.assertEqual(conn.request_finished_all_groups(vs.SimpleNamespace(), ([1],)), (False, None))
        self.assertGreaterEqual(sum(conn.errors.values()), 2)


class TestRequestIds(unittest.TestCase):
    """vLLM's internal ids and ids that would name other paths."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kvaudit-connector-")

    def tearDown(self):
        self.tmp.cleanup()

    def connector(self, role="kv_both", **extra):
        cfg = vs.vllm_config(role, dict({"dump_dir": self.tmp.name}, **extra), 1, "e", 4)
        return kc.KvauditConnector(cfg, vs.Role.SCHEDULER, None)

    def finish(self, conn, rid, n=40):
        r = vs.SimpleNamespace(request_id=rid, prompt_token_ids=list(range(n)), num_computed_tokens=n,
                               kv_transfer_params={"do_remote_decode": True})
        return conn.request_finished_all_groups(r, ([3, 4, 5],))

    def test_user_ids_filter_and_name_dumps(self):
        self.assertEqual(kc.user_request_id("R-0a1b2c3d"), "R")
        self.assertEqual(kc.user_request_id("cmpl-x-1-deadbeef"), "cmpl-x-1")
        for keep in ("R-0a1b2c3", "R-0A1B2C3D", "R0a1b2c3d", "-0a1b2c3d", "R-0a1b2c3dd"):
            self.assertEqual(kc.user_request_id(keep), keep)
        conn = self.connector(requests=["R"])
        self.assertEqual(self.finish(conn, "R-0a1b2c3d"), (True, None))
        self.assertEqual(self.finish(conn, "Q-0a1b2c3d"), (False, None))
        d = conn.build_connector_meta(None).dumps[0]
        self.assertEqual((d.req_id, d.user_id, os.path.basename(d.directory)), ("R-0a1b2c3d", "R", "R"))
        # A fraction samples the user's id: both sides pick the same requests
        # whatever suffix each engine drew.
        a, b = self.connector(requests=0.5), self.connector(requests=0.5)
        ids = [f"u{i}" for i in range(64)]
        self.assertEqual([self.finish(a, i + "-0a1b2c3d")[0] for i in ids],
                         [self.finish(b, i + "-ffffffff")[0] for i in ids])
        # request_id_suffix "keep": ids as vLLM has them.
        keep = self.connector(requests=["R"], request_id_suffix="keep")
        self.assertEqual(self.finish(keep, "R-0a1b2c3d"), (False, None))
        with self.assertRaises(ValueError):
            self.connector(request_id_suffix="drop")

    def test_consumer_filtered_by_the_ids_a_user_knows(self):
        for sel in (["R"], ["cmpl-9"], ["R-0a1b2c3d"], ["cmpl-9-11223344"]):
            conn = self.connector(requests=sel)
            r = vs.SimpleNamespace(request_id="cmpl-9-11223344", prompt_token_ids=list(range(40)),
                                   kv_transfer_params={"do_remote_prefill": True, "remote_request_id": "R-0a1b2c3d"})
            conn.get_num_new_matched_tokens(r, 0)
            conn.update_state_after_alloc(r, vs.KVCacheBlocks([]), 0)
            conn.update_connector_output(vs.SimpleNamespace(finished_recving={"cmpl-9-11223344"}))
            so = vs.SimpleNamespace(scheduled_new_reqs=[vs.SimpleNamespace(req_id="cmpl-9-11223344",
                                                                           block_ids=([4, 5, 6],))])
            dumps = conn.build_connector_meta(so).dumps
            self.assertEqual([(d.req_id, d.user_id, d.producer_id, d.block_ids, os.path.basename(d.directory))
                              for d in dumps], [("cmpl-9-11223344", "cmpl-9", "R", ([4, 5, 6],), "R")], sel)
            self.assertEqual(conn.request_finished_all_groups(r, ([4, 5, 6],)), (False, None))

    def test_no_id_names_a_path_outside(self):
        conn = self.connector()
        hostile = [".", "..", "../../etc/passwd", "a/b", "a_b", "/abs", "", " ", "x" * 300, "nul\x00", "-rf",
                   ".hidden", "\u00e9t\u00e9", "a\\b", "CON"]
        dirs = []
        for rid in hostile:
            self.assertEqual(self.finish(conn, rid)[0], True, rid)
        for d in conn.build_connector_meta(None).dumps:
            self.assertEqual(os.path.dirname(d.directory), os.path.join(self.tmp.name, "producer"), d.req_id)
            name = os.path.basename(d.directory)
            self.assertRegex(name, r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
            self.assertLessEqual(len(name), 128)
            dirs.append(name)
        self.assertEqual(len(set(dirs)), len(hostile), dirs)  # no two ids share a directory
        self.assertEqual(sorted(os.listdir(self.tmp.name)), ["producer"])
        self.assertEqual(sorted(os.listdir(os.path.join(self.tmp.name, "producer"))), sorted(dirs))


if __name__ == "__main__":
    unittest.main()
