"""Drafters: one protocol (`begin`, `propose -> DraftTree`, `needs`), several sources of drafts."""
from .base import DraftContext, Drafter, DrafterNeeds
from .draft_model import DraftModelDrafter, check_shared_vocabulary
from .eagle import EagleDrafter
from .eagle_head import EagleHead, EagleHeadConfig
from .ngram import NgramDrafter
from .tree_lm import TreeLM

DRAFTER_NAMES = ("ngram", "draft-model", "eagle")

__all__ = ["DRAFTER_NAMES", "DraftContext", "DraftModelDrafter", "Drafter", "DrafterNeeds", "EagleDrafter",
           "EagleHead", "EagleHeadConfig", "NgramDrafter", "TreeLM", "check_shared_vocabulary"]
