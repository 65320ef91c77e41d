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
- On the consumer (``do_remote_prefill``), when the aggregated connector
  output reports the request's load finished (``finished_recving``), its
  workers dump the request's blocks in the next step, before the forward
  that lets decode write the tail block.

Each dump is one rank's kvaudit dump, ``DUMP_DIR/SIDE/REQ/rank-PP-TP.safetensors``
(SIDE is producer or consumer; REQ is the producer's request id on both
sides, ``remote_request_id`` on the consumer, so that
``kvaudit diff DUMP_DIR/producer/REQ DUMP_DIR/consumer/REQ`` compares them),
and beside it the scheduler writes the request's ``kv_transfer_params``
(``kv_transfer_params.json``: on the consumer, what it received, with
``kv_checksums`` when the producer sent them). With ``nixl_log`` on, every
worker records its NIXL agent's calls in ``DUMP_DIR/nixl/AGENT.jsonl``
(``kvaudit_export.nixl_log``) and each dump names its agent
(``parallel.agent``).

kv_connector_extra_config:

- ``dump_dir``: where (default ``/tmp/kvaudit``);
- ``requests``: which requests: ``"all"`` (default), a fraction in (0, 1]
  (sampled by a hash of the producer's request id, so both sides pick the
  same requests), or a list of request ids (the producer's or the
  consumer's);
- ``max_bytes``: a disk budget for all dumps of this engine (bytes, or a
  string such as "50GiB"); a request whose estimated dump would exceed it
  is not captured;
- ``nixl_log``: record NIXL descriptors (default false);
- ``role``: "producer" or "consumer" to force a side; ``state_splits``,
  ``covered_states``, ``kernel_block_sizes``: as kvaudit_export takes them;
  ``tp_rank``, ``pp_rank``: override the ranks vLLM's parallel state gives.

Written against vLLM's KVConnectorBase_V1 (vllm/distributed/kv_transfer/
kv_connector/v1/base.py at commit 003df2961dd8) and MultiConnector
(multi_connector.py at 00f4240ee645): scheduler side
``get_num_new_matched_tokens``, ``update_state_after_alloc``,
``build_connector_meta``, ``update_connector_output``, ``request_finished``
and ``request_finished_all_groups`` (SupportsHMA, which MultiConnector
needs of every child for hybrid models); worker side
``register_kv_caches``, ``register_cross_layers_kv_cache``,
``bind_connector_metadata``, ``start_load_kv``, ``wait_for_layer_load``,
``save_kv_layer``, ``wait_for_save``, ``get_finished``. Without vLLM
installed the module still imports (its own stand-in base classes), which
is how its tests run: there is no vLLM here.
"""

import dataclasses
import enum
import hashlib
import json
import logging
import math
import os
import re

from . import ST_DTYPES, ExportError, _dtype_name, cross_layer_caches, export_dump, nixl_log

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
    """One request to dump on every worker: its blocks per KV cache group
    (the worker's ids), tokens, local prefix hit, and where."""
    req_id: str
    side: str
    directory: str
    block_ids: tuple
    num_tokens: int
    num_local_computed_tokens: int = 0
    producer_id: str | None = None


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


def _safe(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(name)) or "request"


def _write_json(path, obj):
    """Writes obj to path through a temporary name (never half a file)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=str)
        f.write("\n")
    os.replace(tmp, path)


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


class KvauditConnector(KVConnectorBase_V1, SupportsHMA):
    """Writes kvaudit dumps of selected requests (see the module docstring)."""

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
        self.options = extra
        self.is_scheduler = role == KVConnectorRole.SCHEDULER or getattr(role, "name", "") == "SCHEDULER"
        if self.forced_role not in (None, PRODUCER, CONSUMER):
            raise ValueError(f"kv_connector_extra_config role {self.forced_role!r}: want producer or consumer")
        if not (self.selection == "all" or isinstance(self.selection, (list, tuple)) or
                (isinstance(self.selection, (int, float)) and 0 < float(self.selection) <= 1)):
            raise ValueError(f"kv_connector_extra_config requests {self.selection!r}: want \"all\", "
                             "a fraction in (0, 1] or a list of request ids")
        # Scheduler side.
        self._local = {}  # consumer request id -> local prefix hit (tokens)
        self._loading = {}  # consumer request id -> Dump waiting for its load to finish
        self._pending = []  # Dumps for the next step's metadata
        self._budget_used = 0
        # Worker side.
        self._kv_caches = None
        self._written = set()  # producer requests dumped, not yet reported
        self._finished_seen = set()
        if not self.is_scheduler and extra.get("nixl_log"):
            nixl_log.install(os.path.join(self.dump_dir, "nixl"))

    # ------------------------------------------------------------------
    # Selection.

    def _side(self, request):
        if self.forced_role:
            return self.forced_role
        params = _get(request, "kv_transfer_params") or {}
        if params.get("do_remote_prefill"):
            return CONSUMER
        if params.get("do_remote_decode") or self.kv_role in ("kv_producer", "kv_both"):
            return PRODUCER
        return None

    @staticmethod
    def _producer_id(request, side):
        params = _get(request, "kv_transfer_params") or {}
        if side == CONSUMER and params.get("remote_request_id"):
            return str(params["remote_request_id"])
        return str(request.request_id)

    def _selected(self, request, side):
        pid = self._producer_id(request, side)
        sel = self.selection
        if sel == "all":
            return True
        if isinstance(sel, (list, tuple)):
            return pid in sel or str(request.request_id) in sel
        h = int.from_bytes(hashlib.sha256(pid.encode()).digest()[:8], "big")
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

    def _write_params(self, dump, request):
        os.makedirs(dump.directory, exist_ok=True)
        _write_json(os.path.join(dump.directory, "kv_transfer_params.json"),
                    dict(_get(request, "kv_transfer_params") or {}))

    # ------------------------------------------------------------------
    # Scheduler side.

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        if self._side(request) == CONSUMER:
            self._local[request.request_id] = int(num_computed_tokens)
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        rid = request.request_id
        if self._side(request) != CONSUMER or rid in self._loading or not self._selected(request, CONSUMER):
            return
        block_ids = tuple(list(g) for g in blocks.get_block_ids())
        if not any(block_ids):
            return
        pid = self._producer_id(request, CONSUMER)
        prompt = _get(request, "prompt_token_ids")
        n = len(prompt) if prompt is not None else int(_get(request, "num_prompt_tokens", 0))
        dump = Dump(req_id=str(rid), side=CONSUMER, directory=os.path.join(self.dump_dir, CONSUMER, _safe(pid)),
                    block_ids=block_ids, num_tokens=n,
                    num_local_computed_tokens=self._local.get(rid, 0),
                    producer_id=pid if pid != str(rid) else None)
        self._loading[rid] = (dump, dict(_get(request, "kv_transfer_params") or {}))

    def update_connector_output(self, connector_output):
        for rid in _get(connector_output, "failed_recving", None) or ():
            if self._loading.pop(rid, None) is not None:
                logger.warning("kvaudit: request %s failed to load: not dumped", rid)
        for rid in _get(connector_output, "finished_recving", None) or ():
            item = self._loading.pop(rid, None)
            if item is None:
                continue
            dump, params = item
            if self._admit(dump):
                self._write_params(dump, {"kv_transfer_params": params})
                self._pending.append(dump)

    def build_connector_meta(self, scheduler_output):
        meta = KvauditConnectorMetadata(dumps=self._pending)
        self._pending = []
        return meta

    def request_finished(self, request, block_ids):
        return self._finished(request, (list(block_ids),))

    def request_finished_all_groups(self, request, block_ids):
        return self._finished(request, tuple(list(g) for g in block_ids))

    def _finished(self, request, block_ids):
        rid = request.request_id
        self._local.pop(rid, None)
        self._loading.pop(rid, None)
        if self._side(request) != PRODUCER or not self._selected(request, PRODUCER) or not any(block_ids):
            return False, None
        n = int(_get(request, "num_computed_tokens", 0))
        params = _get(request, "kv_transfer_params") or {}
        prompt = _get(request, "prompt_token_ids")
        if params.get("do_remote_decode") and prompt is not None:
            n = min(n, len(prompt))  # the prompt's KV is what a consumer loads
        if n <= 0:
            return False, None
        dump = Dump(req_id=str(rid), side=PRODUCER, directory=os.path.join(self.dump_dir, PRODUCER, _safe(rid)),
                    block_ids=block_ids, num_tokens=n)
        if not self._admit(dump):
            return False, None
        self._write_params(dump, request)
        self._pending.append(dump)
        return True, None  # hold the blocks until every worker has dumped them

    # ------------------------------------------------------------------
    # Worker side.

    def register_kv_caches(self, kv_caches):
        self._kv_caches = kv_caches

    def register_cross_layers_kv_cache(self, kv_cache, attn_backend):
        self._kv_caches = cross_layer_caches(self._kv_cache_config, kv_cache, attn_backend,
                                             kernel_block_sizes=self.options.get("kernel_block_sizes"))

    def bind_connector_metadata(self, connector_metadata):
        super().bind_connector_metadata(connector_metadata)
        for dump in getattr(connector_metadata, "dumps", ()):
            self._dump(dump)

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
        tp, tp_size, pp, pp_size = self._ranks()
        os.makedirs(dump.directory, exist_ok=True)
        path = os.path.join(dump.directory, f"rank-{pp}-{tp}.safetensors")
        try:
            if self._kv_caches is None:
                raise ExportError("no KV caches were registered with the connector")
            if self._kv_cache_config is None:
                raise ExportError("this vLLM gives the connector no KVCacheConfig")
            model = getattr(self._vllm_config, "model_config", None)
            heads = self.options.get("model_num_kv_heads")
            if heads is None and model is not None and hasattr(model, "get_total_num_kv_heads"):
                heads = model.get_total_num_kv_heads()
            req = {"id": dump.req_id, "num_tokens": dump.num_tokens,
                   "num_local_computed_tokens": dump.num_local_computed_tokens,
                   "block_ids": [list(g) for g in dump.block_ids]}
            if dump.producer_id:
                req["producer_id"] = dump.producer_id
            export_dump(path, self._kv_cache_config, self._kv_caches, [req], tp_rank=tp, tp_size=tp_size,
                        pp_rank=pp, pp_size=pp_size, model=str(_get(model, "model", "") or ""),
                        model_num_kv_heads=int(heads or 0), state_splits=self.options.get("state_splits"),
                        covered_states=self.options.get("covered_states"),
                        agent=self.options.get("agent") or nixl_log.agent_for(tp, pp))
        except (ExportError, OSError) as e:
            logger.error("kvaudit: request %s: no dump written to %s: %s", dump.req_id, path, e)
            _write_json(path + ".error.json", {"request": dump.req_id, "error": str(e)})
        if dump.side == PRODUCER:
            self._written.add(dump.req_id)

    def start_load_kv(self, forward_context, **kwargs):
        return None

    def wait_for_layer_load(self, layer_name):
        return None

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return None

    def wait_for_save(self):
        return None

    def get_finished(self, finished_req_ids):
        """Producer requests whose dump this worker wrote, once the
        scheduler has reported them finished (sending is done)."""
        self._finished_seen.update(finished_req_ids or ())
        done = {r for r in self._written if r in self._finished_seen}
        self._written -= done
        self._finished_seen -= done
        return (done or None), None
