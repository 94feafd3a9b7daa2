"""What each model family adds to the loop, one task per module: the contract (``base.py``), the pixel U-Net's DDPM
(``ddpm.py``), MaskGIT (``maskgit.py``), the latent models (``dit.py``, ``flow_matching.py``, the same DiT by flow
matching, and ``masked_latent.py`` with ``givt.py`` and ``mar.py``) sharing ``latent_tokenizer.py`` (a frozen
tokenizer's latents and statistics), and the tokenizers (``vq_tokenizer.py``, ``kl_tokenizer.py``)."""

from .base import TrainingTask
from .ddpm import DDPMTask
from .dit import DiTTask
from .flow_matching import FlowMatchingDiTTask
from .givt import GIVTTask
from .kl_tokenizer import KLTask
from .mar import MARTask
from .maskgit import MaskGITTask
from .vq_tokenizer import VQTask

__all__ = ["DDPMTask", "DiTTask", "FlowMatchingDiTTask", "GIVTTask", "KLTask", "MARTask", "MaskGITTask",
           "TrainingTask", "VQTask"]
