"""Drafters: one protocol (`begin`, `propose -> DraftTree`, `needs`), several sources of drafts."""

from .base import DraftContext, Drafter, DrafterNeeds, ImageInputs
from .cascade import CascadeDrafter, merge_trees
from .draft_model import DraftModelDrafter, check_shared_vocabulary
from .dytc import DyTCRouter
from .eagle import EagleDrafter
from .eagle_head import EagleHead, EagleHeadConfig
from .lookup import LOOKUP_DRAFTERS, check_lookup_options, lookup_drafters
from .medusa import MedusaConfig, MedusaDrafter, MedusaHeads
from .ngram import NgramDrafter
from .self_draft import SelfDrafter, SelfLevel, calibrate_levels, check_fractions, check_skip
from .suffix import SuffixDrafter, suffix_drafters
from .suffix_cache import SuffixCache
from .tree_lm import TreeLM
from .vision import VISION_PRESETS, VisionConfig, VisionDrafter, VisionModules

DRAFTER_NAMES = ("ngram", "suffix", "draft_model", "eagle", "medusa", "self", "cascade", *VISION_PRESETS)
# What a cascade may route among: lookup drafters and the model-fed ones ("self" brings every level).
CASCADE_SOURCES = ("ngram", "suffix", "self", "medusa")

__all__ = [
    "CASCADE_SOURCES",
    "DRAFTER_NAMES",
    "LOOKUP_DRAFTERS",
    "VISION_PRESETS",
    "CascadeDrafter",
    "DraftContext",
    "DraftModelDrafter",
    "Drafter",
    "DrafterNeeds",
    "DyTCRouter",
    "EagleDrafter",
    "EagleHead",
    "EagleHeadConfig",
    "ImageInputs",
    "MedusaConfig",
    "MedusaDrafter",
    "MedusaHeads",
    "NgramDrafter",
    "SelfDrafter",
    "SelfLevel",
    "SuffixCache",
    "SuffixDrafter",
    "TreeLM",
    "VisionConfig",
    "VisionDrafter",
    "VisionModules",
    "calibrate_levels",
    "check_fractions",
    "check_lookup_options",
    "check_shared_vocabulary",
    "check_skip",
    "lookup_drafters",
    "merge_trees",
    "suffix_drafters",
]
