"""Cost-aware sizing: a measured latency model, calibrated acceptance, and the batch's tree sizes."""

from .calibration import AcceptanceCalibration, accepted_path, conditional_scores
from .latency import LatencyModel, profile_sizes
from .sizer import RequestBudget, Sizer

__all__ = [
    "AcceptanceCalibration",
    "LatencyModel",
    "RequestBudget",
    "Sizer",
    "accepted_path",
    "conditional_scores",
    "profile_sizes",
]
