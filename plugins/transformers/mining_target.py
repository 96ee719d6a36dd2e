"""A Hugging Face target and drafter behind judge mining's four callables (greedy response,
drafter guesses for a whole sequence, last hidden state at a token, task outcome)."""

from __future__ import annotations

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from sagespec.common.drafters import EagleHead
from sagespec.common.training.eagle_ttt import ttt_forward


class MiningTarget:
    def __init__(self, model, tokenizer, eos_ids, head: EagleHead | None = None, draft_model=None):
        if (head is None) == (draft_model is None):
            raise ValueError("mining needs exactly one drafter: an EAGLE head or a draft model")
        self.model, self.tokenizer, self.eos = model, tokenizer, [int(e) for e in eos_ids]
        self.head, self.draft_model = head, draft_model

    @torch.no_grad()
    def regenerate(self, ids: list[int], max_new: int, until=None) -> list[int]:
        """The target's greedy continuation, its end token kept when it stops on one; nothing
        after an end token. `until(continuation so far)` stops it early."""
        if max_new < 1 or (ids and ids[-1] in self.eos):
            return []
        x = torch.tensor([ids])
        stop = None
        if until is not None:
            stop = StoppingCriteriaList([_Until(until, len(ids))])
        out = self.model.generate(
            input_ids=x,
            attention_mask=torch.ones_like(x),
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=self.eos or None,
            pad_token_id=self.eos[0] if self.eos else 0,
            stopping_criteria=stop,
        )
        new = out[0, len(ids) :].tolist()
        ends = [j for j, t in enumerate(new) if t in self.eos]
        return new[: ends[0] + 1] if ends else new

    @torch.no_grad()
    def hidden_at(self, ids: list[int]) -> torch.Tensor:
        out = self.model.get_decoder()(input_ids=torch.tensor([ids]))
        return out.last_hidden_state[0, -1].float()

    @torch.no_grad()
    def draft_all(self, ids: list[int]) -> list[int]:
        """guess[j]: the drafter's greedy token for position j from ids[:j]; -1 where it has none."""
        x = torch.tensor([ids])
        if self.draft_model is not None:
            pred = self.draft_model(input_ids=x).logits[0].argmax(-1).tolist()
            return [-1] + pred[:-1]
        # The head's step-0 pair i reads the target's features at i and token i+1 and guesses token
        # i+2, as it drafts the first token after a root at inference.
        out = self.model.get_decoder()(input_ids=x, output_hidden_states=True)
        layers = self.head.config.target_layer_ids
        feats = torch.cat([out.hidden_states[i] for i in layers], -1)[:, : len(ids) - 1].float()
        tokens = torch.cat([x[:, 1:], torch.zeros(1, 1, dtype=torch.long)], 1)
        hidden = ttt_forward(self.head, self.head.fuse(feats), tokens, 1)[0]
        pred = self.head.logits(hidden[0]).argmax(-1).tolist()
        return [-1, -1] + pred[: len(ids) - 2]

    def text(self, response: list[int]) -> str:
        return self.tokenizer.decode(response, skip_special_tokens=True)


class _Until(StoppingCriteria):
    """Stops batch-1 generation once a predicate on the new tokens holds."""

    def __init__(self, until, start: int):
        self.until, self.start = until, start

    def __call__(self, input_ids, scores, **kwargs):
        return torch.tensor([bool(self.until(input_ids[0, self.start :].tolist()))])
