"""The `sagespec` command line over the reference runtime: generate, bench, train-drafter,
mine-judge, train-judge."""

from sagespec.plugins.transformers.cli.main import main

__all__ = ["main"]
