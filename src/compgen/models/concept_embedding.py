"""Per-variable concept embeddings shared by every compgen model.

Each concept variable gets its own embedder: a lookup table over its class indices (``quantized``
conditioning), or, for variables given continuous values (``full`` conditioning: RGB for color, scale for
size), a small MLP on the per-image values. With ``use_null=True`` each variable also owns a learned
*null* embedding that replaces it wherever a boolean drop mask is set: concept dropout during training and
the unconditional branch of classifier-free guidance.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..concepts import ConceptSpace, ConceptSpaceLike

CONDITIONING_MODES = ("quantized", "full")
CATEGORICAL_EMBEDDINGS = ("table", "one_hot_mlp")


def check_conditioning(conditioning: str, continuous_concepts: Mapping | None, concept_dropout: float) -> None:
    """Validate the conditioning options every concept-conditioned model shares (clear ``ValueError`` otherwise)."""
    if conditioning not in CONDITIONING_MODES:
        raise ValueError(f"conditioning must be one of {CONDITIONING_MODES}, got {conditioning!r}")
    if conditioning == "full" and not continuous_concepts:
        raise ValueError(
            "conditioning='full' needs continuous_concepts (the canonical value table per continuous variable), "
            "e.g. shapes_continuous_concepts(space)"
        )
    check_concept_dropout(concept_dropout)


def check_concept_dropout(concept_dropout: float, name: str = "concept_dropout") -> None:
    """Raise ``ValueError`` unless ``concept_dropout`` lies in [0, 1); ``name`` is how the caller spells it (a flag)."""
    if not 0.0 <= concept_dropout < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {concept_dropout}")


class ConceptEmbedding(nn.Module):
    """Embed a batch of concept classes ``(B, V)`` into one vector per variable, ``(B, V, embedding_dim)``.

    Args:
        concept_space: A ``ConceptSpace``, ``{variable: [value names]}`` or a list of ``[variable, values]`` pairs.
        embedding_dim: Size of each variable's embedding.
        continuous_concepts: ``{variable: canonical value per class}``, e.g. ``{"color": [[0.9, 0.1, 0.1], ...],
            "size": [[2.7], [1.6]]}``. Variables listed here are embedded from continuous values by an MLP;
            the table supplies the values when none are given (test-time conditioning on the class values).
        use_null: Learn a null embedding per variable, used where ``drop_mask`` is ``True``.
        categorical: How class indices are embedded: ``"table"`` (a lookup table) or ``"one_hot_mlp"`` (Paper A's
            official code: ``Linear, GELU, Linear`` on the one-hot vector).
        split_dims: Widths that add up to ``embedding_dim``: each variable then has one embedder per width and its
            embedding is their concatenation (Paper A's official U-Net embeds every concept once per decoder stage).
    """

    def __init__(
        self,
        concept_space: ConceptSpaceLike,
        embedding_dim: int,
        continuous_concepts: Mapping[str, Sequence[Sequence[float]]] | None = None,
        use_null: bool = False,
        categorical: str = "table",
        split_dims: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        if categorical not in CATEGORICAL_EMBEDDINGS:
            raise ValueError(f"categorical must be one of {CATEGORICAL_EMBEDDINGS}, got {categorical!r}")
        split_dims = list(split_dims or [embedding_dim])
        if sum(split_dims) != embedding_dim or min(split_dims) < 1:
            raise ValueError(f"split_dims {split_dims} must be positive and add up to embedding_dim {embedding_dim}")
        space = ConceptSpace.from_dict(concept_space)
        continuous_concepts = dict(continuous_concepts or {})
        unknown = sorted(set(continuous_concepts) - set(space.names))
        if unknown:
            raise ValueError(f"continuous_concepts names unknown variables {unknown}; the space has {space.names}")

        self.space = space
        self.embedding_dim = embedding_dim
        self.continuous_names = tuple(name for name in space.names if name in continuous_concepts)
        self.register_buffer("cardinalities", torch.tensor(space.cardinalities, dtype=torch.long), persistent=False)

        self.embedders = nn.ModuleDict()
        self.value_dims: dict[str, int] = {}
        for variable in space.variables:
            if variable.name in continuous_concepts:
                table = _value_table(variable.name, variable.num_values, continuous_concepts[variable.name])
                self.value_dims[variable.name] = table.shape[1]
                # The canonical values are part of the config, so they are not saved with the weights.
                self.register_buffer(f"{variable.name}_values", table, persistent=False)
                parts = [_mlp(table.shape[1], dim) for dim in split_dims]
            elif categorical == "one_hot_mlp":
                parts = [OneHotMLP(variable.num_values, dim) for dim in split_dims]
            else:
                parts = [nn.Embedding(variable.num_values, dim) for dim in split_dims]
            self.embedders[variable.name] = parts[0] if len(parts) == 1 else SplitEmbedder(parts)
        self.null_embedding = nn.Parameter(torch.randn(space.num_variables, embedding_dim)) if use_null else None

    @torch.no_grad()
    def zero_output_layers_(self) -> None:
        """Set every embedder's output layer to zero (a table's rows, an MLP's last ``Linear``), so every concept
        embeds to 0 until training moves it: with a modulation that is the identity at 0 (``h * (1 + e) + t``), the
        network starts unconditioned and no concept's random initial embedding scales the features (DiT's
        adaLN-Zero, Peebles & Xie 2023, Sec. 3.2). The null embeddings of concept dropout are left as they are."""
        for module in self.embedders.values():
            for part in module if isinstance(module, SplitEmbedder) else (module,):
                if isinstance(part, nn.Embedding):
                    part.weight.zero_()
                else:
                    last = (part.model if isinstance(part, OneHotMLP) else part)[-1]
                    last.weight.zero_()
                    last.bias.zero_()

    @property
    def num_value_dims(self) -> int:
        """Width of ``concept_values``: the continuous variables' value sizes, in variable order."""
        return sum(self.value_dims.values())

    def validate_concepts(self, concepts: torch.Tensor) -> None:
        """Raise a ``ValueError`` naming the problem if ``concepts`` is not a valid ``(B, V)`` index batch."""
        num_variables = self.space.num_variables
        if concepts.ndim != 2 or concepts.shape[1] != num_variables:
            raise ValueError(
                f"concepts must have shape (batch, {num_variables}) with one class index per variable "
                f"{self.space.names}, got shape {tuple(concepts.shape)}"
            )
        if concepts.dtype.is_floating_point or concepts.dtype == torch.bool:
            raise ValueError(f"concepts must be integer class indices, got dtype {concepts.dtype}")
        if concepts.device.type != "cpu" or torch.compiler.is_compiling():
            # The value check reads the data, a host synchronisation on an accelerator at every step (and a graph
            # break under torch.compile): there, the pipelines (prepare_concept_inputs) and the datasets (ClassLabel
            # columns) validate indices.
            return
        out_of_range = (concepts < 0) | (concepts >= self.cardinalities)
        if out_of_range.any():
            row, column = (int(i) for i in out_of_range.nonzero()[0])
            variable = self.space.variables[column]
            raise ValueError(
                f"class index {int(concepts[row, column])} is out of range for concept variable {variable.name!r} "
                f"(0..{variable.num_values - 1}: {', '.join(variable.values)})"
            )

    def forward(
        self,
        concepts: torch.Tensor,
        concept_values: torch.Tensor | None = None,
        drop_mask: torch.Tensor | None = None,
        check_values: bool = True,
    ) -> torch.Tensor:
        """Embed ``concepts`` (B, V) long; ``concept_values`` (B, num_value_dims) for the continuous variables
        (canonical class values when ``None``); ``drop_mask`` (B, V) bool selects the null embeddings.
        ``check_values=False`` skips the range check of the indices (for inputs another forward already checked)."""
        if check_values:
            self.validate_concepts(concepts)
        batch_size = concepts.shape[0]
        if concept_values is not None:
            if not self.continuous_names:
                raise ValueError("concept_values were given but no concept variable is continuous (quantized mode)")
            if concept_values.shape != (batch_size, self.num_value_dims):
                raise ValueError(
                    f"concept_values must have shape ({batch_size}, {self.num_value_dims}) (values of "
                    f"{', '.join(f'{n}: {self.value_dims[n]}' for n in self.continuous_names)}), "
                    f"got {tuple(concept_values.shape)}"
                )
            values_by_name = dict(
                zip(self.continuous_names, concept_values.split(list(self.value_dims.values()), dim=1), strict=True)
            )
        else:
            values_by_name = {}

        embeddings = []
        for column, (name, embedder) in enumerate(self.embedders.items()):
            if name in self.value_dims:
                values = values_by_name.get(name)
                if values is None:
                    values = getattr(self, f"{name}_values")[concepts[:, column]]
                # the values' table's dtype: the model's compute dtype, also where layerwise casting stores the
                # embedders' weights in another (fp8)
                embeddings.append(embedder(values.to(getattr(self, f"{name}_values").dtype)))
            else:
                embeddings.append(embedder(concepts[:, column]))
        embedded = torch.stack(embeddings, dim=1)

        if drop_mask is not None:
            if self.null_embedding is None:
                raise ValueError("drop_mask was given but this model has no null embeddings (concept_dropout is 0)")
            if drop_mask.shape != concepts.shape or drop_mask.dtype != torch.bool:
                raise ValueError(
                    f"drop_mask must be a bool tensor of shape {tuple(concepts.shape)}, "
                    f"got {drop_mask.dtype} {tuple(drop_mask.shape)}"
                )
            null = self.null_embedding.to(embedded.dtype).expand_as(embedded)
            embedded = torch.where(drop_mask.unsqueeze(-1), null, embedded)
        return embedded


def _mlp(in_features: int, dim: int) -> nn.Sequential:
    """``Linear, GELU, Linear``: the embedder of a continuous variable (Paper A's ``EmbedFC``)."""
    return nn.Sequential(nn.Linear(in_features, dim), nn.GELU(), nn.Linear(dim, dim))


class OneHotMLP(nn.Module):
    """Paper A's embedding of a class index: ``Linear, GELU, Linear`` on its one-hot vector. The first layer reads
    the weight column of the index (the same product without building the one-hot vector)."""

    def __init__(self, num_values: int, dim: int) -> None:
        super().__init__()
        self.model = _mlp(num_values, dim)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        first = self.model[0]
        return self.model[2](self.model[1](F.embedding(indices, first.weight.t()) + first.bias))


class SplitEmbedder(nn.ModuleList):
    """Several embedders of one variable whose outputs are concatenated (one per decoder stage)."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return torch.cat([part(inputs) for part in self], dim=-1)


def _names(keys: Sequence) -> str:
    keys = [key if isinstance(key, str) else key[0] for key in keys]
    return ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")


def _value_table(name: str, num_values: int, rows: Sequence[Sequence[float]]) -> torch.Tensor:
    table = torch.tensor([list(row) for row in rows], dtype=torch.float32)
    if table.ndim != 2 or table.shape[0] != num_values or table.shape[1] == 0:
        raise ValueError(
            f"continuous_concepts[{name!r}] must list one non-empty value vector per class ({num_values} rows), "
            f"got shape {tuple(table.shape)}"
        )
    return table


class ConceptConditionedMixin:
    """For models that own a :class:`ConceptEmbedding` as ``self.concept_embedding`` (what pipelines rely on). It comes
    before ``ModelMixin`` among a model's bases, so that its :meth:`from_pretrained` checks what diffusers loads."""

    concept_embedding: ConceptEmbedding

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs):
        """diffusers' ``from_pretrained``, refusing weights that do not fit the config. A ``config.json`` edited by
        hand (another ``conditioning``) would otherwise load with the parts it adds left on PyTorch's meta device,
        and fail only at the first sample with a device error."""
        output_loading_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(pretrained_model_name_or_path, output_loading_info=True, **kwargs)
        problems = [f"{what} {_names(info[key])}" for key, what in (
            ("missing_keys", "weights the config needs but the file lacks:"),
            ("unexpected_keys", "weights in the file the config has no place for:"),
            ("mismatched_keys", "weights of another shape:")) if info.get(key)]
        if problems:
            config = Path(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "", "config.json")
            raise ValueError(f"{config} does not match the weights beside it ({'; '.join(problems)}): was the config "
                             f"edited? {cls.__name__} options such as conditioning must be the ones it trained with")
        return (model, info) if output_loading_info else model

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """Raise ``ValueError`` naming the option if this model refuses one of ``options`` (config arguments by name;
        those not given are not checked). ``__init__`` runs the same checks, and the training scripts call this on
        their flags before any work, so each option has one owner: ``concept_dropout`` and a token transformer's
        ``hidden_size``, ``num_heads``, ``num_layers``, ``dropout`` and ``position_embedding_std`` here, a model's own
        options in its override."""
        if "concept_dropout" in options:
            check_concept_dropout(options["concept_dropout"])
        for name in ("hidden_size", "num_heads", "num_layers"):
            if name in options and options[name] < 1:
                raise ValueError(f"{name} must be at least 1, got {options[name]}")
        if "hidden_size" in options and options["hidden_size"] % options.get("num_heads", 1):
            raise ValueError(f"hidden_size {options['hidden_size']} must be divisible by num_heads "
                             f"{options['num_heads']}")
        if "dropout" in options and not 0 <= options["dropout"] < 1:
            raise ValueError(f"dropout must be in [0, 1), got {options['dropout']}")
        if "position_embedding_std" in options and not options["position_embedding_std"] > 0:
            raise ValueError(f"position_embedding_std must be positive, got {options['position_embedding_std']}")

    @staticmethod
    def draw_drop_mask(concepts: torch.Tensor, rate: float, generator: torch.Generator | None = None
                       ) -> torch.Tensor | None:
        """Concept dropout's one draw (Paper B, Sec. 3: classifier-free guidance needs null concepts): a ``(B, V)``
        bool mask, ``True`` with probability ``rate`` where a concept is replaced by its null embedding; ``None`` when
        ``rate`` is 0. Drawn on the CPU from ``generator`` (torch's default generator when ``None``), then moved to
        ``concepts``' device, so that a run's draws are the same on every device."""
        if rate <= 0:
            return None
        return (torch.rand(concepts.shape, generator=generator) < rate).to(concepts.device, non_blocking=True)

    def _register_concepts(
        self, concept_space: ConceptSpaceLike, conditioning: str, continuous_concepts: Mapping | None,
        concept_dropout: float,
    ) -> ConceptSpace:
        """Validate the conditioning options and store the concept space in the config as ordered pairs.

        diffusers writes configs with sorted keys, which would reorder a ``{variable: values}`` dict and silently
        permute the tuple digits on reload; ``[variable, values]`` pairs survive the round trip.
        """
        space = ConceptSpace.from_dict(concept_space)
        self.register_to_config(concept_space=space.to_pairs())
        check_conditioning(conditioning, continuous_concepts, concept_dropout)
        return space

    def _concept_tokens(self, space: ConceptSpace, hidden_size: int) -> ConceptEmbedding:
        """The concept-token embedding of a token transformer, as its config's conditioning options ask: continuous
        values in ``full`` mode, null tokens when concepts are dropped in training."""
        config = self.config
        values = config.continuous_concepts if config.conditioning == "full" else None
        return ConceptEmbedding(space, hidden_size, continuous_concepts=values, use_null=config.concept_dropout > 0)

    def training_drop_mask(self, concepts: torch.Tensor, drop_mask: torch.Tensor | None) -> torch.Tensor | None:
        """``drop_mask`` as given; in training mode with ``concept_dropout > 0`` and none given, one drawn at that rate
        from torch's default generator (the training tasks pass one drawn from theirs: :meth:`draw_drop_mask`)."""
        if self.training and drop_mask is None:
            drop_mask = self.draw_drop_mask(concepts, self.config.concept_dropout)
        return drop_mask

    @property
    def concept_space(self) -> ConceptSpace:
        """The model's concept space (variables and value names, in tuple order)."""
        return self.concept_embedding.space

    @property
    def has_null_embeddings(self) -> bool:
        """Whether the model learned null concepts (``concept_dropout > 0``), needed for classifier-free guidance."""
        return self.concept_embedding.null_embedding is not None
