"""Tests of the NIXL recorder (kvaudit_export.nixl_log) against a stand-in
agent (nixl_standin.py): there is no NIXL here. The stand-in has _api.py's
methods and argument forms and moves bytes for real between CPU tensors,
so what the log says a transfer did can be checked against the memory it
changed.

Each expected record is built here from the arguments the test gave, not
from the recorder's code.
"""

import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import nixl_standin as ns  # noqa: E402
from kvaudit_export import nixl_log  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover - CI requires it
    torch = None

needs_torch = unittest.skipIf(torch is None and not os.environ.get("KVAUDIT_REQUIRE_TORCH"), "no PyTorch")


def read_log(path, times=False):
    """The log's records. Every record, the header included, ends with the
    times it was written (nixl-log extension 1): both or neither, ints,
    t_mono_ns non-decreasing, t_wall_ns a time of this century; checked
    here and dropped (times=True keeps them)."""
    with open(path) as f:
        text = f.read()
    assert text.endswith("\n"), f"{path}: a cut-off last record"
    out, last = [], -1
    for i, line in enumerate(text.splitlines()):
        r = json.loads(line)
        mono, wall = r.get("t_mono_ns"), r.get("t_wall_ns")
        assert isinstance(mono, int) and isinstance(wall, int), f"{path}:{i + 1}: times {mono!r} {wall!r}"
        assert list(r)[-2:] == ["t_mono_ns", "t_wall_ns"], f"{path}:{i + 1}: the times end the record"
        assert mono >= last, f"{path}:{i + 1}: t_mono_ns {mono} before {last}"
        assert 1_600_000_000 * 10**9 < wall < 4_000_000_000 * 10**9, f"{path}:{i + 1}: t_wall_ns {wall}"
        last = mono
        if not times:
            del r["t_mono_ns"], r["t_wall_ns"]
        out.append(r)
    return out


def descs(rows):
    return [[hex(a), n, d] for a, n, d in rows]


class Recorded(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kvaudit-nixl-")
        nixl_log.install(self.tmp.name, tp_rank=1, pp_rank=0)
        self.Agent = nixl_log.recording_class(ns.nixl_agent)

    def tearDown(self):
        self.tmp.cleanup()

    def log(self, agent):
        agent.kvaudit_close()
        path = os.path.join(self.tmp.name, f"{agent.name}.jsonl")
        self.assertFalse(os.path.exists(path + ".partial"))
        return read_log(path)


@needs_torch
class TestForms(Recorded):
    def test_register_forms(self):
        """register_memory with each form _api.py takes."""
        a = self.Agent("dec-0")
        t = torch.zeros(64, dtype=torch.int16)
        t2 = torch.zeros(32, dtype=torch.float32)
        a.register_memory([(0x7f0000001000, 4096, 0, ""), (0x7f0000002000, 4096, 1, "")], "VRAM")
        a.register_memory(np.array([[0x7f0000003000, 512, 0], [0x7f0000004000, 512, 0]], dtype=np.uint64), "VRAM")
        a.register_memory(t)
        a.register_memory([t, t2])
        a.register_memory(a.get_reg_descs([(0x10, 16, 3, "")], "DRAM"))
        log = self.log(a)
        self.assertEqual(log[0], {"format": "kvaudit-nixl-log/1", "agent": "dec-0", "tp_rank": 1, "pp_rank": 0})
        self.assertEqual(log[1:], [
            {"op": "register", "mem": "VRAM", "descs": descs([(0x7f0000001000, 4096, 0), (0x7f0000002000, 4096, 1)])},
            {"op": "register", "mem": "VRAM", "descs": descs([(0x7f0000003000, 512, 0), (0x7f0000004000, 512, 0)])},
            {"op": "register", "mem": "DRAM", "descs": descs([(t.data_ptr(), 128, 0)])},
            {"op": "register", "mem": "DRAM", "descs": descs([(t.data_ptr(), 128, 0), (t2.data_ptr(), 128, 0)])},
            {"op": "register", "mem": "DRAM", "descs": descs([(0x10, 16, 3)])},
        ])

    def test_dlist_forms_and_prepped_xfers(self):
        """prep_xfer_dlist with tuples, an Nx3 array, tensors, and lists
        from get_xfer_descs (readable back, or not); make_prepped_xfer with
        list and int32-array indices; states once, when final."""
        a = self.Agent("dec-1")
        t = torch.zeros(16, dtype=torch.bfloat16)
        local = [(0x1000 + 256 * i, 256, 0) for i in range(4)]
        h1 = a.prep_xfer_dlist("NIXL_INIT_AGENT", local, "VRAM")
        h2 = a.prep_xfer_dlist("prefill-3", np.array(local, dtype=np.uint64) + np.array([0x10000, 0, 0], np.uint64), "VRAM")
        h3 = a.prep_xfer_dlist("", [t])
        h4 = a.prep_xfer_dlist("prefill-3", a.get_xfer_descs([(0x9000, 64, 2)], "VRAM"))
        a.opaque_xfer_descs = True
        opaque = a.get_xfer_descs(np.array([[0xa000, 32, 1]], dtype=np.uint64), "VRAM")
        h5 = a.prep_xfer_dlist("prefill-3", opaque)
        x1 = a.make_prepped_xfer("READ", h1, [0, 2], h2, np.array([1, 3], dtype=np.int32), notif_msg=b"req-7:2")
        x2 = a.make_prepped_xfer("WRITE", h3, np.array([0], dtype=np.int32), h5, [0])
        for x in (x1, x2):
            a.check_xfer_state(x)
            a.check_xfer_state(x)  # DONE again: no second record
        a.release_xfer_handle(x1)
        log = self.log(a)
        shifted = [(r[0] + 0x10000, r[1], r[2]) for r in local]
        self.assertEqual(log[1:], [
            {"op": "dlist", "handle": 1, "agent": "NIXL_INIT_AGENT", "descs": descs(local)},
            {"op": "dlist", "handle": 2, "agent": "prefill-3", "descs": descs(shifted)},
            {"op": "dlist", "handle": 3, "agent": "", "descs": descs([(t.data_ptr(), 32, 0)])},
            {"op": "dlist", "handle": 4, "agent": "prefill-3", "descs": descs([(0x9000, 64, 2)])},
            {"op": "dlist", "handle": 5, "agent": "prefill-3", "descs": descs([(0xa000, 32, 1)])},
            {"op": "xfer", "id": 1, "kind": "READ", "local": 1, "local_ids": [0, 2], "remote": 2,
             "remote_ids": [1, 3], "notif": "req-7:2", "request": "req-7"},
            {"op": "xfer", "id": 2, "kind": "WRITE", "local": 3, "local_ids": [0], "remote": 5,
             "remote_ids": [0], "notif": ""},
            {"op": "state", "id": 1, "state": "DONE"},
            {"op": "state", "id": 2, "state": "DONE"},
        ])
        self.assertIsNotNone(h4)

    def test_initialize_xfer_context_and_err(self):
        """initialize_xfer's record names descriptors and the remote agent;
        request_context sets the request; a transfer in ERR is recorded."""
        src = torch.arange(64, dtype=torch.int16)
        dst = torch.zeros(64, dtype=torch.int16)
        remote = self.Agent("pre-0")
        a = self.Agent("dec-2")
        self.assertEqual(a.add_remote_agent(remote.get_agent_metadata()), "pre-0")
        ld = a.get_xfer_descs([(dst.data_ptr(), 64, 0), (dst.data_ptr() + 64, 64, 0)], "DRAM")
        rd = a.get_xfer_descs([(src.data_ptr() + 64, 64, 0), (src.data_ptr(), 64, 0)], "DRAM")
        with nixl_log.request_context("cmpl-9"):
            x = a.initialize_xfer("READ", ld, rd, "pre-0", b"pre-req-9:1")
        self.assertEqual(a.transfer(x), "DONE")
        self.assertEqual(dst.tolist(), list(range(32, 64)) + list(range(32)))  # the log's bytes moved
        a.fail_next = True
        y = a.initialize_xfer("READ", ld, rd, "pre-0")
        self.assertEqual(a.transfer(y), "ERR")
        log = self.log(a)
        rows_l = [(dst.data_ptr(), 64, 0), (dst.data_ptr() + 64, 64, 0)]
        rows_r = [(src.data_ptr() + 64, 64, 0), (src.data_ptr(), 64, 0)]
        self.assertEqual(log[1:], [
            {"op": "xfer", "id": 1, "kind": "READ", "local_descs": descs(rows_l), "remote_descs": descs(rows_r),
             "remote_agent": "pre-0", "notif": "pre-req-9:1", "request": "cmpl-9"},
            {"op": "post", "id": 1, "notif": ""},
            {"op": "state", "id": 1, "state": "DONE"},
            {"op": "xfer", "id": 2, "kind": "READ", "local_descs": descs(rows_l), "remote_descs": descs(rows_r),
             "remote_agent": "pre-0", "notif": ""},
            {"op": "post", "id": 2, "notif": ""},
            {"op": "state", "id": 2, "state": "ERR"},
        ])
        self.assertEqual(a.remote_agents, ["pre-0"])

    def test_older_signature_with_is_sorted(self):
        Agent = nixl_log.recording_class(ns.nixl_agent_with_is_sorted)
        a = Agent("old-0")
        a.register_memory([(0x40, 8, 0, "")], "VRAM", True)
        a.prep_xfer_dlist("NIXL_INIT_AGENT", [(0x40, 8, 0)], "VRAM", True)
        log = self.log(a)
        self.assertEqual([r["op"] for r in log[1:]], ["register", "dlist"])
        self.assertEqual(log[2]["descs"], descs([(0x40, 8, 0)]))

    def test_names_never_reused(self):
        a, b = self.Agent("same"), self.Agent("same")
        a.kvaudit_close()
        b.kvaudit_close()
        self.assertEqual(sorted(os.listdir(self.tmp.name)), ["same.2.jsonl", "same.jsonl"])


class FakeXpuTensor:
    """A tensor on an Intel GPU as NIXL sees one (torch here has no XPU):
    data_ptr, numel, element_size, get_device() >= 0, device "xpu:0"."""

    def __init__(self, ptr, n):
        self.ptr, self.n = ptr, n
        self.device = "xpu:0"

    def data_ptr(self):
        return self.ptr

    def numel(self):
        return self.n

    def element_size(self):
        return 2

    def get_device(self):
        return 0


@needs_torch
class TestLeaseRecords(Recorded):
    """The records a lease and completion audit needs (the NIXL log
    extension): post, notif, notifs, remote_done, error, deregister,
    remove_agent, mem_view; the header's lease_s and engine_id; times on
    every record (read_log checks them)."""

    def test_posts_notifications_and_completions(self):
        nixl_log.install(self.tmp.name, tp_rank=1, pp_rank=0, lease_s=30, engine_id="prefill-e")
        src = torch.arange(32, dtype=torch.int16)
        dst = torch.zeros(32, dtype=torch.int16)
        p, d = self.Agent("pre-1"), self.Agent("dec-1")
        d.add_remote_agent(p.get_agent_metadata())
        p.add_remote_agent(d.get_agent_metadata())
        loc = d.prep_xfer_dlist("NIXL_INIT_AGENT", [(dst.data_ptr(), 64, 0)], "DRAM")
        rem = d.prep_xfer_dlist("pre-1", [(src.data_ptr(), 64, 0)], "DRAM")
        x = d.make_prepped_xfer("READ", loc, [0], rem, [0], notif_msg=b"R-0a1b2c3d:1")
        self.assertEqual(d.transfer(x, b"R-0a1b2c3d:1"), "DONE")
        self.assertEqual(dst.tolist(), src.tolist())
        d.send_notif("pre-1", notif_msg=b"HB:R-0a1b2c3d,Q-11223344")
        self.assertEqual(p.get_new_notifs(), {"dec-1": [b"R-0a1b2c3d:1", b"HB:R-0a1b2c3d,Q-11223344"]})
        self.assertEqual(p.get_new_notifs(), {})  # none: no record
        d.send_notif("pre-1", "S-00000000:1")
        self.assertFalse(p.check_remote_xfer_done("dec-1", b"T-"))  # not found: no record
        self.assertTrue(p.check_remote_xfer_done("dec-1", b"S-"))
        d.remove_remote_agent("pre-1")
        reg = p.register_memory([(src.data_ptr(), 64, 0, "")], "DRAM")
        p.deregister_memory(reg)
        v1 = d.prep_mem_view(d.get_xfer_descs([(dst.data_ptr(), 64, 0)], "VRAM"))
        v2 = d.prep_mem_view(d.get_remote_descs([(src.data_ptr(), 64, 0, "pre-1")], "VRAM"), backends=["UCX"])
        self.assertNotEqual(v1, v2)
        plog, dlog = self.log(p), self.log(d)
        self.assertEqual(plog[0], {"format": "kvaudit-nixl-log/1", "agent": "pre-1", "tp_rank": 1, "pp_rank": 0,
                                   "lease_s": 30, "engine_id": "prefill-e"})
        self.assertEqual(plog[1:], [
            {"op": "notifs", "notifs": [["dec-1", "R-0a1b2c3d:1"], ["dec-1", "HB:R-0a1b2c3d,Q-11223344"]]},
            {"op": "remote_done", "agent": "dec-1", "msg": "S-"},
            {"op": "register", "mem": "DRAM", "descs": descs([(src.data_ptr(), 64, 0)])},
            {"op": "deregister", "mem": "DRAM", "descs": descs([(src.data_ptr(), 64, 0)])},
        ])
        self.assertEqual(dlog[1:], [
            {"op": "dlist", "handle": 1, "agent": "NIXL_INIT_AGENT", "descs": descs([(dst.data_ptr(), 64, 0)])},
            {"op": "dlist", "handle": 2, "agent": "pre-1", "descs": descs([(src.data_ptr(), 64, 0)])},
            {"op": "xfer", "id": 1, "kind": "READ", "local": 1, "local_ids": [0], "remote": 2, "remote_ids": [0],
             "notif": "R-0a1b2c3d:1", "request": "R"},
            {"op": "post", "id": 1, "notif": "R-0a1b2c3d:1"},
            {"op": "state", "id": 1, "state": "DONE"},
            {"op": "notif", "agent": "pre-1", "msg": "HB:R-0a1b2c3d,Q-11223344"},
            {"op": "notif", "agent": "pre-1", "msg": "S-00000000:1"},
            {"op": "remove_agent", "agent": "pre-1"},
            {"op": "mem_view", "handle": 3, "agent": "", "descs": descs([(dst.data_ptr(), 64, 0)])},
            {"op": "mem_view", "handle": 4, "agent": "pre-1", "descs": descs([(src.data_ptr(), 64, 0)])},
        ])
        # The times are those of the calls, in call order.
        t = read_log(os.path.join(self.tmp.name, "dec-1.jsonl"), times=True)
        self.assertLessEqual(t[3]["t_mono_ns"], t[4]["t_mono_ns"])

    def test_a_failing_call_is_recorded_and_raised_unchanged(self):
        a = self.Agent("dec-3")
        loc = a.prep_xfer_dlist("", [(0x1000, 8, 0)], "VRAM")
        x = a.make_prepped_xfer("READ", loc, [0], loc, [0], b"R:1")
        for call, args, xid in (("transfer", (x,), 1), ("check_xfer_state", (x,), 1), ("send_notif", ("p", b"m"), None),
                                ("get_new_notifs", (), None), ("prep_mem_view", (loc,), None),
                                ("remove_remote_agent", ("p",), None)):
            a.raise_next = call
            with self.assertRaises(RuntimeError) as cm:
                getattr(a, call)(*args)
            self.assertEqual(str(cm.exception), f"nixlBackendError: {call} failed")
        log = self.log(a)
        errors = [r for r in log if r.get("op") == "error"]
        self.assertEqual([(r["call"], r["id"], r["msg"]) for r in errors],
                         [(c, i, f"RuntimeError: nixlBackendError: {c} failed") for c, i in
                          (("transfer", 1), ("check_xfer_state", 1), ("send_notif", None), ("get_new_notifs", None),
                           ("prep_mem_view", None), ("remove_remote_agent", None))])
        self.assertNotIn("post", [r.get("op") for r in log])  # the post that raised posted nothing

    def test_xpu_memory_is_vram(self):
        a = self.Agent("xpu-0")
        a.register_memory(FakeXpuTensor(0x4000, 16))
        a.register_memory([(0x5000, 64, 0, "")], "XPU")
        a.register_memory([(0x6000, 64, 0, "")], "DRAM")
        log = self.log(a)
        self.assertEqual([(r["mem"], r["descs"]) for r in log[1:]],
                         [("VRAM", descs([(0x4000, 32, 0)])), ("VRAM", descs([(0x5000, 64, 0)])),
                          ("DRAM", descs([(0x6000, 64, 0)]))])


class TestNeverRaisesIntoNixl(unittest.TestCase):
    """A full disk (the writer's os.write failing with ENOSPC), a log that
    cannot be created (EACCES) or descriptors the recorder cannot read never
    raise into a NIXL call: the call works, the log stops where it was (whole
    records only) and keeps its .partial name."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kvaudit-nixl-")
        nixl_log.install(self.tmp.name, tp_rank=0, pp_rank=0)
        self.Agent = nixl_log.recording_class(ns.nixl_agent)

    def tearDown(self):
        self.tmp.cleanup()

    def test_full_disk(self):
        import errno
        from unittest import mock
        real = nixl_log._os_write
        room = {"left": 400}

        def write(fd, data):
            n = len(data)
            if n > room["left"]:
                k = room["left"]  # a short write, then the disk is full
                room["left"] = 0
                if k:
                    return real(fd, bytes(data[:k]))
                raise OSError(errno.ENOSPC, "No space left on device")
            room["left"] -= n
            return real(fd, data)

        src = np.arange(64, dtype=np.int16)
        dst = np.zeros(64, dtype=np.int16)
        with mock.patch.object(nixl_log, "_os_write", write), self.assertLogs("kvaudit_export.nixl_log", "ERROR") as logs:
            a = self.Agent("full-0")
            a.add_remote_agent(a.get_agent_metadata())
            for i in range(20):  # far more than 400 bytes of records
                loc = a.prep_xfer_dlist("", [(dst.ctypes.data, 128, 0)], "DRAM")
                rem = a.prep_xfer_dlist("full-0", [(src.ctypes.data, 128, 0)], "DRAM")
                x = a.make_prepped_xfer("READ", loc, [0], rem, [0], f"R{i}:1".encode())
                self.assertEqual(a.transfer(x), "DONE")  # the NIXL call works
            a.kvaudit_close()
        self.assertEqual(dst.tolist(), src.tolist())
        self.assertEqual(len(logs.records), 1, [r.getMessage() for r in logs.records])
        path = os.path.join(self.tmp.name, "full-0.jsonl")
        self.assertFalse(os.path.exists(path))
        log = read_log(path + ".partial")  # whole records only, each with its times
        self.assertGreaterEqual(len(log), 2)
        self.assertLess(len(log), 1 + 20 * 5)

    def test_log_cannot_be_created(self):
        from unittest import mock

        def denied(*a, **kw):
            raise PermissionError(13, "Permission denied")

        with mock.patch.object(nixl_log, "_os_open", denied), self.assertLogs("kvaudit_export.nixl_log", "ERROR"):
            a = self.Agent("denied-0")
        a.register_memory([(0x100, 8, 0, "")], "VRAM")
        loc = a.prep_xfer_dlist("", [(0x100, 8, 0)], "VRAM")
        self.assertIsNotNone(loc)
        a.kvaudit_close()
        self.assertEqual(os.listdir(self.tmp.name), [])

    def test_unreadable_descriptors(self):
        class Odd:
            pass

        class Agent(ns.nixl_agent):
            def register_memory(self, reg_list, mem_type=None, backends=[]):
                return "registered"

        a = nixl_log.recording_class(Agent)("odd-0")
        with self.assertLogs("kvaudit_export.nixl_log", "ERROR"):
            self.assertEqual(a.register_memory(Odd()), "registered")
        a.kvaudit_close()
        self.assertEqual(read_log(os.path.join(self.tmp.name, "odd-0.jsonl.partial"))[0]["agent"], "odd-0")


class TestStreaming(unittest.TestCase):
    def test_a_million_descriptors_with_bounded_memory(self):
        """A dlist of a million descriptors (an Nx3 array) is written row by
        row: the recorder's peak resident growth stays far below the ~26 MB
        of JSON it writes (and below the 24 MB array itself)."""
        script = r"""
import sys, os, resource, time, numpy as np
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import nixl_standin as ns
from kvaudit_export import nixl_log
class Agent(ns.nixl_agent):  # prepares nothing: only the recorder's memory is measured
    def prep_xfer_dlist(self, agent_name, xfer_list, mem_type=None, backends=[]):
        return ns.Handle("dlist", None)
nixl_log.install(sys.argv[3])
a = nixl_log.recording_class(Agent)("big")
n = 1_000_000
rows = np.empty((n, 3), dtype=np.uint64)
rows[:, 0] = 0x7f0000000000 + np.arange(n, dtype=np.uint64) * 4096
rows[:, 1] = 4096
rows[:, 2] = 0
a.prep_xfer_dlist("NIXL_INIT_AGENT", rows[:10], "VRAM")  # warm up
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t = time.perf_counter()
a.prep_xfer_dlist("NIXL_INIT_AGENT", rows, "VRAM")
took = time.perf_counter() - t
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
a.kvaudit_close()
print(growth, os.path.getsize(os.path.join(sys.argv[3], "big.jsonl")), took)
"""
        with tempfile.TemporaryDirectory(prefix="kvaudit-nixl-") as tmp:
            p = subprocess.run([sys.executable, "-c", script, os.path.dirname(HERE), HERE, tmp],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            growth, size, took = p.stdout.split()
            growth, size = int(growth), int(size)
            with open(os.path.join(tmp, "big.jsonl")) as f:
                f.readline()
                f.readline()
                rec = json.loads(f.readline())
        self.assertEqual(len(rec["descs"]), 1_000_000)
        self.assertEqual(rec["descs"][999_999], [hex(0x7f0000000000 + 999_999 * 4096), 4096, 0])
        print(f"\n  nixl log: 1e6 descriptors, {size >> 20} MiB of JSON in {float(took):.1f} s, "
              f"recorder's resident growth {growth >> 20} MiB", file=sys.stderr)
        self.assertGreater(size, 24 << 20)
        self.assertLess(growth, size // 3)


class TestInstall(unittest.TestCase):
    """install() patches vLLM's NixlWrapper where its NIXL connector modules
    import it, and nixl._api.nixl_agent for later imports; register() (the
    vllm.general_plugins entry point) does it when the environment names a
    log directory. Fake modules stand for vLLM and NIXL."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kvaudit-nixl-")
        self.saved = {k: sys.modules.get(k) for k in ("nixl", "nixl._api", "vllm", "vllm.distributed.nixl_utils")}
        sys.modules["nixl"] = types.ModuleType("nixl")
        sys.modules["nixl._api"] = api = types.ModuleType("nixl._api")
        api.nixl_agent = ns.nixl_agent
        sys.modules["vllm"] = types.ModuleType("vllm")
        sys.modules["vllm.distributed.nixl_utils"] = conn = types.ModuleType("vllm.distributed.nixl_utils")
        conn.NixlWrapper = ns.nixl_agent
        self.conn, self.api = conn, api

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        os.environ.pop(nixl_log.ENV_LOG_DIR, None)
        self.tmp.cleanup()

    def test_install_patches_vllm_and_nixl(self):
        patched = nixl_log.install(self.tmp.name)
        self.assertIn("vllm.distributed.nixl_utils", patched)
        self.assertIn("nixl._api", patched)
        w = self.conn.NixlWrapper("worker-agent")
        self.assertTrue(issubclass(self.api.nixl_agent, ns.nixl_agent))
        w.register_memory([(0x100, 64, 0, "")], "VRAM")
        w.kvaudit_close()
        self.assertIn("worker-agent", nixl_log.agent_names())
        log = read_log(os.path.join(self.tmp.name, "worker-agent.jsonl"))
        self.assertEqual(log[1]["op"], "register")
        self.assertIs(nixl_log.install(self.tmp.name) and self.conn.NixlWrapper, type(w))  # once, not twice

    def test_plugin_entry_point(self):
        nixl_log.register()
        self.assertIs(self.conn.NixlWrapper, ns.nixl_agent)  # no directory: nothing patched
        os.environ[nixl_log.ENV_LOG_DIR] = self.tmp.name
        nixl_log.register()
        self.assertTrue(getattr(self.conn.NixlWrapper, "_kvaudit_recording", False))


if __name__ == "__main__":
    unittest.main()
