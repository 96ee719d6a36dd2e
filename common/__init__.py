"""Engine-agnostic speculative decoding core: trees, policies, drafters, verification. Pure torch."""
