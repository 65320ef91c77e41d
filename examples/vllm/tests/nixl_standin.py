"""A stand-in for NIXL's Python agent: there is no NIXL here.

nixl_agent has the methods and signatures of ai-dynamo/nixl's
src/api/python/_api.py at commit ca3221eb3513 and takes the argument forms
they take (descriptor lists of tuples with a memory type, Nx3 NumPy arrays,
a torch tensor, a list of torch tensors, the lists get_xfer_descs and
get_reg_descs return; indices as lists or NumPy arrays; opaque handle
objects). It moves bytes for real, within this process: a READ copies each
remote descriptor's bytes to its local one (a WRITE the reverse) with
ctypes.memmove, so a consumer's "transfer" from a producer's CPU tensors in
the same test puts the producer's KV into the consumer's cache at the
addresses the descriptors name. Remote agents are found by name in a
process-wide table (add_remote_agent takes the name as its metadata).
"""

import ctypes

import numpy as np

NIXL_INIT_AGENT = "NIXL_INIT_AGENT"
_AGENTS = {}


class XferDList:
    """Like nixlBind.nixlXferDList: rows (addr, len, dev), readable back."""

    def __init__(self, mem, rows):
        self.mem, self.rows = mem, [tuple(int(v) for v in r) for r in rows]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def getType(self):
        return {"VRAM": "VRAM_SEG", "cuda": "VRAM_SEG", "DRAM": "DRAM_SEG", "cpu": "DRAM_SEG"}[self.mem]


class RegDList(XferDList):
    pass


class RemoteDList(XferDList):
    """Like nixlBind.nixlRemoteDList: rows (addr, len, dev, agent)."""

    def __init__(self, mem, rows):
        self.mem, self.rows = mem, [(int(a), int(n), int(d), str(g)) for a, n, d, g in rows]


class OpaqueXferDList:
    """A descriptor list that cannot be read back (no __getitem__): the
    recorder must use what get_xfer_descs was given."""

    def __init__(self, mem, rows):
        self._rows = [tuple(int(v) for v in r) for r in rows]
        self.mem = mem


class Handle:
    """Like nixl_prepped_dlist_handle / nixl_xfer_handle: opaque objects."""

    def __init__(self, kind, value):
        self.kind, self.value = kind, value


def _rows(d):
    return d._rows if isinstance(d, OpaqueXferDList) else d.rows


class nixl_agent:
    opaque_xfer_descs = False  # get_xfer_descs returns lists that cannot be read back

    def __init__(self, agent_name, nixl_conf=None, instantiate_all=False):
        self.name = agent_name
        self.registered = []
        self.remote = {}
        self.fail_next = False
        self.raise_next = None  # a method name: its next call raises (as a NIXL call failing does)
        self.inbox = []  # (sender agent, message bytes): notifications not yet read
        _AGENTS[agent_name] = self

    def _maybe_raise(self, name):
        if self.raise_next == name:
            self.raise_next = None
            raise RuntimeError(f"nixlBackendError: {name} failed")

    def _deliver(self, agent, msg):
        if msg:
            _AGENTS[agent].inbox.append((self.name, msg if isinstance(msg, bytes) else str(msg).encode()))

    def _descs(self, descs, mem_type, width):
        if isinstance(descs, (XferDList, OpaqueXferDList)):
            return descs
        if hasattr(descs, "data_ptr") and hasattr(descs, "numel"):
            # As _api.py's _tensor_mem_type: DRAM on the CPU (get_device() -1), else VRAM (CUDA, XPU, ...).
            return [(descs.data_ptr(), descs.numel() * descs.element_size(), 0)], \
                "DRAM" if descs.get_device() == -1 else "VRAM"
        if isinstance(descs, np.ndarray):
            assert mem_type is not None and descs.ndim == 2 and descs.shape[1] == 3, "Nx3 array and a mem type"
            return [tuple(r) for r in descs.tolist()], mem_type
        if hasattr(descs[0], "data_ptr"):
            return [(t.data_ptr(), t.numel() * t.element_size(), 0) for t in descs], "cpu"
        assert mem_type is not None and len(descs[0]) == width, f"{width}-tuples and a mem type"
        return [tuple(r[:3]) for r in descs], mem_type

    def get_reg_descs(self, descs, mem_type=None):
        if isinstance(descs, RegDList):
            return descs
        rows, mem = self._descs(descs, mem_type, 4)
        return RegDList(mem, rows)

    def get_xfer_descs(self, descs, mem_type=None):
        if isinstance(descs, (XferDList, OpaqueXferDList)):
            return descs
        rows, mem = self._descs(descs, mem_type, 3)
        return (OpaqueXferDList if self.opaque_xfer_descs else XferDList)(mem, rows)

    def register_memory(self, reg_list, mem_type=None, backends=[]):
        d = self.get_reg_descs(reg_list, mem_type)
        self.registered.append(d)
        return d

    def deregister_memory(self, dereg_list, backends=[]):
        self.registered.remove(dereg_list)

    def add_remote_agent(self, metadata):
        name = metadata.decode() if isinstance(metadata, bytes) else metadata
        self.remote[name] = _AGENTS[name]
        return name

    def get_agent_metadata(self):
        return self.name.encode()

    def remove_remote_agent(self, agent):
        self._maybe_raise("remove_remote_agent")
        del self.remote[agent]

    def prep_xfer_dlist(self, agent_name, xfer_list, mem_type=None, backends=[]):
        self._maybe_raise("prep_xfer_dlist")
        d = self.get_xfer_descs(xfer_list, mem_type)
        return Handle("dlist", (agent_name, _rows(d)))

    def get_remote_descs(self, descs, mem_type=None):
        """nixlRemoteDList from (addr, len, dev, agent) 4-tuples."""
        if isinstance(descs, RemoteDList):
            return descs
        assert mem_type is not None and len(descs[0]) == 4, "4-tuples and a mem type"
        return RemoteDList(mem_type, descs)

    def prep_mem_view(self, dlist, *, backends=None):
        """A raw memory-view handle (an int) for a local or remote list."""
        self._maybe_raise("prep_mem_view")
        self._views = getattr(self, "_views", 0) + 1
        return 0x5000 + self._views

    def release_mem_view(self, mvh):
        pass

    def make_prepped_xfer(self, operation, local_xfer_side, local_indices, remote_xfer_side, remote_indices,
                          notif_msg=b"", backends=[], skip_desc_merge=False):
        self._maybe_raise("make_prepped_xfer")
        local = [local_xfer_side.value[1][int(i)] for i in local_indices]
        remote = [remote_xfer_side.value[1][int(i)] for i in remote_indices]
        assert len(local) == len(remote), "local and remote descriptor counts differ"
        agent = remote_xfer_side.value[0]
        return Handle("xfer", (operation, local, remote, notif_msg, agent))

    def initialize_xfer(self, operation, local_descs, remote_descs, remote_agent, notif_msg=b"", backends=[]):
        assert remote_agent in self.remote or remote_agent == self.name, f"unknown agent {remote_agent!r}"
        return Handle("xfer", (operation, _rows(local_descs), _rows(remote_descs), notif_msg, remote_agent))

    def transfer(self, handle, notif_msg=b""):
        self._maybe_raise("transfer")
        if self.fail_next:
            self.fail_next = False
            return "ERR"
        op, local, remote, notif, agent = handle.value
        for (la, ln, _), (ra, rn, _) in zip(local, remote):
            assert ln == rn, f"descriptor lengths {ln} and {rn} differ"
            if op == "READ":
                ctypes.memmove(la, ra, ln)
            else:
                ctypes.memmove(ra, la, ln)
        if agent in _AGENTS:
            self._deliver(agent, notif_msg or notif)  # the remote learns the transfer is done
        return "DONE"

    def check_xfer_state(self, handle):
        self._maybe_raise("check_xfer_state")
        return "DONE"

    def send_notif(self, remote_agent_name, notif_msg, backend=None):
        self._maybe_raise("send_notif")
        self._deliver(remote_agent_name, notif_msg)

    def get_new_notifs(self, backends=[]):
        self._maybe_raise("get_new_notifs")
        out = {}
        for sender, msg in self.inbox:
            out.setdefault(sender, []).append(msg)
        self.inbox = []
        return out

    def check_remote_xfer_done(self, remote_agent_name, lookup_tag, backends=[], tag_is_prefix=True):
        for i, (sender, msg) in enumerate(self.inbox):
            if sender == remote_agent_name and (msg.startswith(lookup_tag) if tag_is_prefix else lookup_tag in msg):
                del self.inbox[i]
                return True
        return False

    def release_xfer_handle(self, handle):
        pass

    def release_dlist_handle(self, handle):
        pass


class nixl_agent_with_is_sorted(nixl_agent):
    """An older _api.py (commit 0169231f144f): prep_xfer_dlist and
    register_memory also take is_sorted, positionally before backends."""

    def register_memory(self, reg_list, mem_type=None, is_sorted=False, backends=[]):
        return super().register_memory(reg_list, mem_type, backends)

    def prep_xfer_dlist(self, agent_name, xfer_list, mem_type=None, is_sorted=False, backends=[]):
        return super().prep_xfer_dlist(agent_name, xfer_list, mem_type, backends)
