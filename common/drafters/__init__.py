"""Drafters: one protocol (`begin`, `propose -> DraftTree`, `needs`), several sources of drafts."""
from .base import DraftContext, Drafter, DrafterNeeds, ImageInputs
from .draft_model import DraftModelDrafter, check_shared_vocabulary
from .eagle import EagleDrafter
from .eagle_head import EagleHead, EagleHeadConfig
from .ngram import NgramDrafter
from .tree_lm import TreeLM
from .vision import VISION_PRESETS, VisionConfig, VisionDrafter, VisionModules

DRAFTER_NAMES = ("ngram", "draft-model", "eagle", *VISION_PRESETS)

__all__ = ["DRAFTER_NAMES", "DraftContext", "DraftModelDrafter", "Drafter", "DrafterNeeds", "EagleDrafter",
           "EagleHead", "EagleHeadConfig", "ImageInputs", "NgramDrafter", "TreeLM", "VISION_PRESETS", "VisionConfig",
           "VisionDrafter", "VisionModules", "check_shared_vocabulary"]
