"""The reference speculative decoding loop (batch 1): the oracle the engine plugins are compared with.

    prefill the prompt -> first token
    repeat: policy.plan -> drafter.propose -> one target forward over the tree (tree mask,
            depth positions) -> verify -> commit accepted KV contiguously -> policy.observe
Without a drafter every tree is the root alone: plain decoding through the same code.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import warnings
from dataclasses import dataclass, field

import torch

from sagespec.common.drafters import Drafter
from sagespec.common.drafters.tree_lm import causal_extension_mask
from sagespec.common.params import ConfigError
from sagespec.common.policies import ChainPolicy, TreePolicy, TreeShape
from sagespec.common.random_source import TorchRandom
from sagespec.common.sampling import SamplingParams, entropy
from sagespec.common.sizing import Sizer, profile_sizes
from sagespec.common.speculator import DraftRequest, Speculator, VerifyCheck
from sagespec.common.tree import DraftTree
from sagespec.common.verify import get_rule, rule_needs_hidden
from sagespec.common.verify.acceptance import Acceptance
from sagespec.plugins._hf_tree_lm import HFTreeLM
from sagespec.plugins.transformers.multimodal import ImagePrompt

REQUEST = "request"  # the runtime decodes one request at a time
PROFILE_CONTEXT = 64  # cached tokens the startup profile's forwards attend to
PROFILE_REPEATS = 3


class TextOnlyDraftWarning(UserWarning):
    """An image request is drafted by a drafter that cannot see images."""


@dataclass
class GenerationResult:
    """`steps` counts target forwards, the prompt's prefill included (it emits the first token);
    `accepted_per_step[i]` is the number of tokens step i emitted (bonus included), so
    sum(accepted_per_step) == len(tokens). `shapes`/`entropies` are per verify step."""

    tokens: list[int]
    steps: int
    accepted_per_step: list[int]
    seconds: float
    acceptance: str  # the acceptance rule's name
    lossless: bool  # False when a lossy rule produced it: the output may differ from the target's
    acceptance_options: dict = field(default_factory=dict)
    shapes: list[TreeShape] = field(default_factory=list)
    nodes_per_step: list[int] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    draft_seconds: float = 0.0  # time spent drafting (the speculator's draft calls)
    drafter_report: dict | None = None  # what a drafter that reports (a cascade's router) said at the end

    @property
    def mean_accepted_length(self) -> float:
        """tau: tokens emitted per verify step (the prefill excluded), bonus included."""
        verify_steps = self.accepted_per_step[1:]
        return sum(verify_steps) / len(verify_steps) if verify_steps else float("nan")


class SpeculativeGenerator:
    def __init__(
        self,
        target: HFTreeLM,
        drafter: Drafter | None = None,
        policy: TreePolicy | None = None,
        acceptance: str = "auto",
        acceptance_options: dict | None = None,
        eos_token_ids=(),
        strict_multimodal: bool = False,
        sizer: Sizer | None = None,
    ):
        """`strict_multimodal`: refuse image requests a text-only drafter would draft (by default
        they are drafted from the text alone, with a TextOnlyDraftWarning). `sizer`: cost-aware
        sizing (budget "auto"), kept across requests; `profile_latency` measures its model."""
        self.target = target
        self.sizer = sizer
        self.strict_multimodal = strict_multimodal
        self.drafter = drafter
        self.policy = policy or ChainPolicy()
        self.acceptance = acceptance
        self.acceptance_options = dict(acceptance_options or {})
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self.needs_hidden = bool(drafter is not None and drafter.needs.hidden_states)
        if self.needs_hidden and tuple(target.hidden_layer_ids) != tuple(drafter.needs.hidden_layer_ids):
            raise ValueError(
                f"drafter {drafter.name!r} needs hidden layers {drafter.needs.hidden_layer_ids}; "
                f"the target wrapper provides {target.hidden_layer_ids}"
            )

    @torch.no_grad()
    def profile_latency(self, max_tokens: int) -> dict:
        """The startup profile: median seconds of a forward over 1, 2, 4 .. max_tokens tokens after
        PROFILE_CONTEXT cached ones, into the sizer's latency model. Returns {tokens: seconds}."""
        if self.sizer is None:
            raise ValueError("profile_latency needs a sizer (budget 'auto')")
        self.target.truncate(0)
        context = torch.zeros(PROFILE_CONTEXT, dtype=torch.long)
        self.target.forward(context, torch.arange(PROFILE_CONTEXT), causal_extension_mask(0, PROFILE_CONTEXT))
        measured = {}
        for n in profile_sizes(max_tokens):
            tokens = torch.zeros(n, dtype=torch.long)
            positions = torch.arange(PROFILE_CONTEXT, PROFILE_CONTEXT + n)
            mask = causal_extension_mask(PROFILE_CONTEXT, n)
            seconds = []
            for _ in range(PROFILE_REPEATS + 1):  # the first run warms up
                start = time.perf_counter()
                self.target.forward(tokens, positions, mask)
                seconds.append(time.perf_counter() - start)
                self.target.truncate(PROFILE_CONTEXT)
            measured[n] = statistics.median(seconds[1:])
            self.sizer.latency.observe_profile(n, measured[n])
        self.target.truncate(0)
        return measured

    def _forward(self, tokens, positions, mask, acceptance: str, embeds=None):
        """(logits, the drafter's features or None, last hidden states or None)."""
        if rule_needs_hidden(acceptance):
            return self.target.forward_with_last_hidden(
                tokens, positions, mask, with_hidden=self.needs_hidden, inputs_embeds=embeds
            )
        if self.needs_hidden:
            return (*self.target.forward(tokens, positions, mask, with_hidden=True, inputs_embeds=embeds), None)
        return self.target.forward(tokens, positions, mask, inputs_embeds=embeds), None, None

    def _check_image_request(self) -> bool:
        """Whether the drafter is fed the request's images."""
        if self.drafter is None or self.drafter.needs.multimodal:
            return self.drafter is not None
        message = (
            f"drafter {self.drafter.name!r} cannot see images: this image request is drafted from its text "
            "alone (fewer drafts will be accepted; the output is unaffected). Vision-aware drafters: "
            "vispec, dream, vision-prune"
        )
        if self.strict_multimodal:
            raise ConfigError(message + "; strict multimodal mode refuses it")
        warnings.warn(message, TextOnlyDraftWarning, stacklevel=3)
        return False

    def _prefill(self, prompt, acceptance: str, image_prompt: ImagePrompt | None, feed_images: bool):
        """The prompt's forward: (logits, features, last hidden, the drafter's ImageInputs or None)."""
        n = prompt.numel()
        embeds = None if image_prompt is None else image_prompt.embeds

        def run():
            return self._forward(prompt, torch.arange(n), causal_extension_mask(0, n), acceptance, embeds)

        if not feed_images:
            return (*run(), None)
        # The target's attention from the prompt's last position at its middle layer scores the image rows.
        layer = self.target.model.config.get_text_config().num_hidden_layers // 2
        out, attention = self.target.last_row_attention(layer, run)
        images = image_prompt.images
        return (*out, dataclasses.replace(images, saliency=attention[images.positions].float().cpu()))

    @torch.no_grad()
    def generate(
        self,
        prompt_ids,
        max_new_tokens: int,
        sampling: SamplingParams = SamplingParams(),
        seed: int = 0,
        acceptance: str | None = None,
        acceptance_options: dict | None = None,
        image_prompt: ImagePrompt | None = None,
    ) -> GenerationResult:
        """`acceptance`/`acceptance_options` override the generator's rule for this request. An
        `image_prompt` (then `prompt_ids` is None) brings the prompt's embeddings with images."""
        if acceptance is None:
            acceptance = self.acceptance
            acceptance_options = self.acceptance_options if acceptance_options is None else acceptance_options
        acceptance_options = dict(acceptance_options or {})
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
        if image_prompt is not None:
            if prompt_ids is not None:
                raise ValueError("give prompt_ids or image_prompt, not both")
            prompt_ids = image_prompt.input_ids
        feed_images = image_prompt is not None and self._check_image_request()
        prompt = torch.as_tensor(list(prompt_ids), dtype=torch.long)
        if prompt.numel() < 1:
            raise ValueError("the prompt must hold at least one token")
        get_rule(acceptance, sampling)  # fail before any work on a bad rule
        rule = Acceptance(acceptance, acceptance_options)
        speculator = Speculator(
            lambda: self.policy, (lambda: self.drafter) if self.drafter is not None else None, rule, self.sizer
        )
        rng = TorchRandom(seed)
        start = time.perf_counter()
        self.target.truncate(0)
        state = speculator.state(REQUEST)  # the drafter's begin()

        logits, feats, last, images = self._prefill(prompt, acceptance, image_prompt, feed_images)
        first = rule.verify(
            DraftTree.root_only(int(prompt[-1])), logits[-1:], sampling, rng, None if last is None else last[-1:]
        )
        tokens = prompt.tolist() + [first.bonus]
        result = GenerationResult(
            tokens=[first.bonus],
            steps=1,
            accepted_per_step=[1],
            seconds=0.0,
            acceptance=acceptance,
            lossless=rule.lossless,
            acceptance_options=acceptance_options,
        )
        state.features, state.images = feats, images
        speculator.observe(REQUEST, 0, float(entropy(logits[-1])))

        while len(result.tokens) < max_new_tokens and result.tokens[-1] not in self.eos:
            prefix = self.target.length
            draft_start = time.perf_counter()
            tree = speculator.draft([DraftRequest(REQUEST, torch.tensor(tokens, dtype=torch.long), sampling, rng)])[0]
            forward_start = time.perf_counter()
            result.draft_seconds += forward_start - draft_start
            logits, hidden, last = self._forward(
                tree.tokens, tree.positions(prefix), tree.attention_mask(prefix), acceptance
            )
            forward_seconds = time.perf_counter() - forward_start
            verdict = speculator.verify([tree], logits, [0], [VerifyCheck(sampling, rng, last)])[0]
            accepted = verdict.accepted
            self.target.commit(prefix, accepted.nodes)
            if state.features is not None:
                speculator.commit_features(REQUEST, hidden[list(accepted.nodes)])
            tokens.extend(verdict.emitted)
            kept = 0
            for tok in verdict.emitted:
                if len(result.tokens) >= max_new_tokens or (result.tokens and result.tokens[-1] in self.eos):
                    break
                result.tokens.append(tok)
                kept += 1
            speculator.observe(REQUEST, accepted.num_drafted_accepted, verdict.entropy, verdict.emitted)
            if self.sizer is not None:  # the verify forward, and what the step spent around it
                self.sizer.latency.observe_step(tree.num_nodes, forward_seconds, trees=tree.num_drafted > 0)
                self.sizer.latency.observe_overhead(time.perf_counter() - forward_start - forward_seconds)
            result.steps += 1
            result.accepted_per_step.append(kept)
            result.shapes.append(state.last_shape)
            result.nodes_per_step.append(tree.num_drafted)
            result.entropies.append(verdict.entropy)
        if self.drafter is not None and hasattr(self.drafter, "report"):
            result.drafter_report = self.drafter.report()
        speculator.retain(())  # the request is over (a suffix drafter caches it)
        result.seconds = time.perf_counter() - start
        return result
