"""Drafter training (pure torch): EAGLE-3-style heads with training-time test, AdaSPEC selection."""
