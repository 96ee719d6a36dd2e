"""Features for prompt positions vLLM's prefix cache serves: the EAGLE drafter of a second turn gets
the rows its first turn left (the feature store), and they are the rows vLLM computes for those
positions when it runs them (fp32); the output stays plain vLLM's either way."""

import torch
from vllm_lane import engine, greedy_tokens, live_proposer

FIRST_TOKENS = 160  # the first turn and its answer span more than one of vLLM's KV blocks


def stored_features(store, tokens):
    """The store's rows of the stored sequence that starts with `tokens`."""
    for kept, rows in store.entries.values():
        if kept[: len(tokens)].tolist() == tokens[: kept.numel()]:
            return rows
    raise AssertionError("the request's features were not stored")


def test_second_turn_drafts_from_the_first_turns_features(smollm2_folder, mtbench_prompts):
    spec = {"method": "sage", "drafter": "eagle", "policy": "chain", "num_speculative_tokens": 4}
    with engine(smollm2_folder, spec=spec, max_num_seqs=1, enable_prefix_caching=True) as llm:
        store = live_proposer().speculator.feature_store
        first_prompt = mtbench_prompts[0]
        (answer,) = greedy_tokens(llm, [first_prompt], FIRST_TOKENS)
        second_prompt = first_prompt + answer + mtbench_prompts[1]
        cached = greedy_tokens(llm, [second_prompt], 16)
        served = store.served
        with_cache = stored_features(store, second_prompt).clone()
        # the same turn with every position run by vLLM: no prefix cache, nothing stored
        llm.reset_prefix_cache()
        store.entries.clear()
        store.positions = 0
        ran = greedy_tokens(llm, [second_prompt], 16)
        computed = stored_features(store, second_prompt)
    assert cached == ran
    assert served >= 128, f"the store served {served} positions of the second turn"
    similarity = torch.nn.functional.cosine_similarity(with_cache[:served].float(), computed[:served].float(), dim=-1)
    assert similarity.min() > 0.999, f"served rows differ from vLLM's own (cosine {similarity.min():.5f})"
