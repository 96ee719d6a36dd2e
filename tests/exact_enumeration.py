"""Exact output distributions of randomised code, by enumerating every random outcome.

`enumerate_outcomes(fn)` runs fn(rng) once per path through its random choices, where
rng.accept(p) branches into True (p) and False (1 - p) and rng.choice(probs) into every index with
non-zero mass. It returns [(probability, fn's result)] over all paths; probabilities sum to 1.
"""

from __future__ import annotations


class _Exhausted(Exception):
    pass


class ScriptedRandom:
    def __init__(self, script):
        self.script = list(script)
        self.pos = 0
        self.prob = 1.0
        self.branches = []  # per decision: list of (outcome, probability)

    def _decide(self, options):
        if self.pos < len(self.script):
            k = self.script[self.pos]
        else:
            k = 0
            self.branches.append(options)
        outcome, p = options[k]
        self.prob *= p
        self.pos += 1
        return outcome

    def accept(self, prob: float) -> bool:
        prob = min(1.0, max(0.0, float(prob)))
        options = [(o, p) for o, p in ((True, prob), (False, 1.0 - prob)) if p > 0]
        return self._decide(options)

    def choice(self, probs) -> int:
        probs = probs.double()
        probs = probs / probs.sum()
        options = [(i, float(p)) for i, p in enumerate(probs.tolist()) if p > 0]
        return self._decide(options)


def enumerate_outcomes(fn):
    out = []
    stack = [[]]
    while stack:
        script = stack.pop()
        rng = ScriptedRandom(script)
        result = fn(rng)
        # every decision past the script took option 0; queue the siblings of each
        base = len(script)
        for j, options in enumerate(rng.branches):
            prefix = script + [0] * j
            for k in range(1, len(options)):
                stack.append(prefix + [k])
        del base
        out.append((rng.prob, result))
    return out
