"""The embedded reference runtime: speculative generation over a Hugging Face causal LM."""
