"""`SageWorker`: SGLang's speculative worker for `--speculative-algorithm sage` (with
`SageSpecAlgo`, the algorithm SGLang registers, and `SageVerifyInput`). Imported only once SGLang
is installed and its hooks checked (registration).

Shaped like SGLang's NGRAM worker (a tree per request, verified in one TARGET_VERIFY forward, no
draft KV in SGLang's pool), with the tree coming from sagespec: per request a policy plans the
shape from the last step's acceptance and entropy, a drafter proposes the tree, and the shared
rules verify it (greedy or exact sampling per request, or the configured lossy rule). Each step:
  1. plan and draft a tree per request; lay the trees out at SGLang's verify width (padding);
  2. give SGLang's batch the tree tokens, their slots and RoPE positions (prefix + depth);
  3. run the target once (tree attention: `cpu_paths`), verify each tree, move the accepted path's
     KV into the slots right after the prefix, and return the accepted tokens plus the bonus.
The root of each tree is the last verified token, whose KV this forward computes (as in NGRAM).
"""

from __future__ import annotations

import copy
import logging

import torch
from sglang.srt.managers.overlap_utils import FutureMap
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
from sglang.srt.runtime_context import get_device
from sglang.srt.speculative.base_spec_worker import BaseSpecWorker
from sglang.srt.speculative.ngram_info import NgramVerifyInput
from sglang.srt.speculative.spec_registry import CustomSpecAlgo
from sglang.srt.utils import is_cpu

from sagespec.common.drafters import LOOKUP_DRAFTERS, DraftModelDrafter, EagleDrafter, EagleHead, lookup_drafters
from sagespec.common.random_source import TorchRandom
from sagespec.common.sampling import process_logits
from sagespec.common.shipped import shipped_head_for
from sagespec.common.speculator import DraftRequest, Speculator, VerifyCheck
from sagespec.common.tree import DraftTree
from sagespec.common.verify.acceptance import Acceptance
from sagespec.plugins._draft_loading import load_draft_model
from sagespec.plugins._hf_tree_lm import HFTreeLM

from .options import OWNER, parse_server_args
from .request_options import (
    LOSSY_META_KEY,
    SHAPE_META_KEY,
    record_per_token,
    request_params,
    request_seed,
    unsupported_batch_options,
    worker_limits,
)
from .tree_layout import pack_trees

logger = logging.getLogger("sglang.sagespec")


class SageSpecAlgo(CustomSpecAlgo):
    """CustomSpecAlgo with what SGLang's scheduler asks of every algorithm but the default lacks."""

    def has_draft_kv(self) -> bool:
        return False  # the tree lives in the verify mask; drafters keep their own state

    def carries_draft_hidden_states(self) -> bool:
        return False

    def need_topk(self) -> bool:
        return False

    def create_future_map(
        self, device, req_to_token_pool, needs_cpu_seq_lens: bool = True, needs_confidence_relay: bool = False
    ):
        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay)

    def handle_server_args(self, server_args) -> None:
        # SGLang sizes its verify buffers from these: write back what sage resolved. The
        # worker runs each step synchronously (plan from the last step's outcome).
        options = parse_server_args(server_args)
        server_args.speculative_num_draft_tokens = options.num_draft_tokens
        server_args.speculative_num_steps = options.num_steps
        server_args.speculative_eagle_topk = options.eagle_topk
        server_args.disable_overlap_schedule = True
        if options.drafter == "eagle":
            # The EAGLE head reads target features of every committed position; a prefix served
            # from SGLang's radix cache would come without them.
            server_args.disable_radix_cache = True


class SageVerifyInput(NgramVerifyInput):
    """NGRAM's verify input plus the step's trees, and the attention plan the first layer builds
    from them (cpu_paths.tree_verify_attention)."""

    sage_trees: list | None = None
    sage_plans: dict | None = None  # sliding window (None: none) -> the step's attention plan


class SageWorker(BaseSpecWorker):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__()
        self.server_args = server_args
        self._target_worker = target_worker
        self._draft_worker = None  # no draft model in SGLang's pool (BaseSpecWorker.draft_worker)
        self.model_runner = target_worker.model_runner
        self.device = get_device().device
        self.options = parse_server_args(server_args)
        refused = worker_limits(self.options)
        if refused:
            raise ValueError(f"{OWNER}: {refused}")
        if not is_cpu():
            # Tree masks reach only the CPU engine's attention (cpu_paths); elsewhere SGLang's
            # backends would read the verify mask in another layout.
            raise ValueError(
                f"{OWNER}: the SGLang worker runs on SGLang's CPU engine only for now (SGLANG_USE_CPU_ENGINE=1)"
            )
        from .cpu_paths import unsupported_attention

        feature = unsupported_attention(self.model_runner.model, self.model_runner.model_config)
        if feature is not None:
            raise ValueError(
                f"{OWNER}: this model uses {feature}, which sage's tree verification does not "
                "reproduce exactly; serve it without --speculative-algorithm sage"
            )
        config = self.model_runner.model_config.hf_config
        acceptance = Acceptance(
            self.options.acceptance, self.options.acceptance_options, config.vocab_size, config.hidden_size
        )
        if not self.options.lossless:
            logger.warning(
                "sagespec: acceptance %r %s is lossy: outputs may differ from the target model's",
                self.options.acceptance,
                self.options.acceptance_options,
            )
        self.draft_lm = None
        if self.options.drafter == "draft_model":
            self.draft_lm = load_draft_model(
                self.options.model, server_args.tokenizer_path or server_args.model_path, self.model_runner.model
            )
        self.head = self._load_head() if self.options.drafter == "eagle" else None
        self.lookup_drafters = (
            lookup_drafters(self.options.drafter, self.options.drafter_options)
            if self.options.drafter in LOOKUP_DRAFTERS
            else None
        )
        # Rules that read the target's final hidden rows, and the EAGLE head (the target layers'
        # states), get them from the target's forwards themselves.
        self.capture = (
            CaptureHiddenMode.FULL if self.head is not None or acceptance.needs_hidden else CaptureHiddenMode.NULL
        )
        self.prefilling: set[str] = set()  # requests prefilled and not yet seen decoding
        self.n = self.options.num_draft_tokens
        self.speculator = Speculator(self.options.make_policy, self._make_drafter, acceptance)
        self.unseeded = TorchRandom(0)  # the stream of requests without a sampling_seed

    def clear_cache_pool(self):
        self.speculator.requests.clear()
        self.prefilling.clear()

    def _make_drafter(self):
        """A request's drafter: shared weights, its own cache."""
        if self.head is not None:
            return EagleDrafter(copy.copy(self.head))
        if self.draft_lm is not None:
            return DraftModelDrafter(HFTreeLM(self.draft_lm))
        return self.lookup_drafters()

    def _load_head(self) -> EagleHead:
        """The EAGLE head over the target's embeddings and output layer; the target captures the
        head's layers (index i: the residual stream entering layer i, as in Hugging Face's
        hidden_states) in every forward."""
        model = self.model_runner.model
        if not hasattr(model, "set_eagle3_layers_to_capture"):
            raise ValueError(
                f"{OWNER}: drafter 'eagle' needs a target SGLang can capture layer states from "
                f"(set_eagle3_layers_to_capture); {type(model).__name__} has none"
            )
        config = model.config
        vocab = config.vocab_size
        folder = self.options.model or str(shipped_head_for(config))
        head = EagleHead.load(
            folder, model.model.embed_tokens.weight[:vocab], model.lm_head.weight[:vocab], config.num_hidden_layers
        ).eval()
        if max(head.config.target_layer_ids) >= config.num_hidden_layers:
            raise ValueError(
                f"{OWNER}: EAGLE head {folder} reads target layer ids {head.config.target_layer_ids}; "
                f"SGLang captures the inputs of layers 0..{config.num_hidden_layers - 1} only"
            )
        model.set_eagle3_layers_to_capture([i - 1 for i in head.config.target_layer_ids])  # SGLang adds 1
        logger.info("sagespec: EAGLE head %s reads target layers %s", folder, head.config.target_layer_ids)
        return head

    def _state(self, req):
        """The request's speculation state; a request with a sampling_seed drafts and verifies
        from its own generator (the same output alone or in any batch)."""
        state = self.speculator.state(req.rid)
        if state.rng is None:
            seed = request_seed(req)
            state.rng = TorchRandom(seed) if seed is not None else self.unseeded
        return state

    def _commit_features(self, req, rows: torch.Tensor) -> None:
        self.speculator.commit_features(req.rid, rows.to(self.head.fc.weight.dtype).cpu())

    def _prefill(self, batch, pp_proxy_tensors):
        result = self.target_worker.forward_batch_generation(
            batch, pp_proxy_tensors=pp_proxy_tensors, capture_hidden_mode=self.capture
        )
        if self.head is not None:
            feats = result.logits_output.hidden_states
            start = 0
            for req, length in zip(batch.reqs, batch.extend_lens):
                self.prefilling.add(req.rid)
                self._state(req)
                self._commit_features(req, feats[start : start + length])
                start += length
        self._seeded_first_tokens(batch, result)
        return result

    def _seeded_first_tokens(self, batch, result) -> None:
        """SGLang draws a prompt's first token from its global stream (it reads sampling_seed only
        in deterministic mode); a sampled request with a seed draws it from its own generator, so
        its whole output depends on its seed alone, never on the batch it runs in."""
        logits = result.logits_output.next_token_logits
        for b, req in enumerate(batch.reqs):
            params = request_params(req)
            if request_seed(req) is None or params.greedy or getattr(req, "is_chunked", 0):
                continue
            token = self._state(req).rng.choice(process_logits(logits[b].float(), params))
            result.next_token_ids[b] = token

    # ---- one step ------------------------------------------------------------------
    def _trees(self, batch) -> list[DraftTree]:
        live = {r.rid for r in batch.reqs}
        self.prefilling -= live
        self.speculator.retain(live | self.prefilling)
        requests = []
        for req in batch.reqs:
            tokens = torch.tensor(list(req.origin_input_ids_unpadded) + list(req.output_ids), dtype=torch.long)
            requests.append(DraftRequest(req.rid, tokens, request_params(req), self._state(req).rng))
        return self.speculator.draft(requests)

    def _prepare_verify(self, batch, trees):
        bs, n = len(trees), self.n
        layout = pack_trees(trees, n)
        seq_lens = batch.seq_lens.to(torch.long)
        depths = torch.zeros(bs, n, dtype=torch.long)
        for b, tree in enumerate(trees):
            depths[b, : tree.num_nodes] = tree.depths
        positions = (seq_lens[:, None] + depths.to(seq_lens.device)).flatten()
        req_to_token = batch.req_to_token_pool.req_to_token
        cols = seq_lens[:, None] + torch.arange(n, device=seq_lens.device)
        out_cache_loc = req_to_token[batch.req_pool_indices.long()[:, None], cols].flatten().to(torch.int64)
        batch.forward_mode = ForwardMode.TARGET_VERIFY
        batch.input_ids = layout.tokens.flatten().to(self.device)
        batch.out_cache_loc = out_cache_loc
        spec = SageVerifyInput(
            draft_token=batch.input_ids, custom_mask=layout.mask.flatten(), positions=positions, draft_token_num=n
        )
        spec.sage_trees, spec.sage_plans = trees, {}
        batch.spec_info = spec

    def _move_accepted_kv(self, out_cache_loc: torch.Tensor, accepted: list[tuple[int, ...]]):
        """The accepted path's KV goes to the slots right after the prefix (slot j of each
        request's verify window), in every layer."""
        n, src, tgt = self.n, [], []
        for b, nodes in enumerate(accepted):
            for j, node in enumerate(nodes):
                if node != j:
                    src.append(b * n + node)
                    tgt.append(b * n + j)
        if not src:
            return
        src_loc, tgt_loc = out_cache_loc[torch.tensor(src)], out_cache_loc[torch.tensor(tgt)]
        pool = self.model_runner.token_to_kv_pool
        for layer in range(pool.layer_num):
            for buffer in (pool.get_key_buffer(layer), pool.get_value_buffer(layer)):
                buffer[tgt_loc] = buffer[src_loc]

    def forward_batch_generation(self, batch, on_publish=None, pp_proxy_tensors=None):
        bs, n = len(batch.reqs), self.n
        if not batch.forward_mode.is_decode():
            result = self._prefill(batch, pp_proxy_tensors)
            accept_tokens = torch.zeros(bs, n, dtype=torch.int32, device=self.device)
            accept_tokens[:, 0] = result.next_token_ids
            accept_lens = torch.ones(bs, dtype=torch.int32, device=self.device)
            new_seq_lens = batch.seq_lens.clone()
            if on_publish is not None:
                on_publish(new_seq_lens)
            return self._result(
                result.logits_output, result.next_token_ids, accept_tokens.flatten(), accept_lens, new_seq_lens
            )
        refused = unsupported_batch_options(batch)
        if refused:
            raise ValueError(f"{OWNER}: {refused}")
        trees = self._trees(batch)
        self._prepare_verify(batch, trees)
        out_cache_loc = batch.out_cache_loc
        result = self.target_worker.forward_batch_generation(
            batch, pp_proxy_tensors=pp_proxy_tensors, is_verify=True, capture_hidden_mode=self.capture
        )
        logits = result.logits_output.next_token_logits.view(bs, n, -1)
        hidden = (
            result.logits_output.hidden_states.view(bs, n, -1) if self.capture.need_capture() else None
        )  # the EAGLE layers' states with an EAGLE head, else the final rows
        checks = [
            VerifyCheck(
                request_params(req),
                self._state(req).rng,
                hidden[b, : tree.num_nodes] if hidden is not None and self.head is None else None,
            )
            for b, (req, tree) in enumerate(zip(batch.reqs, trees))
        ]
        verdicts = self.speculator.verify(trees, logits.view(bs * n, -1), [b * n for b in range(bs)], checks)
        accepted, emitted = [], torch.zeros(bs, n, dtype=torch.int32)
        for b, (req, verdict) in enumerate(zip(batch.reqs, verdicts)):
            tokens = verdict.emitted
            emitted[b, : len(tokens)] = torch.tensor(tokens, dtype=torch.int32)
            accepted.append(verdict.accepted.nodes)
            if not self.options.lossless:
                record_per_token(req, LOSSY_META_KEY, len(tokens), self.options.acceptance)
            shape = self.speculator.requests[req.rid].last_shape
            record_per_token(req, SHAPE_META_KEY, len(tokens), f"{shape.depth}x{shape.width}")
            if self.head is not None:
                self._commit_features(req, hidden[b, list(verdict.accepted.nodes)])
            self.speculator.observe(req.rid, verdict.accepted.num_drafted_accepted, verdict.entropy)
        self._move_accepted_kv(out_cache_loc, accepted)
        accept_lens = torch.tensor([len(nodes) for nodes in accepted], dtype=torch.int32, device=self.device)
        new_seq_lens = batch.seq_lens + accept_lens
        batch.forward_mode = ForwardMode.DECODE
        if on_publish is not None:
            on_publish(new_seq_lens)
        flat = emitted.flatten().to(self.device)
        return self._result(result.logits_output, flat, flat, accept_lens, new_seq_lens)

    def _result(self, logits_output, next_token_ids, accept_tokens, accept_lens, new_seq_lens):
        next_draft_input = SageVerifyInput(
            draft_token_num=self.n, new_seq_lens=new_seq_lens, accept_tokens=accept_tokens, accept_lens=accept_lens
        )
        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=next_token_ids,
            can_run_cuda_graph=False,
            accept_lens=accept_lens,
            new_seq_lens=new_seq_lens,
            next_draft_input=next_draft_input,
            speculative_num_draft_tokens=self.n,
        )
