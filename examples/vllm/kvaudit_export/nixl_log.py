"""A recording NIXL agent: every call that registers memory, prepares
descriptors or makes, posts or checks a transfer, written as one line of a
``kvaudit-nixl-log/1`` JSON Lines log, in call order, so that kvaudit can
resolve each transfer's descriptors to the cells of the dumps.

Written against ai-dynamo/nixl's ``src/api/python/_api.py`` at commit
ca3221eb3513 (``nixl_agent``: ``register_memory``, ``get_reg_descs``,
``get_xfer_descs``, ``prep_xfer_dlist``, ``make_prepped_xfer``,
``initialize_xfer``, ``transfer``, ``check_xfer_state``,
``add_remote_agent``, ``release_xfer_handle``, ``release_dlist_handle``),
whose argument forms it reads: descriptor lists as lists of (address,
length, device[, meta]) tuples with a memory type, Nx3 NumPy arrays, a
torch tensor, a list of torch tensors, or the ``nixlXferDList`` /
``nixlRegDList`` that ``get_xfer_descs`` / ``get_reg_descs`` return;
indices as lists or NumPy arrays; handles as the opaque objects (or ints, in
older releases) the agent returns. Each method's arguments are bound with
the wrapped method's own signature, so releases that still take
``is_sorted`` work too.

The log (addresses are "0x" hex strings; H are the recorder's numbers of
prepared descriptor lists, N of transfers, both from 1 in call order):

    {"format": "kvaudit-nixl-log/1", "agent": NAME, "tp_rank": R, "pp_rank": S}
    {"op": "register", "mem": "VRAM", "descs": [[ADDR, LEN, DEV], ...]}
    {"op": "dlist", "handle": H, "agent": AGENT, "descs": [[ADDR, LEN, DEV], ...]}
    {"op": "xfer", "id": N, "kind": "READ", "local": H1, "local_ids": [...],
     "remote": H2, "remote_ids": [...], "notif": TEXT, "request": ID}
    {"op": "xfer", "id": N, "kind": "WRITE", "local_descs": [...],
     "remote_descs": [...], "remote_agent": NAME, "notif": TEXT, "request": ID}
    {"op": "state", "id": N, "state": "DONE"}

``AGENT`` is what ``prep_xfer_dlist`` was given: "" or "NIXL_INIT_AGENT"
for local descriptors, else the remote (or, for loopback, the local)
agent's name. An xfer record comes from ``make_prepped_xfer`` (handles and
indices) or ``initialize_xfer`` (descriptors and the remote agent).
``request``, the local request the transfer serves, is the one set with
``request_context`` on the calling thread, else the first ":"-separated
field of the notification (vLLM's notif is "request_id:tp_size"), else
absent. A state record is written once per transfer, when ``transfer`` or
``check_xfer_state`` first returns DONE or ERR (PROC is not recorded).
``add_remote_agent`` adds no record (the format has none for it); its
name is kept in ``remote_agents``.

The log is streamed: each record is formatted and written as the call
happens, descriptor arrays row by row in chunks, so the recorder holds no
descriptor list of its own (only a map of live handles to their numbers).
It is written as NAME.jsonl.partial in the log directory and takes its name
NAME.jsonl when the agent's log is closed (``kvaudit_close()``, or at
exit); a log still named .partial is incomplete.

To record inside a vLLM worker without editing vLLM, ``install(log_dir)``
replaces ``nixl._api.nixl_agent`` (for modules that import it later) and
the ``NixlWrapper`` name of every vLLM module already imported (vLLM's NIXL
connector modules import the agent class under that name) by a recording
subclass. The capture connector (``kvaudit_export.connector``) calls it when
its ``nixl_log`` option is on; the package's vLLM plugin entry point
(``vllm.general_plugins``: ``register``) calls it in every vLLM process when
``KVAUDIT_NIXL_LOG_DIR`` is set.
"""

import atexit
import contextlib
import errno
import inspect
import json
import logging
import os
import re
import sys
import threading
import time
import weakref

from . import user_request_id

logger = logging.getLogger("kvaudit_export.nixl_log")

FORMAT = "kvaudit-nixl-log/1"
ENV_LOG_DIR = "KVAUDIT_NIXL_LOG_DIR"

__all__ = ["FORMAT", "ENV_LOG_DIR", "recording_class", "install", "register", "request_context",
           "agent_names", "agent_for", "LogWriter"]

_CHUNK = 65536  # rows formatted at a time from an array
_KNOWN_MAX = 256  # descriptor lists remembered without weak references

_context = threading.local()
_agents = []  # (name, tp_rank, pp_rank) of the agents recorded in this process, in creation order
_lock = threading.Lock()


@contextlib.contextmanager
def request_context(request_id):
    """Within the block, transfers made on this thread serve request_id."""
    prev = getattr(_context, "request", None)
    _context.request = str(request_id)
    try:
        yield
    finally:
        _context.request = prev


def agent_names():
    """The names of the NIXL agents recorded in this process, oldest first
    (a vLLM worker has one: its rank's agent)."""
    with _lock:
        return [name for name, _, _ in _agents]


def agent_for(tp_rank, pp_rank):
    """The name of the newest agent recorded in this process for that rank
    (its log header's tp_rank and pp_rank), or None."""
    with _lock:
        for name, tp, pp in reversed(_agents):
            if (tp, pp) == (int(tp_rank), int(pp_rank)):
                return name
    return None


def _safe_name(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "agent"


def _hex(v):
    return f"0x{int(v):x}"


def _mem_name(mem_type, default="VRAM"):
    if mem_type is None:
        return default
    text = str(getattr(mem_type, "name", mem_type)).upper()
    for word, name in (("VRAM", "VRAM"), ("CUDA", "VRAM"), ("XPU", "VRAM"), ("DRAM", "DRAM"), ("CPU", "DRAM"),
                       ("FILE", "FILE"), ("BLK", "BLOCK"), ("BLOCK", "BLOCK"), ("OBJ", "OBJ")):
        if word in text:
            return name
    return text


def _is_torch(x):
    return hasattr(x, "data_ptr") and hasattr(x, "element_size") and hasattr(x, "numel")


def _tensor_mem(t):
    dev = t.get_device() if hasattr(t, "get_device") else -1
    return "DRAM" if dev is None or dev < 0 else "VRAM"


def _tensor_desc(t):
    dev = t.get_device() if hasattr(t, "get_device") else -1
    return (t.data_ptr(), t.numel() * t.element_size(), 0 if dev is None or dev < 0 else dev)


def _dlist_rows(d):
    """Rows of a nixlXferDList / nixlRegDList-like: len() or descCount(),
    then items as tuples or objects with addr, len and devId."""
    n = len(d) if hasattr(d, "__len__") else d.descCount()
    for i in range(n):
        item = d[i]
        if isinstance(item, (tuple, list)):
            yield item[0], item[1], item[2]
        else:
            yield (getattr(item, "addr"), getattr(item, "len"), getattr(item, "devId"))


def _readable(d):
    """Whether a descriptor list object can be read back row by row."""
    if not _is_dlist_like(d):
        return False
    try:
        for _ in zip(range(1), _dlist_rows(d)):
            pass
    except Exception:
        return False
    return True


def _dlist_agent(d):
    """The agent a prep_mem_view list is of: "" for a local list, the
    remote agent a nixlRemoteDList's rows name (addr, len, dev, agent)."""
    if "Remote" not in type(d).__name__:
        return ""
    try:
        n = len(d) if hasattr(d, "__len__") else d.descCount()
        if n:
            item = d[0]
            name = item[3] if isinstance(item, (tuple, list)) and len(item) > 3 else \
                getattr(item, "agent", None) or getattr(item, "remoteAgent", "")
            return _notif_text(name)
    except Exception:
        pass
    return ""


def _is_dlist_like(x):
    return not isinstance(x, (list, tuple)) and not _is_torch(x) and not hasattr(x, "ndim") and \
        (hasattr(x, "descCount") or (hasattr(x, "__getitem__") and hasattr(x, "__len__")))


class _Descs:
    """A descriptor argument in any form _api.py takes: its memory type and
    an iterator over (address, length, device) rows."""

    def __init__(self, descs, mem_type, known):
        self.descs, self.mem_type, self.known = descs, mem_type, known

    def mem(self):
        d = self.descs
        # As NIXL counts a tensor (_api.py _tensor_mem_type): VRAM on any
        # device (CUDA, XPU, ...), DRAM on the CPU.
        if _is_torch(d):
            return _tensor_mem(d)
        if isinstance(d, (list, tuple)) and d and _is_torch(d[0]):
            return _tensor_mem(d[0])
        if self.mem_type is None and id(d) in self.known:
            return self.known[id(d)][1]
        if self.mem_type is None and _is_dlist_like(d) and hasattr(d, "getType"):
            return _mem_name(d.getType())
        return _mem_name(self.mem_type)

    def rows(self):
        d = self.descs
        if _is_torch(d):
            yield _tensor_desc(d)
            return
        if hasattr(d, "ndim") and hasattr(d, "shape"):  # an Nx3 NumPy array
            for start in range(0, d.shape[0], _CHUNK):
                for r in d[start:start + _CHUNK].tolist():
                    yield r[0], r[1], r[2]
            return
        if isinstance(d, (list, tuple)):
            for item in d:
                yield _tensor_desc(item) if _is_torch(item) else (item[0], item[1], item[2])
            return
        if id(d) in self.known and self.known[id(d)][0] is not None:
            yield from _Descs(self.known[id(d)][0], self.mem_type, {}).rows()
            return
        if _is_dlist_like(d):
            yield from _dlist_rows(d)
            return
        raise TypeError(f"kvaudit nixl log: descriptors of a {type(d).__name__} cannot be read")


def _ids(x):
    """An index argument (list or NumPy array) as Python ints, chunked."""
    if hasattr(x, "ndim"):
        for start in range(0, len(x), _CHUNK):
            yield from x[start:start + _CHUNK].tolist()
        return
    for v in x:
        yield int(v)


def _notif_text(msg):
    if isinstance(msg, (bytes, bytearray, memoryview)):
        return bytes(msg).decode("utf-8", errors="backslashreplace")
    return "" if msg is None else str(msg)


class Stream:
    """An array value written as it is iterated (items are texts of one
    or more comma-separated JSON values)."""

    def __init__(self, items):
        self.items = items


# The writer's file calls (tests make them fail as a full disk does).
_os_open, _os_write, _os_ftruncate, _os_close = os.open, os.write, os.ftruncate, os.close
_BUF = 1 << 20  # bytes formatted before a write


class LogWriter:
    """Writes one agent's log: the header first, then one record a line,
    streamed; thread-safe. The file is path + ".partial" until close().

    Every record ends with the times it was written (``t_mono_ns``,
    ``t_wall_ns``; taken under the lock, so non-decreasing in the file).
    Writing never raises: a record that cannot be written (a full disk, a
    permission error, descriptors that cannot be read) is cut off the file,
    the log stops there (``failed`` says why) and keeps its .partial name,
    an incomplete log; it is logged once."""

    def __init__(self, path, agent, tp_rank, pp_rank, header=()):
        self.path, self._tmp = path, path + ".partial"
        self._fd = _os_open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._pos = 0
        self._lock = threading.Lock()
        self.closed = False
        self.failed = None
        self.record([("format", FORMAT), ("agent", agent), ("tp_rank", int(tp_rank)), ("pp_rank", int(pp_rank))]
                    + list(header))

    def _emit(self, data):
        view = memoryview(data)
        while view:
            n = _os_write(self._fd, view)
            if not n:
                raise OSError(errno.EIO, "a write of 0 bytes")
            self._pos += n
            view = view[n:]

    def record(self, parts):
        """Writes one record: parts are (key, value) pairs in order, a value
        being JSON data or a Stream of JSON texts written as an array as it
        is iterated. Returns whether it was written."""
        with self._lock:
            if self.closed or self.failed is not None:
                return False
            start = self._pos
            buf, size = [], 0

            def put(text):
                nonlocal size
                buf.append(text)
                size += len(text)
                if size >= _BUF:
                    flush()

            def flush():
                nonlocal size
                data = "".join(buf).encode("utf-8")
                buf.clear()
                size = 0
                self._emit(data)

            try:
                sep = "{"
                for key, value in parts:
                    put(sep + json.dumps(key) + ":")
                    sep = ","
                    if isinstance(value, Stream):
                        put("[")
                        first = True
                        for item in value.items:
                            if not first:
                                put(",")
                            put(item)
                            first = False
                        put("]")
                    else:
                        put(json.dumps(value, separators=(",", ":")))
                put(f',"t_mono_ns":{time.monotonic_ns()},"t_wall_ns":{time.time_ns()}}}\n')
                flush()
                return True
            except Exception as e:  # never into the NIXL call
                self.failed = e
                try:
                    _os_ftruncate(self._fd, start)  # no half record
                    self._pos = start
                except OSError:
                    pass
                _warn_once(f"kvaudit nixl log {self._tmp}: recording stopped, the log is incomplete "
                           f"(left as .partial): {e}")
                return False

    def close(self):
        with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                _os_close(self._fd)
            except OSError:
                pass
            if self.failed is not None or not os.path.exists(self._tmp):
                return  # incomplete: it keeps its .partial name (or its directory is gone)
            try:
                os.link(self._tmp, self.path)
                os.unlink(self._tmp)
            except FileExistsError:
                pass  # never overwrite: the .partial keeps this log
            except OSError:
                try:
                    if not os.path.exists(self.path):
                        os.replace(self._tmp, self.path)
                except OSError:
                    pass


class _NoLog:
    """The log of an agent whose log could not be created: records nothing."""
    failed = None
    closed = True

    def record(self, parts):
        return False

    def close(self):
        pass


_warned = set()


def _warn_once(msg):
    key = msg.split(":", 1)[0]
    if key not in _warned:
        _warned.add(key)
        logger.error(msg)


def _open_log(log_dir, agent, tp, pp, header=()):
    """A new log for agent in log_dir: AGENT.jsonl, or AGENT.2.jsonl ...
    when that name is taken (logs are never overwritten)."""
    base = os.path.join(log_dir, _safe_name(agent))
    for i in range(1, 1000):
        path = base + (".jsonl" if i == 1 else f".{i}.jsonl")
        if os.path.exists(path) or os.path.exists(path + ".partial"):
            continue
        try:
            return LogWriter(path, agent, tp, pp, header)
        except FileExistsError:
            continue
    raise FileExistsError(f"kvaudit nixl log: no free log name for agent {agent!r} in {log_dir!r}")


def _chunks(rows, fmt):
    """Texts of up to _CHUNK formatted rows each, joined with commas."""
    batch = []
    for r in rows:
        batch.append(fmt(r))
        if len(batch) == _CHUNK:
            yield ",".join(batch)
            batch = []
    if batch:
        yield ",".join(batch)


def _desc_texts(descs):
    return Stream(_chunks(descs.rows(), lambda r: f'["0x{int(r[0]):x}",{int(r[1])},{int(r[2])}]'))


def _id_texts(ids):
    return Stream(_chunks(_ids(ids), lambda v: str(int(v))))


def _ranks():
    """(tp_rank, pp_rank) of this process: vLLM's parallel state when it is
    set up, else KVAUDIT_TP_RANK / KVAUDIT_PP_RANK, else 0."""
    tp = os.environ.get("KVAUDIT_TP_RANK")
    pp = os.environ.get("KVAUDIT_PP_RANK")
    if tp is None or pp is None:
        try:
            from vllm.distributed import parallel_state as ps
            tp = ps.get_tensor_model_parallel_rank() if tp is None else tp
            pp = ps.get_pp_group().rank_in_group if pp is None else pp
        except Exception:  # no vLLM, or its groups are not set up
            pass
    return int(tp or 0), int(pp or 0)


_classes = {}
_settings = {"log_dir": None, "tp_rank": None, "pp_rank": None, "strip_suffix": True, "lease_s": None,
             "engine_id": None}


def recording_class(base):
    """A subclass of the NIXL agent class base whose instances record their
    calls (see the module docstring). Built once per base."""
    if getattr(base, "_kvaudit_recording", False):
        return base
    if base in _classes:
        return _classes[base]

    sigs = {}

    def bind(name, args, kwargs):
        sig = sigs.get(name)
        if sig is None:
            sig = sigs[name] = inspect.signature(getattr(base, name))
        b = sig.bind(None, *args, **kwargs)
        b.apply_defaults()
        return b.arguments

    class Recording(base):
        _kvaudit_recording = True

        def __init__(self, agent_name, *args, **kwargs):
            super().__init__(agent_name, *args, **kwargs)
            self._kv_dlists, self._kv_views, self._kv_xfers, self._kv_done, self._kv_known = {}, {}, {}, set(), {}
            self._kv_next = {"dlist": 1, "xfer": 1}
            self.remote_agents = []
            self._kv_log = _NoLog()
            tp, pp = _ranks()
            tp = _settings["tp_rank"] if _settings["tp_rank"] is not None else tp
            pp = _settings["pp_rank"] if _settings["pp_rank"] is not None else pp
            log_dir = _settings["log_dir"] or os.environ.get(ENV_LOG_DIR)
            try:  # the agent works whether or not its log can be written
                if not log_dir:
                    raise RuntimeError("no log directory (install(log_dir) or $" + ENV_LOG_DIR + ")")
                os.makedirs(log_dir, exist_ok=True)
                header = [(k, _settings[k]) for k in ("lease_s", "engine_id") if _settings.get(k) is not None]
                self._kv_log = _open_log(log_dir, str(agent_name), tp, pp, header)
                atexit.register(self._kv_log.close)
            except Exception as e:
                _warn_once(f"kvaudit nixl log of agent {agent_name!r}: not recorded: {e}")
            with _lock:
                _agents.append((str(agent_name), int(tp), int(pp)))

        def kvaudit_close(self):
            """Closes the log: it takes its final name (unless incomplete)."""
            self._kv_log.close()

        @staticmethod
        def _kv_key(handle):
            return handle if isinstance(handle, int) else id(handle)

        def _kv_number(self, kind, table, handle):
            n = self._kv_next[kind]
            self._kv_next[kind] = n + 1
            table[self._kv_key(handle)] = n
            return n

        def _kv_record(self, parts):
            """Writes a record; whatever goes wrong stays here."""
            try:
                if callable(parts):
                    parts = parts()
                self._kv_log.record(parts)
            except Exception as e:  # never into the NIXL call
                _warn_once(f"kvaudit nixl log of agent {self.name!r}: a record was lost: {e}")

        def _kv_call(self, call, fn, args, kwargs, xfer=None):
            """Calls the agent's method; if it raises, an error record (the
            transfer's number when there is one), and the exception goes on
            to the caller unchanged."""
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                def parts():
                    n = None
                    if xfer is not None:
                        try:
                            n = self._kv_xfers.get(self._kv_key(bind(call, args, kwargs)[xfer]))
                        except Exception:
                            n = None
                    return [("op", "error"), ("call", call), ("id", n), ("msg", f"{type(e).__name__}: {e}")]
                self._kv_record(parts)
                raise

        def _kv_remember(self, out, descs, mem_type):
            """Notes what a get_xfer_descs / get_reg_descs list holds: its
            memory type, and the caller's descriptors when the agent's own
            list cannot be read back (kept while the list lives)."""
            if out is None or out is descs:
                return
            mem = _Descs(descs, mem_type, self._kv_known).mem()
            self._kv_known[id(out)] = (None if _readable(out) else descs, mem)
            try:
                weakref.finalize(out, self._kv_known.pop, id(out), None)
            except TypeError:  # no weak references to it: keep the latest few
                while len(self._kv_known) > _KNOWN_MAX:
                    self._kv_known.pop(next(iter(self._kv_known)))

        def get_reg_descs(self, *args, **kwargs):
            out = super().get_reg_descs(*args, **kwargs)
            try:
                a = bind("get_reg_descs", args, kwargs)
                self._kv_remember(out, a["descs"], a.get("mem_type"))
            except Exception as e:
                _warn_once(f"kvaudit nixl log of agent {self.name!r}: a descriptor list was not noted: {e}")
            return out

        def get_xfer_descs(self, *args, **kwargs):
            out = super().get_xfer_descs(*args, **kwargs)
            try:
                a = bind("get_xfer_descs", args, kwargs)
                self._kv_remember(out, a["descs"], a.get("mem_type"))
            except Exception as e:
                _warn_once(f"kvaudit nixl log of agent {self.name!r}: a descriptor list was not noted: {e}")
            return out

        def _kv_descs(self, descs, mem_type):
            return _Descs(descs, mem_type, self._kv_known)

        def register_memory(self, *args, **kwargs):
            out = self._kv_call("register_memory", super().register_memory, args, kwargs)

            def parts():
                a = bind("register_memory", args, kwargs)
                d = self._kv_descs(a["reg_list"], a.get("mem_type"))
                return [("op", "register"), ("mem", d.mem()), ("descs", _desc_texts(d))]
            self._kv_record(parts)
            return out

        def deregister_memory(self, *args, **kwargs):
            out = self._kv_call("deregister_memory", super().deregister_memory, args, kwargs)

            def parts():
                a = bind("deregister_memory", args, kwargs)
                d = self._kv_descs(a["dereg_list"], None)
                return [("op", "deregister"), ("mem", d.mem()), ("descs", _desc_texts(d))]
            self._kv_record(parts)
            return out

        def prep_xfer_dlist(self, *args, **kwargs):
            handle = self._kv_call("prep_xfer_dlist", super().prep_xfer_dlist, args, kwargs)

            def parts():
                a = bind("prep_xfer_dlist", args, kwargs)
                d = self._kv_descs(a["xfer_list"], a.get("mem_type"))
                h = self._kv_number("dlist", self._kv_dlists, handle)
                return [("op", "dlist"), ("handle", h), ("agent", str(a["agent_name"])), ("descs", _desc_texts(d))]
            self._kv_record(parts)
            return handle

        def prep_mem_view(self, *args, **kwargs):
            handle = self._kv_call("prep_mem_view", super().prep_mem_view, args, kwargs)

            def parts():
                a = bind("prep_mem_view", args, kwargs)
                dlist = a["dlist"]
                d = self._kv_descs(dlist, None)
                h = self._kv_number("dlist", self._kv_views, handle)
                return [("op", "mem_view"), ("handle", h), ("agent", _dlist_agent(dlist)), ("descs", _desc_texts(d))]
            self._kv_record(parts)
            return handle

        def make_prepped_xfer(self, *args, **kwargs):
            handle = self._kv_call("make_prepped_xfer", super().make_prepped_xfer, args, kwargs)

            def parts():
                a = bind("make_prepped_xfer", args, kwargs)
                n = self._kv_number("xfer", self._kv_xfers, handle)
                notif = _notif_text(a.get("notif_msg"))
                return [("op", "xfer"), ("id", n), ("kind", str(a["operation"])),
                        ("local", self._kv_dlists.get(self._kv_key(a["local_xfer_side"]))),
                        ("local_ids", _id_texts(a["local_indices"])),
                        ("remote", self._kv_dlists.get(self._kv_key(a["remote_xfer_side"]))),
                        ("remote_ids", _id_texts(a["remote_indices"])), ("notif", notif)] + self._kv_request(notif)
            self._kv_record(parts)
            return handle

        def initialize_xfer(self, *args, **kwargs):
            handle = self._kv_call("initialize_xfer", super().initialize_xfer, args, kwargs)

            def parts():
                a = bind("initialize_xfer", args, kwargs)
                n = self._kv_number("xfer", self._kv_xfers, handle)
                notif = _notif_text(a.get("notif_msg"))
                return [("op", "xfer"), ("id", n), ("kind", str(a["operation"])),
                        ("local_descs", _desc_texts(self._kv_descs(a["local_descs"], None))),
                        ("remote_descs", _desc_texts(self._kv_descs(a["remote_descs"], None))),
                        ("remote_agent", str(a["remote_agent"])), ("notif", notif)] + self._kv_request(notif)
            self._kv_record(parts)
            return handle

        def _kv_request(self, notif):
            """[("request", ID)]: the calling thread's request_context, else
            the notif's first ":"-separated field; [] when neither."""
            req = getattr(_context, "request", None)
            if req is None and notif:
                req = notif.split(":", 1)[0] or None
                if req is not None and _settings["strip_suffix"]:
                    req = user_request_id(req)  # the id the dumps name it by
            return [] if req is None else [("request", req)]

        def _kv_state(self, handle, state):
            if state not in ("DONE", "ERR"):
                return
            n = self._kv_xfers.get(self._kv_key(handle))
            if n is None or n in self._kv_done:
                return
            self._kv_done.add(n)
            self._kv_record([("op", "state"), ("id", n), ("state", state)])

        def transfer(self, *args, **kwargs):
            state = self._kv_call("transfer", super().transfer, args, kwargs, xfer="handle")

            def post():
                a = bind("transfer", args, kwargs)
                n = self._kv_xfers.get(self._kv_key(a["handle"]))
                self._kv_record([("op", "post"), ("id", n), ("notif", _notif_text(a.get("notif_msg")))])
                self._kv_state(a["handle"], state)
            self._kv_record_call(post)
            return state

        def check_xfer_state(self, *args, **kwargs):
            state = self._kv_call("check_xfer_state", super().check_xfer_state, args, kwargs, xfer="handle")
            self._kv_record_call(lambda: self._kv_state(bind("check_xfer_state", args, kwargs)["handle"], state))
            return state

        def _kv_record_call(self, fn):
            try:
                fn()
            except Exception as e:  # never into the NIXL call
                _warn_once(f"kvaudit nixl log of agent {self.name!r}: a record was lost: {e}")

        def release_xfer_handle(self, *args, **kwargs):
            out = self._kv_call("release_xfer_handle", super().release_xfer_handle, args, kwargs, xfer="handle")

            def forget():
                handle = bind("release_xfer_handle", args, kwargs)["handle"]
                n = self._kv_xfers.pop(self._kv_key(handle), None)
                self._kv_done.discard(n)
            self._kv_record_call(forget)
            return out

        def release_dlist_handle(self, *args, **kwargs):
            out = self._kv_call("release_dlist_handle", super().release_dlist_handle, args, kwargs)
            self._kv_record_call(lambda: self._kv_dlists.pop(
                self._kv_key(bind("release_dlist_handle", args, kwargs)["handle"]), None))
            return out

        def add_remote_agent(self, *args, **kwargs):
            name = self._kv_call("add_remote_agent", super().add_remote_agent, args, kwargs)
            self.remote_agents.append(name if isinstance(name, str) else _notif_text(name))
            return name

        def remove_remote_agent(self, *args, **kwargs):
            out = self._kv_call("remove_remote_agent", super().remove_remote_agent, args, kwargs)
            self._kv_record(lambda: [("op", "remove_agent"),
                                     ("agent", _notif_text(bind("remove_remote_agent", args, kwargs)["agent"]))])
            return out

        def send_notif(self, *args, **kwargs):
            out = self._kv_call("send_notif", super().send_notif, args, kwargs)

            def parts():
                a = bind("send_notif", args, kwargs)
                return [("op", "notif"), ("agent", _notif_text(a["remote_agent_name"])),
                        ("msg", _notif_text(a["notif_msg"]))]
            self._kv_record(parts)
            return out

        def get_new_notifs(self, *args, **kwargs):
            out = self._kv_call("get_new_notifs", super().get_new_notifs, args, kwargs)

            def parts():
                rows = [[_notif_text(agent), _notif_text(m)] for agent, msgs in (out or {}).items() for m in msgs]
                return [("op", "notifs"), ("notifs", rows)] if rows else None
            self._kv_record_call(lambda: (lambda p: p and self._kv_record(p))(parts()))
            return out

        def check_remote_xfer_done(self, *args, **kwargs):
            done = self._kv_call("check_remote_xfer_done", super().check_remote_xfer_done, args, kwargs)
            if done:
                def parts():
                    a = bind("check_remote_xfer_done", args, kwargs)
                    return [("op", "remote_done"), ("agent", _notif_text(a["remote_agent_name"])),
                            ("msg", _notif_text(a["lookup_tag"]))]
                self._kv_record(parts)
            return done

    Recording.__name__ = Recording.__qualname__ = "Recording" + base.__name__
    _classes[base] = Recording
    return Recording


def install(log_dir, *, tp_rank=None, pp_rank=None, strip_request_suffix=True, lease_s=None, engine_id=None):
    """Makes every NIXL agent this process creates from now on record its
    calls into log_dir: replaces nixl._api.nixl_agent (and rixl's) for
    modules that import it later, and the NixlWrapper name of every loaded
    vllm module (vLLM's NIXL connector modules import the class under that
    name). Returns the names of the modules patched. tp_rank and pp_rank
    override the ranks read from vLLM's parallel state."""
    if lease_s is not None and (isinstance(lease_s, bool) or not isinstance(lease_s, int) or lease_s < 0):
        raise ValueError(f"lease_s {lease_s!r}: a non-negative whole number of seconds")
    _settings.update(log_dir=str(log_dir), tp_rank=tp_rank, pp_rank=pp_rank, strip_suffix=bool(strip_request_suffix),
                     lease_s=lease_s, engine_id=None if engine_id is None else str(engine_id))
    patched = []
    for modname in ("nixl._api", "rixl._api"):
        mod = sys.modules.get(modname)
        if mod is None:
            try:
                mod = __import__(modname, fromlist=["nixl_agent"])
            except Exception:  # no NIXL in this environment
                continue
        agent = getattr(mod, "nixl_agent", None)
        if isinstance(agent, type):
            mod.nixl_agent = recording_class(agent)
            patched.append(modname)
    for modname, mod in list(sys.modules.items()):
        if not (modname == "vllm" or modname.startswith("vllm.")) or mod is None:
            continue
        cls = getattr(mod, "NixlWrapper", None)
        if isinstance(cls, type):
            setattr(mod, "NixlWrapper", recording_class(cls))
            patched.append(modname)
    return patched


def register():
    """vLLM general plugin entry point: installs the recorder in this
    process when $KVAUDIT_NIXL_LOG_DIR names a log directory."""
    log_dir = os.environ.get(ENV_LOG_DIR)
    if log_dir:
        install(log_dir)
