"""`SageProposer`: vLLM's custom-class proposer, driving the shared policies and drafters.

Per request it keeps a policy (the SAGE entropy EMA lives there), a drafter (an EAGLE head keeps a
per-request cache) and, for drafters that read target features, the features of every committed
position. Each step: observe what the last verify did, plan a shape, draft, hand vLLM the tree's
tokens in topological order and remember the tree (`trees`), which `tree_step` verifies (chains
too). Requests with options only vLLM's sampler applies get chains that vLLM verifies when they
are greedy, and no drafts when they sample (see `step_view.DRAFT_MODES`).
"""
from __future__ import annotations

import copy
import logging
import weakref
from collections import Counter
from dataclasses import dataclass, field

import torch

from sagespec.common.drafters import (DraftContext, DraftModelDrafter, EagleDrafter, EagleHead, ImageInputs,
                                      NgramDrafter, VisionDrafter, VisionModules)
from sagespec.common.drafters.vision_modules import embedding_saliency
from sagespec.common.params import ConfigError
from sagespec.common.policies import DecodeState, StepStats, TreeShape
from sagespec.common.random_source import TorchRandom
from sagespec.common.sampling import SamplingParams
from sagespec.common.step_times import StepTimes
from sagespec.common.tree import DraftTree
from sagespec.common.verify import rule_needs_hidden
from sagespec.common.verify.acceptance import check_acceptance

from sagespec.plugins._draft_loading import load_draft_model, shipped_head_for
from sagespec.plugins._hf_tree_lm import HFTreeLM

from .options import ATTRIBUTE, SageOptions
from .step_view import RequestStep, StepView

logger = logging.getLogger("vllm.sagespec")  # under vLLM's logger: its handlers and level
GREEDY = SamplingParams()
LOG_EVERY = 1000  # proposals between two tree-shape log lines


def chain_of(shape: TreeShape, room: int) -> TreeShape:
    depth = max(1, min(shape.depth, shape.budget, room))
    return TreeShape(depth=depth, width=1, budget=depth)


@dataclass
class RequestState:
    policy: object
    drafter: object
    features: torch.Tensor | None = None
    images: object = None                  # ImageInputs once the runner had them (vision drafters)
    warned_images: bool = False
    last_shape: TreeShape | None = None
    last_drafted: int = 0
    steps: int = 0


@dataclass
class ShapeStats:
    """Tree-shape statistics across all requests (what vLLM's metrics cannot show)."""
    shapes: Counter = field(default_factory=Counter)   # (depth, width) -> proposals
    drafted: int = 0
    proposals: int = 0
    with_images: int = 0                               # proposals drafted with the request's images
    rows_dropped: list = field(default_factory=list)   # per image request: image rows its draft cache left out

    def branching_share(self) -> float:
        """Share of proposals whose planned shape was wider than a chain."""
        wide = sum(n for (_, width), n in self.shapes.items() if width > 1)
        return wide / self.proposals if self.proposals else 0.0

    def record(self, shape: TreeShape, drafted: int, with_images: bool = False) -> None:
        self.shapes[(shape.depth, shape.width)] += 1
        self.with_images += with_images
        self.drafted += drafted
        self.proposals += 1
        if self.proposals % LOG_EVERY == 0:
            top = ", ".join(f"{d}x{w}: {n}" for (d, w), n in self.shapes.most_common(4))
            logger.info("sagespec: %d proposals, %.1f drafted tokens each; shapes (depth x width) %s",
                        self.proposals, self.drafted / self.proposals, top)


class SageProposer:
    live: "weakref.WeakSet[SageProposer]" = weakref.WeakSet()  # in-process engines' proposers (stats)

    def __init__(self, vllm_config):
        spec = vllm_config.speculative_config
        options = getattr(spec, ATTRIBUTE, None)
        if not isinstance(options, SageOptions):
            raise ConfigError("SageProposer runs only under method 'sage' (the sagespec plugin was not "
                              "registered in this process, or the config lost its options)")
        self.options = options
        self.max_model_len = vllm_config.model_config.max_model_len
        self.requests: dict[str, RequestState] = {}
        self.trees: dict[str, DraftTree] = {}   # req_id -> the tree (chains too) sagespec verifies next
        self.step_view: StepView | None = None
        self.stats = ShapeStats()
        self.times = StepTimes()   # where the runner hooks and propose() add their time (benchmarks read it)
        self.rng = TorchRandom(0)
        self.head: EagleHead | None = None
        self.vision_modules: VisionModules | None = None
        self.saliency_layer_name: str | None = None   # where the target's attention is read (attention pruning)
        SageProposer.live.add(self)
        from vllm.platforms import current_platform
        # Tree attention is wired into vLLM's CPU attention backend only; elsewhere every tree is
        # cut to a chain (still verified by sagespec), never run with a chain-causal mask.
        self.trees_allowed = current_platform.is_cpu()
        if not self.trees_allowed:
            logger.warning("sagespec: tree attention is implemented for vLLM's CPU backend only; "
                           "drafting chains on %s", current_platform.device_type)
        elif getattr(vllm_config.model_config, "uses_mrope", False):
            # Tree positions are written as 1-D prefix + depth; M-RoPE's 3-D positions are not yet.
            self.trees_allowed = False
            logger.warning("sagespec: this model uses M-RoPE positions, which tree verification does not "
                           "write yet: drafting chains (positions left to vLLM)")
        hf = vllm_config.model_config.hf_text_config
        self._check_multimodal(options, vllm_config.model_config.is_multimodal_model)
        check_acceptance(options.acceptance, options.acceptance_options, hf.vocab_size, hf.hidden_size)
        if not options.lossless:
            logger.warning("sagespec: acceptance %r %s is lossy: outputs may differ from the target model's",
                           options.acceptance, options.acceptance_options)
        self.logits_hidden = None   # the rows vLLM last computed logits from (rules that read them)
        self.draft_lm = None
        self.target_path = vllm_config.model_config.model
        if options.drafter == "ngram":
            NgramDrafter(**options.drafter_options)  # validated at startup
        elif options.drafter_options and options.vision is None:
            raise ConfigError(f"drafter {options.drafter!r} takes no drafter_options "
                              f"(got {sorted(options.drafter_options)})")

    @staticmethod
    def _check_multimodal(options, model_takes_images: bool) -> None:
        if model_takes_images and options.vision is None:
            message = (f"drafter {options.drafter!r} cannot see images: image requests are drafted from their "
                       "text alone (fewer drafts accepted; outputs unaffected); vision-aware drafters: "
                       "vispec, dream, vision-prune")
            if options.strict_multimodal:
                raise ConfigError(message + "; strict_multimodal refuses it")
            logger.warning("sagespec: %s", message)

    # ---- what the runner hooks use -------------------------------------------------------
    @property
    def hidden_layer_ids(self) -> tuple[int, ...]:
        return self.head.config.target_layer_ids if self.head is not None else ()

    def wants_images(self, req_id: str) -> bool:
        """Whether the runner should look for this request's images: vision drafters, before the
        request's first draft (the drafter lays out the prompt, images included, only then)."""
        if self.options.vision is None:
            return False
        state = self.requests.get(req_id)
        return state is None or (state.images is None and state.steps == 0)

    def load_model(self, target_model) -> None:
        """vLLM hands over the target model once loaded; the EAGLE head shares its embeddings."""
        if rule_needs_hidden(self.options.acceptance):
            self._keep_logits_hidden(target_model)
        if self.options.drafter == "draft_model":
            self.draft_lm = load_draft_model(self.options.model, self.target_path, target_model)
            return
        if self.options.drafter == "ngram":
            return
        # A multimodal model's text model holds the embeddings and the output layer.
        lm = target_model.get_language_model() if hasattr(target_model, "get_language_model") else target_model
        config = lm.config.get_text_config() if hasattr(lm.config, "get_text_config") else lm.config
        vocab = config.vocab_size
        embed = lm.model.embed_tokens.weight[:vocab]  # vLLM pads the vocabulary
        lm_head = lm.lm_head.weight[:vocab]
        folder = self.options.model or shipped_head_for(config)
        self.head = EagleHead.load(folder, embed, lm_head, config.num_hidden_layers).eval()
        logger.info("sagespec: EAGLE head %s reads target layers %s", folder, self.hidden_layer_ids)
        vision = self.options.vision
        if vision is not None:
            self.vision_modules = VisionModules.load_or_init(folder, vision, self.head.config.hidden_size)
            logger.info("sagespec: vision drafter %r: %s", self.options.drafter, vision)
            if vision.prune_by == "attention":   # read at the text model's middle layer (attention_saliency)
                self.saliency_layer_name = lm.model.layers[config.num_hidden_layers // 2].self_attn.attn.layer_name

    def _keep_logits_hidden(self, target_model) -> None:
        """The runner computes logits from the final hidden states of the rows it samples; keep
        them for acceptance rules that read them (no extra forward)."""
        original = target_model.compute_logits

        def compute_logits(hidden_states, *args, **kwargs):
            self.logits_hidden = hidden_states
            return original(hidden_states, *args, **kwargs)
        target_model.compute_logits = compute_logits

    # ---- the proposer contract -------------------------------------------------------------
    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None,
                **_unused) -> list[list[int]]:
        with self.times("drafting"):
            return self._propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)

    def _propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu) -> list[list[int]]:
        view, self.step_view = self.step_view, None
        if view is None or len(view.requests) != len(sampled_token_ids):
            raise RuntimeError("sagespec: the runner hook did not describe this step; the plugin's "
                               "patches are not installed in this worker")
        live = {r.req_id for r in view.requests}
        for gone in set(self.requests) - live:
            del self.requests[gone]
        self.trees = {}
        drafts = []
        for i, req in enumerate(view.requests):
            state = self._state(req.req_id)
            self._commit_features(state, req)
            if req.images is not None and state.images is None and state.steps == 0:
                state.images = self._with_saliency(req.req_id, req.images)
            if not sampled_token_ids[i] or req.mode == "off":   # prefill still running, or no speculation
                drafts.append([])
                continue
            n_tokens = int(num_tokens_no_spec[i])
            state.policy.observe(StepStats(shape=state.last_shape, num_nodes=state.last_drafted,
                                           accepted=len(sampled_token_ids[i]) - 1,
                                           target_entropy=req.entropy if req.entropy is not None else 0.0))
            room = self.max_model_len - n_tokens - 1
            if room < 1:
                drafts.append([])
                continue
            shape = state.policy.plan(DecodeState(step=state.steps, context_len=n_tokens))
            if req.mode == "vllm_chain" or shape.budget > room or not self.trees_allowed:
                shape = chain_of(shape, room)
            tokens = torch.from_numpy(token_ids_cpu[i, :n_tokens].astype("int64"))
            if req.has_images and state.images is None and not state.warned_images:
                state.warned_images = True
                if self.options.vision is not None:
                    logger.warning("sagespec: request %s: its image rows were not in the runner's encoder cache "
                                   "when drafting began; drafting from its text", req.req_id)
            ctx = DraftContext(tokens, state.features, state.images)
            tree = state.drafter.propose(ctx, shape, GREEDY, self.rng)
            flat = tree.tokens[1:].tolist()
            if req.mode == "ours":
                self.trees[req.req_id] = tree
            state.last_shape, state.last_drafted, state.steps = shape, len(flat), state.steps + 1
            self.stats.record(shape, len(flat), with_images=state.images is not None)
            if state.steps == 1 and state.images is not None:   # its first proposal
                self.stats.rows_dropped.append(state.drafter.dropped)
            drafts.append(flat)
        return drafts

    def _with_saliency(self, req_id: str, images):
        """Attention pruning needs the target's attention; when the prefill gave none (another
        platform, or the rows arrived after the prompt's last step) rows are scored by embedding."""
        vision = self.options.vision
        if vision.prune_by != "attention" or images.saliency is not None:
            return images
        logger.warning("sagespec: request %s: no target attention over its image rows was read; pruning them "
                       "by embedding saliency", req_id)
        scores = torch.cat([embedding_saliency(images.embeds[rows]) for rows in images.row_slices()])
        return ImageInputs(images.spans, images.embeds, scores)

    def _state(self, req_id: str) -> RequestState:
        state = self.requests.get(req_id)
        if state is None:
            if self.options.vision is not None:  # shared weights, own cache
                drafter = VisionDrafter(copy.copy(self.head), self.options.vision, self.vision_modules)
            elif self.options.drafter == "eagle":
                drafter = EagleDrafter(copy.copy(self.head))  # shared weights, own cache
            elif self.options.drafter == "draft_model":
                drafter = DraftModelDrafter(HFTreeLM(self.draft_lm))  # shared weights, own cache
            else:
                drafter = NgramDrafter(**self.options.drafter_options)
            drafter.begin()
            state = self.requests[req_id] = RequestState(self.options.make_policy(), drafter)
        return state

    def _commit_features(self, state: RequestState, req: RequestStep) -> None:
        if req.committed_features is None or self.head is None:
            return
        new = req.committed_features.to(self.head.fc.weight.dtype)
        kept = state.features[: req.start_position] if state.features is not None else new[:0]
        state.features = torch.cat([kept, new])
