"""Concept probes: one classifier per concept variable, the instrument every compgen model is judged by.

Two kinds (``probe_type``): Paper A's linear probes on flattened RGB pixels (Okawa et al. 2023, Appendix A.5),
applied after centering the object (see :mod:`compgen.evaluation.preprocessing`), and a small CNN per concept
(3 conv layers, as Paper A's CelebA probes). The default instrument for the shapes data is the CNN trained by
:func:`train_shapes_probes` on the dataset's whole colour and size ranges with generator-like corruptions, so that
grey backgrounds, noise and soft edges do not change its verdict (``docs/evaluation.md``). Probes are a diffusers
``ModelMixin``: ``save_pretrained`` / ``from_pretrained`` / ``push_to_hub`` (safetensors + config).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from safetensors import SafetensorError
from torch import nn
from tqdm.auto import tqdm

from ..atomic_io import atomic_directory
from ..concepts import ConceptGraph, ConceptSpace
from ..eval_mode import eval_mode
from ..images import ImageInput, to_float_images
from .corruptions import ProbeAugmentation
from .objects import ObjectCheck, estimate_background
from .preprocessing import center_objects

logger = logging.getLogger(__name__)

PROBE_TYPES = ("linear", "cnn")


class _ConvProbe(nn.Sequential):
    """Three stride-2 conv layers (GELU), global average pooling and a linear head."""

    def __init__(self, num_classes: int, channels: int) -> None:
        super().__init__(
            nn.Conv2d(3, channels, 3, stride=2, padding=1),
            nn.GELU(),
            nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1),
            nn.GELU(),
            nn.Conv2d(2 * channels, 4 * channels, 3, stride=2, padding=1),
            nn.GELU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(4 * channels, num_classes),
        )


class ConceptProbes(ModelMixin, ConfigMixin):
    """One classifier per concept variable of a concept space.

    Args:
        concept_space: ``ConceptSpace.to_dict()``, the ordered ``{variable: [values]}`` (stored in the config as
            ordered ``[name, values]`` pairs).
        image_size: side of the square input images in pixels.
        probe_type: ``"linear"`` (on flattened pixels, Paper A) or ``"cnn"`` (3 conv layers per concept).
        center_objects: center each object on its ink centroid before classifying (needed by linear probes
            when object position is random).
        blur_sigma: width of the light Gaussian blur applied after centering (0 disables it).
        cnn_channels: width of the first conv layer of the CNN probes.
        subtract_background: classify the image minus its estimated background colour (the border median), so
            that a grey or tinted background, as half-trained generators draw, reads like white. Off keeps the
            raw pixels (Paper A's linear probes; probes saved before this option existed).
        isolate_object: before centering, keep only the object found by the one-object check
            (:func:`~compgen.evaluation.objects.check_objects`) and paint specks elsewhere over with the background.
        object_scale: the object's scale in the frame of the images the probes judge
            (:attr:`compgen.shapes.RenderConfig.object_scale`); the pixel scorer and the typicality check that go
            with them are calibrated at it.
    """

    @classmethod
    def load_checked(cls, path: str | os.PathLike, what: str = "--probes_path") -> ConceptProbes:
        """``from_pretrained(path)``, after checking that ``path`` holds image probes (clip probes would load as
        randomly initialised image probes)."""
        config_file = Path(path) / "config.json"
        saved = json.loads(config_file.read_text()) if config_file.is_file() else {}
        if saved.get("_class_name") not in (None, cls.__name__):
            raise ValueError(f"{what} {path} holds {saved['_class_name']!r}, not {cls.__name__}: images are scored "
                             "by image probes (python -m compgen.evaluation.train_probes)")
        return cls.from_pretrained(path)

    @register_to_config
    def __init__(
        self,
        concept_space: dict[str, list[str]] | list[list],
        image_size: int = 28,
        probe_type: str = "linear",
        center_objects: bool = True,
        blur_sigma: float = 0.0,
        cnn_channels: int = 16,
        subtract_background: bool = False,
        isolate_object: bool = False,
        object_scale: float = 1.0,
    ) -> None:
        super().__init__()
        from ..shapes import check_object_scale

        check_object_scale(object_scale)
        if probe_type not in PROBE_TYPES:
            raise ValueError(f"probe_type must be one of {PROBE_TYPES}, got {probe_type!r}")
        if image_size < 8:
            raise ValueError(f"image_size must be at least 8 pixels, got {image_size}")
        self.space = ConceptSpace.from_dict(concept_space)
        # Saved configs are written with sorted keys, which would reorder a dict; keep the variable order as
        # a list of [name, values] pairs (``ConceptSpace.from_dict`` reads both forms).
        self.register_to_config(concept_space=self.space.to_pairs())
        in_features = 3 * image_size * image_size
        heads = {}
        for variable in self.space.variables:
            if probe_type == "linear":
                # Zero init: pixels that never vary in training (the background) keep zero weight, so noise
                # there in generated images cannot move the logits.
                heads[variable.name] = nn.Linear(in_features, variable.num_values)
                nn.init.zeros_(heads[variable.name].weight)
                nn.init.zeros_(heads[variable.name].bias)
            else:
                heads[variable.name] = _ConvProbe(variable.num_values, cnn_channels)
        self.heads = nn.ModuleDict(heads)

    def preprocess(self, images: ImageInput, objects: ObjectCheck | None = None) -> torch.Tensor:
        """The fixed (untrained) input transform: float NCHW in [0, 1], optionally centered, on the probe device.
        ``objects``: the one-object check of these images, when the caller already ran it (used by
        ``isolate_object``)."""
        x = to_float_images(images).to(self.device)
        size = self.config.image_size
        if tuple(x.shape[-2:]) != (size, size):
            raise ValueError(f"probes expect {size}x{size} images, got {tuple(x.shape[-2:])}")
        if self.config.center_objects:
            x = center_objects(x, blur_sigma=self.config.blur_sigma, isolate=self.config.isolate_object,
                               objects=objects)
        if self.config.subtract_background:
            x = x - estimate_background(x)[:, :, None, None]
        return x

    def classify(self, inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Logits per concept from already preprocessed inputs."""
        x = inputs if self.config.subtract_background else inputs - 0.5
        if self.config.probe_type == "linear":
            x = x.flatten(1)
        return {name: head(x) for name, head in self.heads.items()}

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """Logits ``{concept name: (N, k_v)}`` for float images ``(N, 3, H, W)`` in [0, 1]."""
        return self.classify(self.preprocess(images))

    @torch.no_grad()
    def predict_proba(
        self, images: ImageInput, batch_size: int = 512, objects: ObjectCheck | None = None
    ) -> list[torch.Tensor]:
        """Class probabilities per concept, a list of ``(N, k_v)`` tensors in variable order (on CPU).
        ``objects``: the one-object check of ``images``, when the caller already ran it."""
        chunks: list[list[torch.Tensor]] = [[] for _ in self.space.variables]
        with eval_mode(self):
            for start in range(0, len(images), batch_size):
                stop = start + batch_size
                check = objects.rows(start, stop) if objects is not None else None
                logits = self.classify(self.preprocess(to_float_images(images[start:stop]), objects=check))
                for j, name in enumerate(self.space.names):
                    chunks[j].append(logits[name].float().softmax(dim=-1).cpu())
        if not chunks[0]:
            return [torch.zeros(0, k) for k in self.space.cardinalities]
        return [torch.cat(c) for c in chunks]

    def predict(self, images: ImageInput, batch_size: int = 512) -> torch.Tensor:
        """Predicted value index per concept, a LongTensor ``(N, V)`` in variable order (on CPU)."""
        probabilities = self.predict_proba(images, batch_size=batch_size)
        return torch.stack([p.argmax(dim=-1) for p in probabilities], dim=1)


def fit_probes(
    probes: ConceptProbes,
    images: ImageInput,
    concepts: np.ndarray | torch.Tensor,
    val_fraction: float = 0.1,
    epochs: int = 60,
    lr: float = 3e-3,
    batch_size: int = 128,
    seed: int = 0,
    noise_std: float = 0.0,
    progress: bool = False,
    augmentation: ProbeAugmentation | None = None,
) -> dict[str, float]:
    """Train every probe with Adam and cross-entropy; return per-concept accuracy on a held-out split.

    ``images`` are uint8 NHWC or float NCHW, ``concepts`` the ``(N, V)`` value indices. A random
    ``val_fraction`` of the images is held out (Paper A: 4500 / 500) and scored clean. Without ``augmentation`` the
    fixed input transform (centering) is applied once up front; with it, every training batch is corrupted afresh
    (:class:`~compgen.evaluation.corruptions.ProbeAugmentation`: tinted backgrounds, noise, blur, colour shifts,
    specks, shifts) before the transform, so the probes learn to judge the object and not the rendering quality.
    With ``noise_std`` > 0 training inputs get Gaussian pixel noise with a per-image std drawn from
    ``U(0, noise_std)`` after the transform (it made linear shapes probes less accurate on clean and noisy images
    alike; prefer ``augmentation``).
    """
    targets = torch.as_tensor(np.asarray(concepts), dtype=torch.long)
    if targets.ndim != 2 or targets.shape[1] != probes.space.num_variables:
        raise ValueError(
            f"concepts must be (N, {probes.space.num_variables}) value indices, got shape {tuple(targets.shape)}"
        )
    if len(targets) != len(images):
        raise ValueError(f"got {len(images)} images but {len(targets)} concept rows")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(targets), generator=generator)
    num_val = max(1, int(round(val_fraction * len(targets))))
    val_idx, train_idx = order[:num_val], order[num_val:]

    raw = torch.cat([to_float_images(images[i : i + 1024]) for i in range(0, len(images), 1024)])
    with torch.no_grad():
        inputs = torch.cat([probes.preprocess(raw[i : i + 1024]) for i in range(0, len(raw), 1024)])
    targets = targets.to(probes.device)
    optimizer = torch.optim.Adam(probes.parameters(), lr=lr)
    probes.train()
    for _ in tqdm(range(epochs), desc="training probes", disable=not progress):
        permutation = train_idx[torch.randperm(len(train_idx), generator=generator)]
        for start in range(0, len(permutation), batch_size):
            batch = permutation[start : start + batch_size].to(probes.device)
            if augmentation is not None:
                with torch.no_grad():
                    batch_inputs = probes.preprocess(augmentation(raw[batch.cpu()], generator))
            else:
                batch_inputs = inputs[batch]
            if noise_std > 0:
                scale = torch.rand(len(batch), 1, 1, 1, generator=generator).to(batch_inputs) * noise_std
                noise = torch.randn(batch_inputs.shape, generator=generator).to(batch_inputs)
                batch_inputs = batch_inputs + scale * noise
            logits = probes.classify(batch_inputs)
            loss = sum(F.cross_entropy(logits[name], targets[batch, j]) for j, name in enumerate(probes.space.names))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    probes.eval()
    with torch.no_grad():
        logits = probes.classify(inputs[val_idx.to(probes.device)])
    val_targets = targets[val_idx.to(probes.device)]
    return {
        name: float((logits[name].argmax(dim=-1) == val_targets[:, j]).float().mean())
        for j, name in enumerate(probes.space.names)
    }


def render_probe_data(
    graph_or_space: ConceptGraph | ConceptSpace,
    images_per_class: int,
    image_size: int = 28,
    seed: int = 0,
    size_jitter: float | None = None,
    color_jitter: float | None = None,
    styles: tuple[str, ...] = ("flat",),
    object_scale: float = 1.0,
):
    """Real shapes images of *every* class of the graph (probes may see every composition).

    ``color_jitter`` / ``size_jitter`` set how far colours and scales spread around their class values (default:
    the renderer's +-0.1); :data:`~compgen.shapes.PAPER_COLOR_JITTER` and
    :data:`~compgen.shapes.PAPER_SIZE_JITTER` are the dataset's whole class ranges. ``styles`` names the render
    styles, alternating row by row (:func:`~compgen.shapes.render_reference`).
    """
    from ..shapes import RenderConfig, render_reference

    space = graph_or_space.space if isinstance(graph_or_space, ConceptGraph) else graph_or_space
    nodes = graph_or_space.nodes if isinstance(graph_or_space, ConceptGraph) else space.all_classes()
    classes = np.repeat(np.array(nodes, dtype=np.int64), images_per_class, axis=0)
    defaults = RenderConfig(image_size=image_size)
    return render_reference(
        space, classes, seed=seed, image_size=image_size, styles=styles,
        color_jitter=defaults.color_jitter if color_jitter is None else color_jitter,
        size_jitter=defaults.size_jitter if size_jitter is None else size_jitter, object_scale=object_scale,
    )


PROBE_RECIPES: dict[str, dict[str, float]] = {"cnn": {"epochs": 40, "lr": 3e-3}, "linear": {"epochs": 30, "lr": 1e-2}}
"""Training epochs and learning rate of :func:`train_shapes_probes` per probe type (when not given)."""

DEFAULT_PROBES_VERSION = 5
"""Bumped whenever the recipe of :func:`train_shapes_probes` changes in a way its default arguments do not show (they
are part of the cache key too), so cached default probes are retrained."""


def train_shapes_probes(
    space: ConceptSpace,
    probe_type: str = "cnn",
    image_size: int = 28,
    seed: int = 0,
    images_per_class: int = 600,
    epochs: int | None = None,
    lr: float | None = None,
    batch_size: int = 128,
    val_fraction: float = 0.1,
    progress: bool = False,
    object_scale: float = 1.0,
) -> tuple[ConceptProbes, dict[str, float]]:
    """Train probes for the shapes data on fresh real renders of every class; returns them with validation accuracy.

    ``"cnn"`` (the default instrument): renders in every render style (flat polygons and shaded solids, so that
    one probe judges every shapes dataset) over the dataset's whole colour and size ranges, background
    subtracted, the object isolated and centered, and every training batch corrupted by a
    :class:`~compgen.evaluation.corruptions.ProbeAugmentation` (grey and tinted backgrounds, noise, blur, washed-out
    colours, specks, sub-pixel shifts), so that they judge the objects half-trained generators draw
    (``docs/evaluation.md``: >= 0.98 at every generator-like corruption level). ``"linear"``: Paper A's linear
    probes on centered pixels, trained on clean renders at the renderer's default +-0.1 spread; they cannot
    separate the dataset's whole colour and size ranges linearly (``docs/evaluation.md``).
    """
    from ..shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, REFERENCE_STYLES

    if probe_type not in PROBE_TYPES:
        raise ValueError(f"probe_type must be one of {PROBE_TYPES}, got {probe_type!r}")
    torch.manual_seed(seed)
    if probe_type == "cnn":
        probes = ConceptProbes(space.to_dict(), image_size=image_size, probe_type="cnn", subtract_background=True,
                               isolate_object=True, object_scale=object_scale)
        data = render_probe_data(space, images_per_class, image_size=image_size, seed=seed + 10_000,
                                 color_jitter=PAPER_COLOR_JITTER, size_jitter=PAPER_SIZE_JITTER,
                                 styles=tuple(REFERENCE_STYLES), object_scale=object_scale)
        accuracy = fit_probes(probes, data.images, data.concepts, val_fraction=val_fraction,
                              epochs=epochs or int(PROBE_RECIPES["cnn"]["epochs"]), lr=lr or PROBE_RECIPES["cnn"]["lr"],
                              batch_size=batch_size, seed=seed, augmentation=ProbeAugmentation(), progress=progress)
    else:
        probes = ConceptProbes(space.to_dict(), image_size=image_size, probe_type="linear", object_scale=object_scale)
        data = render_probe_data(space, images_per_class, image_size=image_size, seed=seed + 10_000,
                                 object_scale=object_scale)
        accuracy = fit_probes(probes, data.images, data.concepts, val_fraction=val_fraction,
                              epochs=epochs or int(PROBE_RECIPES["linear"]["epochs"]),
                              lr=lr or PROBE_RECIPES["linear"]["lr"], batch_size=batch_size, seed=seed,
                              progress=progress)
    return probes.eval(), accuracy


def default_probes_cache() -> Path:
    """Where :func:`default_shapes_probes` keeps trained probes: ``$COMPGEN_CACHE/probes``, by default
    ``~/.cache/compgen/probes`` (``$XDG_CACHE_HOME`` is honoured)."""
    root = os.environ.get("COMPGEN_CACHE")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "compgen"
    return Path(root) / "probes"


SHIPPED_PROBES_DIR = Path(__file__).resolve().parent / "default_probes"
"""Default probes that ship with compgen, in the cache's layout: the concept spaces of the shapes builder's configs at
28 px (``default_probes/README.md``). Training them costs about a minute on one CPU core; loading them, milliseconds."""


def default_probes_name(space: ConceptSpace, image_size: int = 28, seed: int = 0, probe_type: str = "cnn",
                        object_scale: float = 1.0) -> tuple[str, str]:
    """The directory name and the full key of the default probes for these arguments: the key holds everything the
    recipe depends on (space, size, seed, type, :data:`DEFAULT_PROBES_VERSION`, the defaults of
    :func:`train_shapes_probes`, :data:`PROBE_RECIPES`, an object scale other than 1), the name a hash of it."""
    if probe_type not in PROBE_TYPES:
        raise ValueError(f"probe_type must be one of {PROBE_TYPES}, got {probe_type!r}")
    parameters = inspect.signature(train_shapes_probes).parameters.items()
    defaults = {name: parameter.default for name, parameter in parameters
                if parameter.default is not inspect.Parameter.empty and name not in ("progress", "object_scale")}
    parts = [space.to_pairs(), image_size, seed, probe_type, DEFAULT_PROBES_VERSION, defaults,
             PROBE_RECIPES[probe_type]]
    framing = ""
    if object_scale != 1.0:  # Paper A's framing keeps the key (and the shipped probes) it had before the option
        parts.append({"object_scale": float(object_scale)})
        framing = f"-scale{float(object_scale):g}"
    key = json.dumps(parts)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"shapes-{probe_type}-{image_size}px{framing}-seed{seed}-{digest}", key


def _saved_probes(path: Path, key: str, probe_class: type[ModelMixin] | None = None) -> ModelMixin | None:
    """The probes saved in ``path`` if they were trained under ``key``, else ``None``."""
    record = path / "probe_training.json"
    if not (path / "config.json").is_file() or not record.is_file():
        return None
    if json.loads(record.read_text()).get("key") != key:
        return None
    return (probe_class or ConceptProbes).from_pretrained(path).eval()


def shipped_cached_or_trained(name: str, key: str, train: Callable[[], tuple[ModelMixin, Any]],
                              probe_class: type[ModelMixin], cache_dir: str | os.PathLike | None = None,
                              what: str = "probes") -> ModelMixin:
    """Probes by ``name``: the copy shipped in :data:`SHIPPED_PROBES_DIR`, else the one cached in ``cache_dir``
    (default :func:`default_probes_cache`), else ``train()`` now (``(probes, validation accuracy)``) and cached
    atomically; each copy is used only if it was trained under ``key`` (the recipe that makes it)."""
    path = Path(cache_dir or default_probes_cache()) / name
    probes = _saved_probes(SHIPPED_PROBES_DIR / name, key, probe_class)  # shipped first: a damaged cache never shadows
    if probes is not None:
        return probes
    try:
        probes = _saved_probes(path, key, probe_class)
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:  # a torn or damaged cached copy
        logger.warning("the cached %s in %s are unreadable (%s: %s): training them again", what, path,
                       type(error).__name__, error)
        shutil.rmtree(path)
    if probes is not None:
        return probes
    logger.info("training %s; cached in %s", what, path)
    probes, accuracy = train()
    try:
        with atomic_directory(path) as tmp:
            probes.save_pretrained(tmp)
            (tmp / "probe_training.json").write_text(json.dumps({"validation_accuracy": accuracy, "key": key}) + "\n")
    except FileExistsError:  # another process cached the same probes meanwhile (the recipe is deterministic)
        pass
    return probes


def default_shapes_probes(
    space: ConceptSpace, image_size: int = 28, seed: int = 0, probe_type: str = "cnn",
    cache_dir: str | os.PathLike | None = None, object_scale: float = 1.0,
) -> ConceptProbes:
    """The default probes for the shapes data (:func:`train_shapes_probes`): shipped, cached, or trained now.

    The probes that ship with compgen (:data:`SHIPPED_PROBES_DIR`) serve the shapes builder's configs at once. Any other
    concept space, image size, seed or probe type is trained at its first call (about a minute on one CPU core for
    ``cnn``) and saved under ``cache_dir`` (default :func:`default_probes_cache`); later calls, in any process, load
    it. The recipe is deterministic: on one machine, a retrained copy of a shipped probe is identical to it.
    ``object_scale``: the data's object scale in the frame (``results/paper-a-sizes/``); probes for 1 ship.
    """
    name, key = default_probes_name(space, image_size, seed, probe_type, object_scale)
    description = (f"default {probe_type} probes for {space.names} ({image_size} px, object scale {object_scale:g}, "
                   f"seed {seed})")
    return shipped_cached_or_trained(
        name, key, lambda: train_shapes_probes(space, probe_type, image_size=image_size, seed=seed,
                                               object_scale=object_scale, progress=True),  # minutes: shown
        ConceptProbes, cache_dir, description)
