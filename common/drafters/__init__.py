"""Drafters: one protocol (`begin`, `propose -> DraftTree`, `needs`), several sources of drafts."""

from .base import DraftContext, Drafter, DrafterNeeds, ImageInputs
from .draft_model import DraftModelDrafter, check_shared_vocabulary
from .eagle import EagleDrafter
from .eagle_head import EagleHead, EagleHeadConfig
from .lookup import LOOKUP_DRAFTERS, check_lookup_options, lookup_drafters
from .ngram import NgramDrafter
from .suffix import SuffixDrafter, suffix_drafters
from .suffix_cache import SuffixCache
from .tree_lm import TreeLM
from .vision import VISION_PRESETS, VisionConfig, VisionDrafter, VisionModules

DRAFTER_NAMES = ("ngram", "suffix", "draft_model", "eagle", *VISION_PRESETS)

__all__ = [
    "DRAFTER_NAMES",
    "LOOKUP_DRAFTERS",
    "VISION_PRESETS",
    "DraftContext",
    "DraftModelDrafter",
    "Drafter",
    "DrafterNeeds",
    "EagleDrafter",
    "EagleHead",
    "EagleHeadConfig",
    "ImageInputs",
    "NgramDrafter",
    "SuffixCache",
    "SuffixDrafter",
    "TreeLM",
    "VisionConfig",
    "VisionDrafter",
    "VisionModules",
    "check_lookup_options",
    "check_shared_vocabulary",
    "lookup_drafters",
    "suffix_drafters",
]
