"""Concept probes: one classifier per concept variable, the instrument every compgen model is judged by.

For the shapes data the probes are linear on flattened RGB pixels as in Okawa et al. (2023), applied after
centering the object (see :mod:`compgen.evaluation.preprocessing`); a small CNN per concept (3 conv layers)
is the option for natural images such as CelebA. Probes are a diffusers ``ModelMixin``, so they save, load
and push to the Hub with ``save_pretrained`` / ``from_pretrained`` / ``push_to_hub`` (safetensors + config).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import nn
from tqdm.auto import tqdm

from ..concepts import ConceptGraph, ConceptSpace
from .preprocessing import ImageInput, center_objects, to_float_images

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
    """

    @register_to_config
    def __init__(
        self,
        concept_space: dict[str, list[str]] | list[list],
        image_size: int = 28,
        probe_type: str = "linear",
        center_objects: bool = True,
        blur_sigma: float = 0.0,
        cnn_channels: int = 16,
    ) -> None:
        super().__init__()
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

    def preprocess(self, images: ImageInput) -> torch.Tensor:
        """The fixed (untrained) input transform: float NCHW in [0, 1], optionally centered, on the probe device."""
        x = to_float_images(images).to(self.device)
        size = self.config.image_size
        if tuple(x.shape[-2:]) != (size, size):
            raise ValueError(f"probes expect {size}x{size} images, got {tuple(x.shape[-2:])}")
        if self.config.center_objects:
            x = center_objects(x, blur_sigma=self.config.blur_sigma)
        return x

    def classify(self, inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Logits per concept from already preprocessed inputs."""
        x = inputs - 0.5
        if self.config.probe_type == "linear":
            x = x.flatten(1)
        return {name: head(x) for name, head in self.heads.items()}

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """Logits ``{concept name: (N, k_v)}`` for float images ``(N, 3, H, W)`` in [0, 1]."""
        return self.classify(self.preprocess(images))

    @torch.no_grad()
    def predict_proba(self, images: ImageInput, batch_size: int = 512) -> list[torch.Tensor]:
        """Class probabilities per concept, a list of ``(N, k_v)`` tensors in variable order (on CPU)."""
        was_training = self.training
        self.eval()
        chunks: list[list[torch.Tensor]] = [[] for _ in self.space.variables]
        for start in range(0, len(images), batch_size):
            logits = self(to_float_images(images[start : start + batch_size]))
            for j, name in enumerate(self.space.names):
                chunks[j].append(logits[name].float().softmax(dim=-1).cpu())
        self.train(was_training)
        if not chunks[0]:
            return [torch.zeros(0, k) for k in self.space.cardinalities]
        return [torch.cat(c) for c in chunks]

    def predict(self, images: ImageInput, batch_size: int = 512) -> torch.Tensor:
        """Predicted value index per concept, a LongTensor ``(N, V)`` in variable order (on CPU)."""
        probabilities = self.predict_proba(images, batch_size=batch_size)
        return torch.stack([p.argmax(dim=-1) for p in probabilities], dim=1)


def train_probes(
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
) -> dict[str, float]:
    """Train every probe with Adam and cross-entropy; return per-concept accuracy on a held-out split.

    ``images`` are uint8 NHWC or float NCHW, ``concepts`` the ``(N, V)`` value indices. A random
    ``val_fraction`` of the images is held out (Paper A: 4500 / 500). The centering transform is fixed, so it
    is applied once up front. With ``noise_std`` > 0 training inputs get Gaussian pixel noise with a per-image std
    drawn from ``U(0, noise_std)`` (it made linear shapes probes less accurate on clean and noisy images alike).
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

    with torch.no_grad():
        inputs = torch.cat(
            [probes.preprocess(to_float_images(images[i : i + 1024])) for i in range(0, len(images), 1024)]
        )
    targets = targets.to(probes.device)
    optimizer = torch.optim.Adam(probes.parameters(), lr=lr)
    probes.train()
    for _ in tqdm(range(epochs), desc="training probes", disable=not progress):
        permutation = train_idx[torch.randperm(len(train_idx), generator=generator)]
        for start in range(0, len(permutation), batch_size):
            batch = permutation[start : start + batch_size].to(probes.device)
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
):
    """Real shapes images of *every* class of the graph (probes may see every composition).

    ``size_jitter`` widens the object scales around each size class (default: the dataset's jitter); with 0.45
    the scales cover the whole range between small and large, so a probe learns shape and color at every size
    and calls each size by the nearer class value.
    """
    from ..shapes import RenderConfig, render_classes

    space = graph_or_space.space if isinstance(graph_or_space, ConceptGraph) else graph_or_space
    nodes = graph_or_space.nodes if isinstance(graph_or_space, ConceptGraph) else space.all_classes()
    classes = np.repeat(np.array(nodes, dtype=np.int64), images_per_class, axis=0)
    config = RenderConfig(image_size=image_size)
    if size_jitter is not None:
        config = RenderConfig(image_size=image_size, size_jitter=size_jitter)
    return render_classes(space, classes, seed=seed, config=config)


_DEFAULT_PROBE_STATES: dict[tuple, dict[str, torch.Tensor]] = {}


DEFAULT_PROBE_SIZE_JITTER = {"cnn": 0.45, "linear": None}
"""Scale spread of the default probes' training images. Generated objects often have in-between sizes; a linear
probe on centered pixels then mistakes medium circles for triangles (it is 71% on shape when trained over the whole
size range, 100% only at the dataset's own jitter), while the CNN probe stays at 100% over the whole range."""


def default_shapes_probes(
    space: ConceptSpace, image_size: int = 28, seed: int = 0, probe_type: str = "cnn"
) -> ConceptProbes:
    """Probes for the shapes data trained in seconds (cached per process), for runs without saved probes.

    The default ``cnn`` probes are trained on objects of every size between small and large, so that they judge
    generated images with in-between sizes correctly; ``linear`` gives Paper A's linear probes on the dataset's
    jitter. Probes saved by ``python -m compgen.evaluation.train_probes`` are the reference instrument.
    """
    if probe_type not in DEFAULT_PROBE_SIZE_JITTER:
        raise ValueError(f"probe_type must be one of {sorted(DEFAULT_PROBE_SIZE_JITTER)}, got {probe_type!r}")
    key = (tuple((v.name, v.values) for v in space.variables), image_size, seed, probe_type)
    if key not in _DEFAULT_PROBE_STATES:
        torch.manual_seed(seed)
        probes = ConceptProbes(space.to_dict(), image_size=image_size, probe_type=probe_type)
        batch = render_probe_data(space, images_per_class=300, image_size=image_size, seed=seed + 10_000,
                                  size_jitter=DEFAULT_PROBE_SIZE_JITTER[probe_type])
        if probe_type == "cnn":
            train_probes(probes, batch.images, batch.concepts, epochs=15, seed=seed)
        else:
            train_probes(probes, batch.images, batch.concepts, epochs=30, lr=1e-2, seed=seed)
        _DEFAULT_PROBE_STATES[key] = {k: v.detach().clone() for k, v in probes.state_dict().items()}
    probes = ConceptProbes(space.to_dict(), image_size=image_size, probe_type=probe_type)
    probes.load_state_dict(_DEFAULT_PROBE_STATES[key])
    return probes.eval()
