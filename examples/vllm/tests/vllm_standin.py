"""A stand-in for the parts of vLLM a KV connector meets: there is no vLLM
here. It drives connectors in the order, and with the arguments, vLLM does,
as read from vllm-project/vllm:

- the scheduler (vllm/v1/core/sched/scheduler.py): for a waiting request,
  get_num_new_matched_tokens(request, num_new_local_computed_tokens), then
  update_state_after_alloc(request, the request's KVCacheBlocks,
  num_external_computed_tokens); a request that loads asynchronously waits
  (WAITING_FOR_REMOTE_KVS) until the aggregated output reports it in
  finished_recving, and then computes its last prompt token again; at the
  end of schedule(), build_connector_meta(scheduler_output), whose
  finished_req_ids are the requests finished since the last step. In
  update_from_output: a finished request's request_finished_all_groups
  (SupportsHMA) or request_finished(request, block_ids[0]), whose True
  keeps its blocks; then update_connector_output(kv_connector_output),
  finished_recving marking loads done and finished_sending freeing blocks;
- the worker (kv_connector_model_runner_mixin.py at 00f4240ee645): once,
  register_kv_caches(kv_caches); per step bind_connector_metadata,
  start_load_kv, the forward (save_kv_layer per layer), wait_for_save,
  get_finished(scheduler_output.finished_req_ids),
  clear_connector_metadata; the executor aggregates the workers' outputs
  (KVOutputAggregator: a request is finished once every worker reported it);
- MultiConnector (multi_connector.py at 00f4240ee645): the first child with
  matched tokens loads (the others get update_state_after_alloc with 0
  external tokens), every child's request_finished is called and the
  request's blocks are kept until every child that returned True reports it.

NixlStandin is a NIXL-like connector over nixl_standin's agent: the
producer keeps a finished request's blocks and returns kv_transfer_params
(do_remote_prefill, remote_block_ids, remote_request_id, ...); the
consumer READs those blocks into its own with make_prepped_xfer, one
descriptor per layer and block, notif "remote_request_id:tp_size", and
reports the load when the transfer is DONE. The agent class is looked up
as NixlWrapper in a module named like vLLM's NIXL connector module, so
kvaudit's recorder patches it where it would in vLLM.
"""

import sys
import types
from types import SimpleNamespace

import numpy as np
import torch

import nixl_standin as ns
import vllm_like as vl

# vLLM's names, where the recorder looks for them.
NIXL_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.nixl_connector"
_current = {"tp_rank": 0, "pp_rank": 0}


def install_fake_vllm_modules():
    """Modules named as vLLM's: the NIXL connector module (NixlWrapper =
    the stand-in agent) and parallel_state (the worker being driven)."""
    saved = {k: sys.modules.get(k) for k in ("vllm", "vllm.distributed", "vllm.distributed.parallel_state",
                                            NIXL_MODULE)}
    vllm = types.ModuleType("vllm")
    dist = types.ModuleType("vllm.distributed")
    ps = types.ModuleType("vllm.distributed.parallel_state")
    ps.get_tensor_model_parallel_rank = lambda: _current["tp_rank"]
    ps.get_pp_group = lambda: SimpleNamespace(rank_in_group=_current["pp_rank"])
    dist.parallel_state = ps
    vllm.distributed = dist
    nixl_mod = types.ModuleType(NIXL_MODULE)
    nixl_mod.NixlWrapper = ns.nixl_agent
    sys.modules.update({"vllm": vllm, "vllm.distributed": dist, "vllm.distributed.parallel_state": ps,
                        NIXL_MODULE: nixl_mod})
    return saved


def restore_modules(saved):
    for k, v in saved.items():
        if v is None:
            sys.modules.pop(k, None)
        else:
            sys.modules[k] = v


class Role:
    SCHEDULER = SimpleNamespace(name="SCHEDULER")
    WORKER = SimpleNamespace(name="WORKER")


def vllm_config(kv_role, extra, tp, engine_id, heads, connectors=None):
    ktc = SimpleNamespace(kv_role=kv_role, kv_connector_extra_config=dict(extra), engine_id=engine_id,
                          kv_connector="MultiConnector" if connectors else "KvauditConnector")
    return SimpleNamespace(kv_transfer_config=ktc,
                           parallel_config=SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1),
                           model_config=SimpleNamespace(model="test/model", get_total_num_kv_heads=lambda: heads))


class KVCacheBlocks:
    """KVCacheBlocks: get_block_ids() is one list per group."""

    def __init__(self, ids, num_hashed=0):
        self.ids, self.num_hashed = ids, num_hashed

    def get_block_ids(self):
        return (list(self.ids),)

    def get_unhashed_block_ids(self):
        return list(self.ids[self.num_hashed:])

    def new_empty(self):
        """KVCacheBlocks.new_empty: no blocks in any group (what
        MultiConnector hands the connectors it did not choose)."""
        return KVCacheBlocks([])


# ---------------------------------------------------------------------------
# MultiConnector, as multi_connector.py combines its children.

class MultiConnectorStandin:
    def __init__(self, children):
        self.children = children
        self.chosen = {}
        self.extra_saves = {}

    def register_kv_caches(self, kv_caches):
        for c in self.children:
            c.register_kv_caches(kv_caches)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        out = (0, False)
        for i, c in enumerate(self.children):
            toks, load_async = c.get_num_new_matched_tokens(request, num_computed_tokens)
            if toks is None:
                return None, False
            if out[0] == 0 and toks > 0:
                self.chosen[request.request_id] = i
                out = (toks, load_async)
        return out

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        # The chosen child gets the blocks, the others empty blocks and 0.
        chosen = self.chosen.get(request.request_id, -1)
        empty = blocks.new_empty()
        for i, c in enumerate(self.children):
            if i == chosen:
                c.update_state_after_alloc(request, blocks, num_external_tokens)
            else:
                c.update_state_after_alloc(request, empty, 0)

    def build_connector_meta(self, scheduler_output):
        return SimpleNamespace(metadata=tuple(c.build_connector_meta(scheduler_output) for c in self.children))

    def update_connector_output(self, connector_output):
        for c in self.children:
            c.update_connector_output(connector_output)

    def request_finished_all_groups(self, request, block_ids):
        saves, params = 0, None
        for c in self.children:
            s, p = c.request_finished_all_groups(request, block_ids)
            saves += bool(s)
            if p is not None:
                assert params is None or not set(params) & set(p), "key clash in kv_transfer_params"
                params = dict(params or {}, **p)
        if saves > 1:
            self.extra_saves[request.request_id] = saves - 1
        self.chosen.pop(request.request_id, None)
        return saves > 0, params

    # worker side
    def bind_connector_metadata(self, meta):
        for c, m in zip(self.children, meta.metadata):
            c.bind_connector_metadata(m)

    def start_load_kv(self, forward_context):
        for c in self.children:
            c.start_load_kv(forward_context)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata):
        for c in self.children:
            c.save_kv_layer(layer_name, kv_layer, attn_metadata)

    def wait_for_save(self):
        for c in self.children:
            c.wait_for_save()

    def get_finished(self, finished_req_ids):
        sending, recving = set(), set()
        for c in self.children:
            s, r = c.get_finished(finished_req_ids)
            recving |= r or set()
            for rid in s or ():
                extra = self.extra_saves.get(rid)
                if extra is None:
                    sending.add(rid)
                elif extra == 1:
                    del self.extra_saves[rid]
                else:
                    self.extra_saves[rid] = extra - 1
        return sending or None, recving or None

    def clear_connector_metadata(self):
        for c in self.children:
            c.clear_connector_metadata()


# ---------------------------------------------------------------------------
# A NIXL-like connector.

_REGISTRY = {}  # (engine_id, tp_rank) -> the worker's agent name and block descriptors
_READ_DONE = set()  # producer request ids some consumer finished reading


class NixlStandin:
    def __init__(self, vllm_config, role, kv_cache_config=None):
        self.cfg, self.role = vllm_config, role
        self.engine = vllm_config.kv_transfer_config.engine_id
        self.tp = vllm_config.parallel_config.tensor_parallel_size
        self.sends, self.loads, self.to_load = {}, {}, {}
        self.meta = None
        self.handles = {}
        self.remote = {}
        self.corrupt = None  # (layer, block, byte): a bad transfer flips that byte after the READ

    # scheduler
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        p = request.kv_transfer_params or {}
        if p.get("do_remote_prefill") and request.request_id not in self.loads:
            return len(request.prompt_token_ids) - num_computed_tokens, True
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        p = request.kv_transfer_params
        if not p:
            return
        if p.get("do_remote_prefill"):
            if num_external_tokens > 0:
                local = blocks.get_unhashed_block_ids()
                self.loads[request.request_id] = True
                self.to_load[request.request_id] = (local, p["remote_block_ids"][0][-len(local):],
                                                    p["remote_request_id"], p["remote_engine_id"])
            # As vLLM's NIXL scheduler does (nixl/scheduler.py at 9aaf83ef5):
            # one transfer per request, the request's own params changed.
            p["do_remote_prefill"] = False
            p["_remote_blocks_processed"] = True

    def build_connector_meta(self, scheduler_output):
        meta = SimpleNamespace(loads=self.to_load, sends=dict(self.sends))
        self.to_load = {}
        self.sends = {}
        return meta

    def update_connector_output(self, connector_output):
        pass

    def request_finished_all_groups(self, request, block_ids):
        p = request.kv_transfer_params or {}
        if not p.get("do_remote_decode"):
            return False, None
        self.sends[request.request_id] = True
        return True, {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [list(g) for g in block_ids],
                      "remote_engine_id": self.engine, "remote_request_id": request.request_id, "tp_size": self.tp}

    # worker
    def register_kv_caches(self, kv_caches):
        rank = _current["tp_rank"]
        agent_cls = sys.modules[NIXL_MODULE].NixlWrapper
        self.agent = agent_cls(f"{self.engine}-tp{rank}")
        layers = sorted(kv_caches)
        self.layers = layers
        first = kv_caches[layers[0]]
        self.num_blocks = first.shape[0]
        self.page = first[0].numel() * first.element_size()
        regions = [(t.data_ptr(), t.numel() * t.element_size(), 0, "") for t in (kv_caches[n] for n in layers)]
        self.agent.register_memory(self.agent.get_reg_descs(regions, "DRAM"))
        self.block_descs = np.array([(kv_caches[n].data_ptr() + b * self.page, self.page, 0)
                                     for n in layers for b in range(self.num_blocks)], dtype=np.uint64)
        self.local_dlist = self.agent.prep_xfer_dlist("NIXL_INIT_AGENT",
                                                      self.agent.get_xfer_descs(self.block_descs, "DRAM"))
        self.kv_caches = kv_caches
        _REGISTRY[(self.engine, rank)] = (self.agent.name, self.block_descs)
        self.pending_sends = set()

    def bind_connector_metadata(self, meta):
        self.meta = meta
        self.pending_sends |= set(meta.sends)

    def start_load_kv(self, forward_context):
        rank = _current["tp_rank"]
        for rid, (local, remote, remote_rid, remote_engine) in self.meta.loads.items():
            name, descs = _REGISTRY[(remote_engine, rank)]
            if name not in self.remote:
                self.agent.add_remote_agent(name.encode())
                self.remote[name] = self.agent.prep_xfer_dlist(name, [tuple(r) for r in descs.tolist()], "DRAM")
            n = self.num_blocks
            lids = np.array([li * n + b for li in range(len(self.layers)) for b in local], dtype=np.int32)
            rids = [li * n + b for li in range(len(self.layers)) for b in remote]
            h = self.agent.make_prepped_xfer("READ", self.local_dlist, lids, self.remote[name], rids,
                                             notif_msg=f"{remote_rid}:{self.tp}".encode())
            state = self.agent.transfer(h)
            assert state == "DONE", state
            if self.corrupt is not None and self.corrupt[0] == rank:
                _, layer, pos, byte = self.corrupt
                t = self.kv_caches[self.layers[layer]]
                t.view(torch.uint8).view(t.shape[0], -1)[local[pos], byte] ^= 1
            self.handles[rid] = (h, remote_rid)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata):
        pass

    def wait_for_save(self):
        pass

    def get_finished(self, finished_req_ids):
        recving = set()
        for rid, (h, remote_rid) in list(self.handles.items()):
            if self.agent.check_xfer_state(h) == "DONE":
                self.agent.release_xfer_handle(h)
                recving.add(rid)
                _READ_DONE.add(remote_rid)
                del self.handles[rid]
        sending = {r for r in self.pending_sends if r in _READ_DONE}
        self.pending_sends -= sending
        return sending or None, recving or None

    def clear_connector_metadata(self):
        self.meta = None


# ---------------------------------------------------------------------------
# An engine: one scheduler, TP workers, each with its caches.

class Engine:
    """Drives connectors as vLLM's scheduler and workers do. Caches come
    from vllm_like (flashinfer NHD: one block a contiguous page per
    layer); the forward writes each scheduled token's logical KV, or for
    a token in wrong, a wrong value (a recompute that is not bit-identical)."""

    def __init__(self, model, make_connector, tp, num_blocks=12, seed=0):
        self.m, self.tp = model, tp
        self.sched = make_connector(Role.SCHEDULER, None)
        self.workers = []
        for rank in range(tp):
            _current["tp_rank"] = rank
            caches = vl.allocate(model.config, {0: model.backend}, {0: model.kbs}, model.cache_layout,
                                 seed=seed + rank)
            conn = make_connector(Role.WORKER, rank)
            conn.register_kv_caches(caches)
            self.workers.append((conn, caches))
        self.free = list(range(num_blocks - 1, 0, -1))  # block 0 is the null block
        self.blocks, self.requests, self.waiting = {}, {}, []
        self.finished_req_ids, self.finished_recving = set(), set()
        self.done, self.freed, self.params = set(), set(), {}
        self.wrong = set()  # (request id, token) the forward writes wrongly
        self.prefix = {}  # request id -> (tokens, blocks) of a local prefix-cache hit

    def add(self, request):
        request.status = "WAITING"
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def _allocate(self, rid, n_tokens):
        have = self.blocks.setdefault(rid, [])
        while len(have) * self.m.S < n_tokens:
            have.append(self.free.pop())
        return have

    def schedule(self):
        scheduled, new_reqs = {}, []
        for req in list(self.waiting):
            if req.status == "WAITING_FOR_REMOTE_KVS":
                if req.request_id not in self.finished_recving:
                    continue
                # _update_waiting_for_remote_kv: the loaded tokens are computed,
                # save the last prompt token, computed again.
                self.finished_recving.discard(req.request_id)
                req.num_computed_tokens = len(req.prompt_token_ids) - 1
                req.status = "WAITING"
                # scheduler.py at 9aaf83ef5: every scheduled waiting request's
                # blocks go to update_state_after_alloc, here with 0 external
                # tokens (the load is done).
                self.sched.update_state_after_alloc(req, KVCacheBlocks(self.blocks[req.request_id]), 0)
            else:
                local_tokens, local_blocks = self.prefix.get(req.request_id, (0, []))
                self.blocks[req.request_id] = list(local_blocks)
                ext, load_async = self.sched.get_num_new_matched_tokens(req, local_tokens)
                ids = self._allocate(req.request_id, len(req.prompt_token_ids))
                self.sched.update_state_after_alloc(req, KVCacheBlocks(ids, len(local_blocks)), ext)
                req.num_computed_tokens = local_tokens
                if load_async:
                    req.status = "WAITING_FOR_REMOTE_KVS"
                    continue
            scheduled[req.request_id] = (req.num_computed_tokens, len(req.prompt_token_ids))
            new_reqs.append(SimpleNamespace(req_id=req.request_id, block_ids=(list(self.blocks[req.request_id]),),
                                            num_computed_tokens=req.num_computed_tokens,
                                            prompt_token_ids=list(req.prompt_token_ids)))
            self.waiting.remove(req)
        # SchedulerOutput: scheduled_new_reqs are NewRequestData (req_id,
        # block_ids per group, num_computed_tokens, ...) of the requests
        # scheduled for the first time, a loaded request among them.
        so = SimpleNamespace(finished_req_ids=set(self.finished_req_ids), num_scheduled_tokens=scheduled,
                             scheduled_new_reqs=new_reqs)
        so.kv_connector_metadata = self.sched.build_connector_meta(so)
        self.finished_req_ids = set()
        return so

    def execute(self, so):
        outs = []
        for rank, (conn, caches) in enumerate(self.workers):
            _current["tp_rank"] = rank
            conn.bind_connector_metadata(so.kv_connector_metadata)
            conn.start_load_kv(None)
            for rid, (start, end) in so.num_scheduled_tokens.items():
                self._forward(rank, caches, rid, start, end)
            for name in sorted(caches):
                conn.save_kv_layer(name, caches[name], None)
            conn.wait_for_save()
            outs.append(conn.get_finished(so.finished_req_ids))
            conn.clear_connector_metadata()
        sending = set.intersection(*[set(s or ()) for s, _ in outs])
        recving = set.intersection(*[set(r or ()) for _, r in outs])
        self.pending_sending = getattr(self, "pending_sending", {})
        return SimpleNamespace(finished_sending=sending, finished_recving=recving, failed_recving=set(),
                               kv_connector_worker_meta=None)

    def _forward(self, rank, caches, rid, start, end):
        m = self.m
        kv = m.kv[self.requests[rid].logical]
        ids = self.blocks[rid]
        for L in m.attn_layers:
            for hl in range(m.local_heads):
                cells = kv[L][rank * m.local_heads + hl]
                for t in range(start, end):
                    c = cells[t].reshape(2, m.D).copy()
                    if (rid, t) in self.wrong:
                        c ^= 0x55
                    vl.write_token(caches[f"model.layers.{L}.self_attn.attn"], m.backend, m.attn_spec, m.kbs,
                                   ids[t // m.S], t % m.S, hl, c)

    def update_from_output(self, so, kv_out):
        for rid, (start, end) in so.num_scheduled_tokens.items():
            req = self.requests[rid]
            req.num_computed_tokens = end
            # max_tokens=1 on a producer; the consumer's decode is not run here
            delay, params = self.sched.request_finished_all_groups(req, (list(self.blocks[rid]),))
            self.params[rid] = params
            self.done.add(rid)
            self.finished_req_ids.add(rid)
            if not delay:
                self._free(rid)
        self.sched.update_connector_output(kv_out)
        for rid in kv_out.finished_recving:
            self.finished_recving.add(rid)
        for rid in kv_out.finished_sending:
            self._free(rid)

    def _free(self, rid):
        self.free.extend(self.blocks.get(rid, []))
        self.freed.add(rid)

    def step(self):
        so = self.schedule()
        self.update_from_output(so, self.execute(so))
        return so
