"""AutoJudge mining finds a planted important token and skips planted unimportant ones; the
judge trainer separates what it is given and writes a file the judge rule loads."""

import numpy as np
import pytest
import torch

from sagespec.common.judge_tasks import SPLITS, arithmetic_correct, arithmetic_items, arithmetic_settled, split_of
from sagespec.common.params import ConfigError
from sagespec.common.training.judge_mining import mine_prompt
from sagespec.common.training.judge_trainer import train_judge
from sagespec.common.verify import load_judge

# A planted task: the target always writes CANON after the prompt, position by position, whatever
# was swapped in before; the outcome is right iff response position 2 holds 42. The drafter
# guesses CANON except at positions 0 and 4 (harmless) and 2 (the answer).
PROMPT = [100, 101]
CANON = [10, 11, 42, 12, 13, 14]
WRONG = {0: 20, 2: 43, 4: 30}


def draft_all(ids):
    guesses = [-1] * len(PROMPT)
    for t in range(len(ids) - len(PROMPT)):
        guesses.append(WRONG.get(t, CANON[t]))
    return guesses


def regenerate(ids, max_new, until=None):
    start = len(ids) - len(PROMPT)
    out = []
    for token in CANON[start : start + max_new]:
        out.append(token)
        if until is not None and until(out):
            break
    return out


def hidden_at(ids):
    return torch.tensor([float(len(ids)), float(ids[-1])])


def test_mining_finds_the_planted_important_token():
    mined = mine_prompt(
        PROMPT,
        list(CANON),
        draft_all,
        regenerate,
        hidden_at,
        lambda r: len(r) > 2 and r[2] == 42,
        max_new_tokens=len(CANON),
    )
    assert mined.correct
    assert [(m.position, m.draft_token, m.important) for m in mined.mismatches] == [
        (0, 20, False),
        (2, 43, True),
        (4, 30, False),
    ]
    assert mined.final == [20, 11, 42, 12, 30, 14]  # harmless swaps kept, the answer restored
    # the hidden state is read at the draft token: prompt + response so far + the guess
    assert mined.mismatches[1].hidden.tolist() == [len(PROMPT) + 3.0, 43.0]


def test_mining_with_no_mismatch_costs_no_regeneration():
    calls = []
    mined = mine_prompt(
        PROMPT,
        list(CANON),
        lambda ids: [-1] * 2 + CANON[: len(ids) - 2],
        lambda ids, n: calls.append(1) or [],
        hidden_at,
        lambda r: True,
        len(CANON),
    )
    assert mined.mismatches == [] and calls == []


def test_mismatches_after_a_settled_prefix_cost_no_regeneration():
    # The outcome is settled once position 2 is written: the swap at 4 is labelled unimportant
    # without a regeneration, the swaps at 0 and 2 are still tried.
    # A regeneration stops where the outcome settles; a kept swap's response is then completed.
    calls = []

    def counted(ids, n, until=None):
        new = regenerate(ids, n, until)
        calls.append((len(ids) - len(PROMPT), len(new)))
        return new

    mined = mine_prompt(
        PROMPT,
        list(CANON),
        draft_all,
        counted,
        hidden_at,
        lambda r: len(r) > 2 and r[2] == 42,
        len(CANON),
        settled=lambda r: len(r) > 2,
    )
    assert [(m.position, m.important) for m in mined.mismatches] == [(0, False), (2, True), (4, False)]
    # swap at 0: stopped after 2 tokens, completed with 3; swap at 2 is already settled
    assert calls == [(1, 2), (3, 3)]
    assert mined.final == [20, 11, 42, 12, 13, 14]  # nothing swapped after the outcome settled


@pytest.mark.parametrize(
    "text,settled",
    [
        ("3 + 4 = 7.", True),
        ("3 + 4 = 7", False),
        ("3 + 4 = 1", False),
        ("= -2 ", True),
        ("7.", False),
        ("The answer is 7. So 3 + 4 = ", False),
        ("3 + 4 = 12\n", True),
    ],
)
def test_arithmetic_settles_when_the_stated_answer_has_ended(text, settled):
    assert arithmetic_settled(text) is settled
    if settled:  # no continuation changes the answer
        item = arithmetic_items("train")[0]
        assert arithmetic_correct(item, text) == arithmetic_correct(item, text + "0 = 5, = 9")


def test_judge_training_separates_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)

    def split(n):
        y = rng.integers(0, 2, n)
        x = rng.normal(size=(n, 6))
        x[:, 2] += 3.0 * y  # one informative direction
        return x, y

    judge = train_judge(*split(300), *split(120), provenance={"task": "synthetic"})
    assert judge.provenance["validation_roc_auc"] > 0.95
    assert judge.thresholds["recall_0.99"] <= judge.thresholds["recall_0.5"]
    judge.save(tmp_path / "j.json")
    loaded = load_judge(tmp_path / "j.json")
    x = torch.tensor([[0.0, 0, 5.0, 0, 0, 0], [0.0, 0, -2.0, 0, 0, 0]])  # far on either side
    p = loaded.probability(x)
    assert p[0] > 0.9 > 0.1 > p[1]
    assert loaded.provenance["task"] == "synthetic" and loaded.hidden_size == 6


def test_judge_training_refuses_one_class():
    x = np.zeros((10, 3))
    with pytest.raises(ConfigError, match="only one class"):
        train_judge(x, np.zeros(10), x, np.array([0, 1] * 5))


def test_arithmetic_task_splits_are_disjoint_and_checked():
    keys = {s: {it.id.split("#")[0] for it in arithmetic_items(s)} for s in SPLITS}
    assert all(keys[a].isdisjoint(keys[b]) for a in SPLITS for b in SPLITS if a < b)
    assert all(split_of(k) == s for s in SPLITS for k in keys[s])
    item = arithmetic_items("test")[0]
    right, wrong = item.answer, str(int(item.answer) + 1)
    assert arithmetic_correct(item, f"The answer is {right}.")
    assert arithmetic_correct(item, f"2 + 2 = {right}, so 9 + 9 = 18")
    assert not arithmetic_correct(item, f"{wrong} or maybe {right}")
    assert not arithmetic_correct(item, f"{right} + 1 = {wrong}")
