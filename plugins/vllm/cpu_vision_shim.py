"""Lets vLLM's CPU build load LLaVA-family models without torchvision.

vLLM's llava.py imports pixtral.py, which imports one helper (`_num_image_tokens`) from transformers'
torchvision-backed `image_processing_pixtral`; with no CPU torchvision installable, that import fails
and every LLaVA model is refused at inspection. transformers ships the same helper in the PIL-backed
`image_processing_pil_pixtral`. When (and only when) torchvision is missing, the torchvision module
name is pointed at the PIL module, so the import resolves; nothing else is changed.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys

logger = logging.getLogger(__name__)
TORCHVISION_MODULE = "transformers.models.pixtral.image_processing_pixtral"
PIL_MODULE = "transformers.models.pixtral.image_processing_pil_pixtral"


def install() -> bool:
    """True when the alias was installed (torchvision absent and the PIL module has the helper)."""
    if TORCHVISION_MODULE in sys.modules or importlib.util.find_spec("torchvision") is not None:
        return False
    try:
        pil = importlib.import_module(PIL_MODULE)
    except ImportError:
        return False
    if not hasattr(pil, "_num_image_tokens"):
        return False
    sys.modules[TORCHVISION_MODULE] = pil
    logger.info("sagespec: no torchvision; %s resolves to %s (CPU LLaVA models)", TORCHVISION_MODULE, PIL_MODULE)
    return True
