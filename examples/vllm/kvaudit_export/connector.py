"""KvauditConnector: a vLLM KV connector that writes kvaudit dumps.

Load it by module path, alone or inside MultiConnector beside NixlConnector;
it moves no KV itself:

    --kv-transfer-config '{"kv_connector": "MultiConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "KvauditConnector", "kv_role": "kv_both",
         "kv_connector_module_path": "kvaudit_export.connector",
         "kv_connector_extra_config": {"dump_dir": "/data/kvaudit", "requests": 0.01,
                                       "max_bytes": "50GiB", "nixl_log": true}},
        {"kv_connector": "NixlConnector", "kv_role": "kv_both"}]}}'

(listed first, so that its worker installs the NIXL recorder before the
NIXL connector creates its agent; MultiConnector loads from the first child
that has matched tokens, which this one never has)

- On the producer (a request sent with ``do_remote_decode``, or any
  request of a ``kv_producer`` engine), when the request finishes it holds
  the request's blocks, as ``request_finished`` returning True does (so the
  scheduler frees them only when every worker reports the request in
  ``finished_sending``), and its workers dump them in the next step, before
  that step's forward, then report it.
- On the consumer (a request that came with ``do_remote_prefill``; vLLM's
  NIXL connector sets it to False once it has allocated the load, so the
  connector remembers the request from its first call), when the
  aggregated connector output reports the request's load finished
  (``finished_recving``), its workers dump the request's blocks in the step
  that schedules it, before the forward that lets decode write the tail
  block. Inside MultiConnector this connector gets empty blocks from
  ``update_state_after_alloc`` (only the loading child gets the real ones),
  so the blocks come from that step's ``scheduled_new_reqs``. A consumer's
  request is dumped once, as consumer, whatever ``kv_role`` says
  (``kv_both`` included): no producer dump of it, its blocks never held.

Each dump is one rank's kvaudit dump, ``DUMP_DIR/SIDE/REQ/rank-PP-TP.safetensors``
(SIDE is producer or consumer; REQ is the producer's request id as the user
gave it on both sides, so that ``kvaudit diff DUMP_DIR/producer/REQ
DUMP_DIR/consumer/REQ`` compares them), and beside it the scheduler writes
the request's ``kv_transfer_params`` (``kv_transfer_params.json``: on the
consumer, what it received, with ``kv_checksums`` when the producer sent
them). vLLM appends ``-`` and 8 random hex digits to every request id (PR
#27987); the connector strips them: a ``requests`` list of the ids a user
knows matches, dumps and manifests name requests by them, and the manifest
keeps vLLM's id as ``engine_request_id``. An id that is no plain file name
(``.``, ``..``, ``a/b``, ...) becomes its plain characters and a hash: no
id names a path outside DUMP_DIR/SIDE. With ``nixl_log`` on, every worker
records its NIXL agent's calls in ``DUMP_DIR/nixl/AGENT.jsonl``
(``kvaudit_export.nixl_log``) and each dump names its agent
(``parallel.agent``).

Once the engine serves, no method raises into vLLM: a full disk (ENOSPC,
EFBIG, EDQUOT) stops all capture of that process, a permission error or
any exporter exception stops the capture of its request; each kind is
logged once and counted (``errors``, ``stopped``), a producer's blocks are
still reported and freed. A configuration it cannot use is refused when
the connector is built, before the engine serves.

kv_connector_extra_config:

- ``dump_dir``: where (default ``/tmp/kvaudit``);
- ``requests``: which requests: ``"all"`` (default), a fraction in (0, 1]
  (sampled by a hash of the producer's user id, so both sides pick the
  same requests), or a list of request ids (the producer's or the
  consumer's, as the user knows them or as vLLM has them);
- ``max_bytes``: a disk budget for all dumps of this engine (bytes, or a
  string such as "50GiB"); a request whose estimated dump would exceed it
  is not captured;
- ``nixl_log``: record NIXL descriptors (default false); ``lease_s``: the
  producer's lease to write in the logs' header (the NIXL connector's
  ``kv_lease_duration``, 30 s by default at vLLM 9aaf83ef5);
- ``request_id_suffix``: ``"strip"`` (default) or ``"keep"`` (with
  VLLM_DISABLE_REQUEST_ID_RANDOMIZATION, or ids that end like a suffix);
- ``role``: "producer" or "consumer" to force a side; ``state_splits``,
  ``covered_states``, ``kernel_block_sizes``: as kvaudit_export takes them;
  ``tp_rank``, ``pp_rank``: override the ranks vLLM's parallel state gives.

Written against vLLM's KVConnectorBase_V1 and MultiConnector as read at
upstream commit 9aaf83ef5 (vllm/distributed/kv_transfer/kv_connector/v1/
base.py, multi_connector.py, nixl/scheduler.py, v1/core/sched/scheduler.py,
the consistent tree of the fork local-inference-lab/vllm) and earlier at
003df2961dd8 (base.py, with ``register_cross_layers_kv_cache``) and
00f4240ee645 (multi_connector.py): scheduler side
``get_num_new_matched_tokens``, ``update_state_after_alloc``,
``build_connector_meta``, ``update_connector_output``, ``request_finished``
and ``request_finished_all_groups`` (SupportsHMA, which MultiConnector
needs of every child for hybrid models); worker side
``register_kv_caches`` (the only registration on current vLLM),
``register_cross_layers_kv_cache`` (older vLLM), ``bind_connector_metadata``,
``start_load_kv``, ``wait_for_layer_load``, ``save_kv_layer``,
``wait_for_save``, ``get_finished``. Without vLLM
installed the module still imports (its own stand-in base classes), which
is how its tests run: there is no vLLM here.
"""

import dataclasses
import enum
import errno
import hashlib
import json
import logging
import math
import os
import re

from . import ST_DTYPES, ExportError, _dtype_name, cross_layer_caches, export_dump, nixl_log, user_request_id

logger = logging.getLogger("kvaudit_export.connector")

try:  # vLLM's own base classes when vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole, SupportsHMA)
    HAVE_VLLM = True
except Exception:  # no vLLM: stand-ins with the same names and behaviour
    HAVE_VLLM = False

    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:
        pass

    class SupportsHMA:
        pass

    class KVConnectorBase_V1:
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._connector_metadata = None
            self._vllm_config = vllm_config
            self._kv_transfer_config = vllm_config.kv_transfer_config
            self._kv_cache_config = kv_cache_config
            self._role = role

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def _get_connector_metadata(self):
            assert self._connector_metadata is not None
            return self._connector_metadata

        def has_connector_metadata(self):
            return self._connector_metadata is not None

__all__ = ["KvauditConnector", "KvauditConnectorMetadata", "Dump", "HAVE_VLLM", "parse_bytes"]

PRODUCER, CONSUMER = "producer", "consumer"


@dataclasses.dataclass
class Dump:
    """One request to dump on every worker: vLLM's id of it (req_id, what
    get_finished reports), its blocks per KV cache group (the worker's
    ids), tokens, local prefix hit, and where. user_id is the id the user
    knows (vLLM's internal id without its random suffix), the one the
    manifest names it by; producer_id the producer's, on a consumer."""
    req_id: str
    side: str
    directory: str
    block_ids: tuple
    num_tokens: int
    num_local_computed_tokens: int = 0
    producer_id: str | None = None
    user_id: str | None = None


@dataclasses.dataclass
class KvauditConnectorMetadata(KVConnectorMetadata):
    dumps: list = dataclasses.field(default_factory=list)


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40, "tb": 1000 ** 4, "tib": 1 << 40}


def parse_bytes(v):
    """A byte count from an int or a string such as "50GiB" or "2.5G"."""
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(v))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"max_bytes {v!r}: want a byte count such as 1073741824 or \"50GiB\"")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


_NAME_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _safe(name):
    """A directory name for a request id that names nothing outside its
    parent: the id itself when it is a plain name (letters, digits, ".",
    "_", "-", not starting with "." or "-", at most 128 characters), else
    its plain characters and a hash of the whole id (so that two ids never
    share a directory)."""
    name = str(name)
    if _NAME_OK.fullmatch(name):
        return name
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".-")[:64] or "request"
    return f"{plain}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def _write_json(path, obj):
    """Writes obj to path through a temporary name (never half a file)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "x") as f:
            json.dump(obj, f, indent=1, sort_keys=True, default=str)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _page_bytes(spec):
    """A spec's page size when it does not say (vLLM's specs do)."""
    try:
        padded = _get(spec, "page_size_padded", None)
        if padded:
            return int(padded)
        if _get(spec, "shapes", None) is not None:
            return sum(math.prod(s) * ST_DTYPES[_dtype_name(d)][1]
                       for s, d in zip(_get(spec, "shapes"), _get(spec, "dtypes")))
        kv = 1 if "MLA" in type(spec).__name__ else 2
        return (kv * int(_get(spec, "block_size")) * int(_get(spec, "num_kv_heads")) * int(_get(spec, "head_size")) *
                ST_DTYPES[_dtype_name(_get(spec, "dtype"))][1])
    except (TypeError, KeyError, ValueError):
        return 0


def _get(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


# What stops capture. A full disk stops all of it (every later dump would
# fail the same way); anything else stops the request it happened to.
DISK_FULL = "disk_full"
PERMISSION = "permission"
EXPORT = "export"
OTHER = "other"
_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
_PERMISSION_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}


def error_kind(exc):
    """DISK_FULL (ENOSPC, EFBIG, EDQUOT), PERMISSION (EACCES, EPERM,
    EROFS), EXPORT (the exporter refused the cache) or OTHER."""
    if isinstance(exc, ExportError):
        return EXPORT
    if isinstance(exc, OSError):
        if exc.errno in _DISK_FULL_ERRNOS:
            return DISK_FULL
        if exc.errno in _PERMISSION_ERRNOS or isinstance(exc, PermissionError):
            return PERMISSION
    return OTHER


class KvauditConnector(KVConnectorBase_V1, SupportsHMA):
    """Writes kvaudit dumps of selected requests (see the module docstring).
    Once the engine serves, no method raises: a failure is logged (once per
    kind), counted in ``errors`` and stops the capture of its request, or
    all capture (``stopped``) when the disk is full."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        try:
            super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        except TypeError:  # vLLM before the kv_cache_config argument
            super().__init__(vllm_config=vllm_config, role=role)
        self._kv_cache_config = kv_cache_config
        ktc = vllm_config.kv_transfer_config
        extra = dict(_get(ktc, "kv_connector_extra_config", None) or {})
        self.kv_role = _get(ktc, "kv_role", "kv_both")
        self.dump_dir = str(extra.get("dump_dir", "/tmp/kvaudit"))
        self.selection = extra.get("requests", "all")
        self.max_bytes = parse_bytes(extra.get("max_bytes"))
        self.forced_role = extra.get("role")
        self.strip_suffix = extra.get("request_id_suffix", "strip") != "keep"
        self.options = extra
        self.is_scheduler = role == KVConnectorRole.SCHEDULER or getattr(role, "name", "") == "SCHEDULER"
        if self.forced_role not in (None, PRODUCER, CONSUMER):
            raise ValueError(f"kv_connector_extra_config role {self.forced_role!r}: want producer or consumer")
        if extra.get("request_id_suffix", "strip") not in ("strip", "keep"):
            raise ValueError(f"kv_connector_extra_config request_id_suffix {extra['request_id_suffix']!r}: "
                             "want \"strip\" (default) or \"keep\"")
        if not (self.selection == "all" or isinstance(self.selection, (list, tuple)) or
                (isinstance(self.selection, (int, float)) and not isinstance(self.selection, bool)
                 and 0 < float(self.selection) <= 1)):
            raise ValueError(f"kv_connector_extra_config requests {self.selection!r}: want \"all\", "
                             "a fraction in (0, 1] or a list of request ids")
        if isinstance(self.selection, (list, tuple)):
            self.selection = {str(x) for x in self.selection}
        self.errors = {}  # kind -> count
        self.stopped = None  # why all capture stopped (a full disk), or None
        self._logged = set()
        # Scheduler side.
        self._consumers = {}  # vLLM request id -> consumer state (see _consumer)
        self._pending = []  # Dumps for the next step's metadata
        self._budget_used = 0
        # Worker side.
        self._kv_caches = None
        self._written = set()  # producer requests dumped (or given up), not yet reported
        self._finished_seen = set()
        if not self.is_scheduler and extra.get("nixl_log"):
            # lease_s: the producer's lease as the NIXL connector's
            # kv_lease_duration gives it (vLLM 9aaf83ef5: default 30 s,
            # renewed by the consumer's "HB:" notifications); MultiConnector
            # shows this connector only its own config, so it is an option.
            self._guard("installing the NIXL recorder", None, lambda: nixl_log.install(
                os.path.join(self.dump_dir, "nixl"), strip_request_suffix=self.strip_suffix,
                lease_s=extra.get("lease_s"), engine_id=_get(ktc, "engine_id", None)))

    # ------------------------------------------------------------------
    # Failures: logged once per kind, counted, never raised.

    def _failed(self, what, rid, exc):
        kind = error_kind(exc)
        self.errors[kind] = self.errors.get(kind, 0) + 1
        about = f"request {rid}: " if rid is not None else ""
        if kind == DISK_FULL and self.stopped is None:
            self.stopped = f"{what}: {exc}"
            logger.error("kvaudit: %s%s failed: %s; the disk is full: all capture stops (the serving goes on)",
                         about, what, exc)
        elif kind not in self._logged:
            logger.error("kvaudit: %s%s failed: %s; that request is not captured (further %s failures "
                         "are counted, not logged)", about, what, exc, kind)
        else:
            logger.debug("kvaudit: %s%s failed: %s", about, what, exc)
        self._logged.add(kind)
        return kind

    def _guard(self, what, rid, fn, *args, default=None):
        try:
            return fn(*args)
        except Exception as e:  # never into vLLM
            self._failed(what, rid, e)
            return default

    def _capturing(self):
        return self.stopped is None

    # ------------------------------------------------------------------
    # Selection.

    def _params(self, request):
        p = _get(request, "kv_transfer_params")
        return p if isinstance(p, dict) else {}

    def _side(self, request):
        if self.forced_role:
            return self.forced_role
        rid = str(request.request_id)
        if rid in self._consumers:
            return CONSUMER
        params = self._params(request)
        if params.get("do_remote_decode"):
            return PRODUCER
        # vLLM's NIXL connector sets do_remote_prefill to False once it has
        # allocated the load (and _remote_blocks_processed to True): a
        # request that had it is still a consumer's.
        if params.get("do_remote_prefill") or params.get("_remote_blocks_processed"):
            return CONSUMER
        if self.kv_role in ("kv_producer", "kv_both"):
            return PRODUCER
        return None

    def _producer_id(self, request, side):
        """vLLM's id of the request on the producer."""
        params = self._params(request)
        if side == CONSUMER and params.get("remote_request_id"):
            return str(params["remote_request_id"])
        return str(request.request_id)

    def _user(self, rid):
        return user_request_id(rid, self.strip_suffix)

    def _selected(self, request, side):
        pid = self._producer_id(request, side)
        sel = self.selection
        if sel == "all":
            return True
        if isinstance(sel, set):
            rid = str(request.request_id)
            return bool({pid, rid, self._user(pid), self._user(rid)} & sel)
        h = int.from_bytes(hashlib.sha256(self._user(pid).encode()).digest()[:8], "big")
        return h < float(sel) * 2 ** 64

    def _estimate(self, block_ids):
        """Bytes the dumps of all ranks of a request take, from the
        connector's KVCacheConfig (one rank's layers) times TP x PP."""
        cfg = self._kv_cache_config
        if cfg is None:
            return 0
        total = 0
        for gid, group in enumerate(_get(cfg, "kv_cache_groups", [])):
            spec = _get(group, "kv_cache_spec")
            page = _get(spec, "page_size_bytes", None) or _page_bytes(spec)
            n = len([b for b in (block_ids[gid] if gid < len(block_ids) else []) if b])
            if type(spec).__name__ == "MambaSpec":
                n = min(n, 1)
            total += int(page) * n * len(_get(group, "layer_names", []))
        par = getattr(self._vllm_config, "parallel_config", None)
        ranks = (_get(par, "tensor_parallel_size", 1) or 1) * (_get(par, "pipeline_parallel_size", 1) or 1)
        return total * ranks

    def _admit(self, dump):
        """Charges the dump to the disk budget; False when it does not fit."""
        est = self._estimate(dump.block_ids)
        if self.max_bytes is not None and self._budget_used + est > self.max_bytes:
            logger.warning("kvaudit: not dumping request %s: its ~%d bytes exceed the budget of %d bytes "
                           "(%d used)", dump.req_id, est, self.max_bytes, self._budget_used)
            return False
        self._budget_used += est
        return True

    def _directory(self, side, rid):
        """DUMP_DIR/SIDE/NAME for a request id: a name inside SIDE, whatever
        the id (_safe), checked once more against the resolved path."""
        base = os.path.join(self.dump_dir, side)
        d = os.path.join(base, _safe(rid))
        if os.path.dirname(os.path.normpath(d)) != os.path.normpath(base):
            raise ValueError(f"request id {rid!r} names no directory inside {base!r}")
        return d

    def _write_params(self, dump, params):
        os.makedirs(dump.directory, exist_ok=True)
        _write_json(os.path.join(dump.directory, "kv_transfer_params.json"), dict(params or {}))

    # ------------------------------------------------------------------
    # Scheduler side. A consumer request: noted when first seen (its
    # kv_transfer_params still say do_remote_prefill), its blocks taken
    # from update_state_after_alloc when this connector gets them (alone;
    # inside MultiConnector it gets empty blocks, the NIXL connector the
    # real ones) or else from the scheduler output that schedules it after
    # its load; dumped in the step after the load is reported finished,
    # before that step's forward.

    def _consumer(self, request):
        rid = str(request.request_id)
        c = self._consumers.get(rid)
        if c is None:
            c = self._consumers[rid] = {"params": dict(self._params(request)), "local": 0, "blocks": None,
                                        "loaded": False, "selected": self._selected(request, CONSUMER),
                                        "prompt": _get(request, "prompt_token_ids"),
                                        "num_prompt": _get(request, "num_prompt_tokens", 0)}
        return c

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        def note():
            if self._side(request) == CONSUMER:
                self._consumer(request)["local"] = int(num_computed_tokens)
        self._guard("get_num_new_matched_tokens", getattr(request, "request_id", None), note)
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        def note():
            if self._side(request) != CONSUMER:
                return
            c = self._consumer(request)
            ids = tuple(list(g) for g in blocks.get_block_ids()) if blocks is not None else ()
            if any(ids):
                c["blocks"] = ids
        self._guard("update_state_after_alloc", getattr(request, "request_id", None), note)

    def update_connector_output(self, connector_output):
        def note():
            for rid in _get(connector_output, "failed_recving", None) or ():
                if self._consumers.pop(str(rid), None) is not None:
                    logger.warning("kvaudit: request %s failed to load: not dumped", rid)
            for rid in _get(connector_output, "finished_recving", None) or ():
                c = self._consumers.get(str(rid))
                if c is not None:
                    c["loaded"] = True
        self._guard("update_connector_output", None, note)

    def build_connector_meta(self, scheduler_output):
        self._guard("build_connector_meta", None, self._consumer_dumps, scheduler_output)
        meta = KvauditConnectorMetadata(dumps=self._pending)
        self._pending = []
        return meta

    def _consumer_dumps(self, scheduler_output):
        scheduled = {}
        for nr in _get(scheduler_output, "scheduled_new_reqs", None) or ():
            scheduled[str(_get(nr, "req_id"))] = nr
        for rid, c in list(self._consumers.items()):
            if not c["loaded"] or c.get("dumped"):
                continue
            nr = scheduled.get(rid)
            ids = c["blocks"]
            if nr is not None and _get(nr, "block_ids", None) is not None:
                ids = tuple(list(g) for g in _get(nr, "block_ids"))
            if not ids or not any(ids):
                continue  # not scheduled yet: its blocks come with it
            c["dumped"] = True
            if not (c["selected"] and self._capturing()):
                continue
            self._guard("preparing the consumer dump", rid, self._queue_consumer, rid, c, ids)

    def _queue_consumer(self, rid, c, ids):
        pid = str(c["params"].get("remote_request_id") or rid)
        prompt = c["prompt"]
        n = len(prompt) if prompt is not None else int(c["num_prompt"] or 0)
        user, puser = self._user(rid), self._user(pid)
        dump = Dump(req_id=rid, side=CONSUMER, directory=self._directory(CONSUMER, puser), block_ids=ids,
                    num_tokens=n, num_local_computed_tokens=c["local"],
                    producer_id=puser if puser != user else None, user_id=user)
        if self._admit(dump):
            try:
                self._write_params(dump, c["params"])
            except Exception as e:
                self._failed("writing kv_transfer_params.json", rid, e)
                return
            self._pending.append(dump)

    def request_finished(self, request, block_ids):
        return self._finished(request, (list(block_ids),))

    def request_finished_all_groups(self, request, block_ids):
        return self._finished(request, tuple(list(g) for g in block_ids))

    def _finished(self, request, block_ids):
        rid = str(getattr(request, "request_id", ""))
        try:
            return self._producer_finished(request, rid, block_ids)
        except Exception as e:  # never into vLLM: the blocks are not held
            self._failed("request_finished", rid, e)
            return False, None

    def _producer_finished(self, request, rid, block_ids):
        was_consumer = self._consumers.pop(rid, None) is not None
        if was_consumer or self._side(request) != PRODUCER:
            return False, None  # a decode request: dumped as a consumer, its blocks not held
        if not self._capturing() or not self._selected(request, PRODUCER) or not any(block_ids):
            return False, None
        n = int(_get(request, "num_computed_tokens", 0))
        params = self._params(request)
        prompt = _get(request, "prompt_token_ids")
        if params.get("do_remote_decode") and prompt is not None:
            n = min(n, len(prompt))  # the prompt's KV is what a consumer loads
        if n <= 0:
            return False, None
        user = self._user(rid)
        dump = Dump(req_id=rid, side=PRODUCER, directory=self._directory(PRODUCER, user), block_ids=block_ids,
                    num_tokens=n, user_id=user)
        if not self._admit(dump):
            return False, None
        try:
            self._write_params(dump, params)
        except Exception as e:
            self._failed("writing kv_transfer_params.json", rid, e)
            return False, None
        self._pending.append(dump)
        return True, None  # hold the blocks until every worker has dumped them

    # ------------------------------------------------------------------
    # Worker side.

    def register_kv_caches(self, kv_caches):
        self._kv_caches = kv_caches

    def register_cross_layers_kv_cache(self, kv_cache, attn_backend):
        """Older vLLM only (KVConnectorBase_V1 at 003df2961dd8); current
        vLLM registers every layer through register_kv_caches."""
        self._kv_caches = self._guard("reading the cross-layer KV cache", None, cross_layer_caches,
                                      self._kv_cache_config, kv_cache, attn_backend,
                                      self.options.get("kernel_block_sizes"))

    def bind_connector_metadata(self, connector_metadata):
        super().bind_connector_metadata(connector_metadata)
        for dump in getattr(connector_metadata, "dumps", None) or ():
            try:
                self._dump(dump)
            except Exception as e:  # never into vLLM
                self._failed("dumping", getattr(dump, "req_id", None), e)
            if getattr(dump, "side", None) == PRODUCER:
                self._written.add(dump.req_id)  # reported, dumped or not, so that its blocks are freed

    def _ranks(self):
        tp = self.options.get("tp_rank")
        pp = self.options.get("pp_rank")
        par = getattr(self._vllm_config, "parallel_config", None)
        tp_size = int(_get(par, "tensor_parallel_size", 1) or 1)
        pp_size = int(_get(par, "pipeline_parallel_size", 1) or 1)
        if tp is None or pp is None:
            try:
                from vllm.distributed import parallel_state as ps
                tp = ps.get_tensor_model_parallel_rank() if tp is None else tp
                pp = ps.get_pp_group().rank_in_group if pp is None else pp
            except Exception:
                pass
        return int(tp or 0), tp_size, int(pp or 0), pp_size

    def _dump(self, dump):
        if not self._capturing():
            return
        tp, tp_size, pp, pp_size = self._ranks()
        path = os.path.join(dump.directory, f"rank-{pp}-{tp}.safetensors")
        try:
            if os.path.dirname(os.path.normpath(dump.directory)) not in (
                    os.path.normpath(os.path.join(self.dump_dir, PRODUCER)),
                    os.path.normpath(os.path.join(self.dump_dir, CONSUMER))):
                raise ExportError(f"dump directory {dump.directory!r} is not inside {self.dump_dir!r}")
            os.makedirs(dump.directory, exist_ok=True)
            if self._kv_caches is None:
                raise ExportError("no KV caches were registered with the connector")
            if self._kv_cache_config is None:
                raise ExportError("this vLLM gives the connector no KVCacheConfig")
            model = getattr(self._vllm_config, "model_config", None)
            heads = self.options.get("model_num_kv_heads")
            if heads is None and model is not None and hasattr(model, "get_total_num_kv_heads"):
                heads = model.get_total_num_kv_heads()
            user = dump.user_id or dump.req_id
            req = {"id": user, "num_tokens": dump.num_tokens,
                   "num_local_computed_tokens": dump.num_local_computed_tokens,
                   "block_ids": [list(g) for g in dump.block_ids]}
            if user != dump.req_id:
                req["engine_request_id"] = dump.req_id
            if dump.producer_id:
                req["producer_id"] = dump.producer_id
            export_dump(path, self._kv_cache_config, self._kv_caches, [req], tp_rank=tp, tp_size=tp_size,
                        pp_rank=pp, pp_size=pp_size, model=str(_get(model, "model", "") or ""),
                        model_num_kv_heads=int(heads or 0), state_splits=self.options.get("state_splits"),
                        covered_states=self.options.get("covered_states"),
                        agent=self.options.get("agent") or nixl_log.agent_for(tp, pp))
        except Exception as e:
            kind = self._failed(f"writing {path}", dump.req_id, e)
            if kind != DISK_FULL:
                # Say why beside the dump (a full disk would refuse this too).
                self._guard("writing the error note", dump.req_id, _write_json, path + ".error.json",
                            {"request": dump.user_id or dump.req_id, "engine_request_id": dump.req_id,
                             "error": str(e), "kind": kind})

    def start_load_kv(self, forward_context, **kwargs):
        return None

    def wait_for_layer_load(self, layer_name):
        return None

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return None

    def wait_for_save(self):
        return None

    def get_finished(self, finished_req_ids):
        """Producer requests whose dump this worker wrote (or gave up),
        once the scheduler has reported them finished (sending is done)."""
        # Only ours: finished_req_ids names every request of the engine.
        self._finished_seen.update(r for r in (finished_req_ids or ()) if r in self._written)
        done = {r for r in self._written if r in self._finished_seen}
        self._written -= done
        self._finished_seen -= done
        return (done or None), None
