"""Prompt sets and training data for the reference runtime: chat and image prompts, drafter and
vision-drafter training sets."""
