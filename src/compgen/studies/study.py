"""A study file: a grid of models x conditioning x seeds x datasets, checked, and turned into cells to run.

Paper B's findings are comparisons under control: the same tokens under a categorical or a continuous objective, the
same model under complete or partial conditioning. A study file (YAML) names the grid; ``examples/run_study.py``
runs every cell through its recipe (``recipe:``, a name of ``python -m compgen.train``; or ``script:``, a training
script's path), resumes unfinished cells, skips finished ones, reports failed ones while the rest go on, and writes
``summary.md`` / ``summary.json`` with plots. Example (``studies/``)::

    name: objective-h32
    datasets: [okawa-h32-train1]    # config names, export directories, Hub ids, or new configs (see below)
    seeds: [0, 1, 2]
    steps: 2000
    conditioning: [full]            # any of full, quantized, full+dropout, quantized+dropout
    dropout: 0.1                    # the concept-dropout rate of the +dropout modes (Paper B: about 10%)
    flags: {eval_steps: 250}        # for every cell
    tokenizer:                      # trained once per dataset, shared by every model with tokens: true
      recipe: tokenizer
      flags: {preset: cpu-quick}
    models:
      maskgit: {recipe: maskgit, tokens: true, flags: {preset: cpu-quick, jepa_weight: 0}}
      dit: {recipe: tuple-dit, tokens: true, flags: {preset: cpu-quick},
            conditioning: [full, quantized]}   # a model's own modes replace the study's

A dataset entry may also define a new concept-graph config, exported once into the study's ``data/`` directory::

    datasets:
      - {name: h32-train2, training_classes: ["000", "001", "011", "101"]}
      - {name: tiny, split_preset: H32-train1, images_per_class: 32, test_images_per_class: 4}

A model may fine-tune another's cells (Paper A, Fig. 9): ``init_from`` names a model trained from scratch on one
dataset; each cell starts from its cell of the same seed and mode, on its own ``datasets`` and ``steps``::

    models:
      unet: {recipe: tuple-unet, flags: {preset: quickstart}}
      unet-plus-101: {recipe: tuple-unet, init_from: unet, steps: 400,
                      datasets: [{name: fail1-plus-101, training_classes: ["000", "100", "001", "111", "101"]}]}

The tokenizer trains on each study dataset's training split, unless ``tokenizer: {dataset: ...}`` names one dataset
(a name or a config mapping, as above) for a single tokenizer shared by every cell, e.g. one trained on all eight
classes when the training-split tokenizer caps the held-out classes (its name then labels every result)::

    tokenizer:
      recipe: tokenizer
      dataset: {name: h32-all-classes, split_preset: H32-train1, training_classes: [...all eight...]}

Paths in a study file (``script:``, dataset directories) are relative to the study file's directory (``~`` is the home
directory); a dataset entry that is no directory there is a config name or a Hub id. Every name must be used once:
a repeated model key, seed, dataset or conditioning mode is refused, and so are the flags the study sets itself
(``seed``, ``conditioning``, ``max_train_steps``, ``dataset``, ``output_dir``, ...: use ``seeds``, ``conditioning``,
``steps``, ``datasets``).

A rerun skips finished cells and resumes unfinished ones, but only under the definition they trained with: a cell whose
options, dataset or tokenizer changed in the study file is refused with the list of changed cells (remove their
directories to train them again; see :mod:`compgen.studies.records`). A dataset the study defines is exported
again when its definition changed and no cell trained on it yet.

Every conditioning mode means the same for every model (:data:`CONDITIONING_MODES`): ``full`` feeds the per-image
continuous values (colour RGB, size) during training and the class values at test time, ``quantized`` the class
indices only; ``+dropout`` replaces each concept by its learned null embedding with probability ``dropout``.
"""

from __future__ import annotations

import json
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..families import recipe_of_script, recipes
from .cells import Cell, TokenizerCell, canonical_json, file_safe, flags_to_argv
from .checks import UniqueKeyLoader, check_definition, expect, expect_flags, expect_list, expect_unique
from .records import export_is_current, record_definition

CONDITIONING_MODES: dict[str, tuple[str, bool]] = {
    "full": ("full", False),
    "quantized": ("quantized", False),
    "full+dropout": ("full", True),
    "quantized+dropout": ("quantized", True),
}
"""Study conditioning mode -> (the models' ``--conditioning``, whether concepts are dropped at the study's rate)."""

TOKENIZER_DIR = "tokenizer"
CELLS_DIR = "cells"

STUDY_FLAGS: dict[str, str] = {
    "seed": "its seeds list", "conditioning": "its conditioning modes", "concept_dropout": "its conditioning modes "
    "and dropout", "max_train_steps": "its steps", "dataset": "its datasets", "dataset_config": "its datasets",
    "output_dir": "run_study's --output_dir", "resume_from_checkpoint": "itself (every cell resumes)",
    "overwrite_output_dir": "nothing: a rerun never replaces a finished cell",
    "init_from": "the model's init_from (another model of the study)",
}
"""Flags the study gives every cell itself (a study file may not set them), and where each comes from."""
FINE_TUNING_KEYS = ("datasets", "init_from", "steps")
"""A model's own datasets and steps, and the model whose cells its cells start from (see the module docstring)."""
TOKENIZER_FLAGS = ("dataset", "dataset_config", "output_dir", "resume_from_checkpoint", "overwrite_output_dir")
"""Flags the study gives its tokenizer runs itself."""

@dataclass
class Study:
    """A study file, validated (see the module docstring for the format)."""

    name: str
    models: dict[str, dict[str, Any]]
    seeds: list[int]
    steps: int
    datasets: list[str | dict[str, Any]] = field(default_factory=lambda: ["okawa-h32-train1"])
    conditioning: list[str] = field(default_factory=lambda: ["full"])
    dropout: float = 0.1
    flags: dict[str, Any] = field(default_factory=dict)
    tokenizer: dict[str, Any] | None = None
    tokenizers: dict[str, dict[str, Any]] | None = None
    description: str = ""
    base_dir: Path = field(default_factory=Path, repr=False)
    """The directory relative paths in the study are resolved against (the study file's)."""

    KEYS: typing.ClassVar[tuple[str, ...]] = ("name", "models", "seeds", "steps", "datasets", "conditioning",
                                              "dropout", "flags", "tokenizer", "tokenizers", "description")

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Study:
        """Read and validate a study file; its relative paths are resolved against its directory."""
        path = Path(path).expanduser()
        try:
            with open(path, encoding="utf-8") as f:
                spec = yaml.load(f, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
        except yaml.YAMLError as error:
            raise ValueError(f"{path}: {error}") from None
        if not isinstance(spec, dict):
            raise ValueError(f"{path}: a study file is a YAML mapping")
        return cls.from_dict(spec, source=str(path), base_dir=path.resolve().parent)

    @classmethod
    def from_dict(cls, spec: dict[str, Any], source: str = "study", base_dir: str | os.PathLike | None = None
                  ) -> Study:
        """A study from its mapping (relative paths resolved against ``base_dir``, default the current directory)."""
        unknown = sorted(set(spec) - set(cls.KEYS))
        if unknown:
            raise ValueError(f"{source}: unknown study keys {unknown}; known: {sorted(cls.KEYS)}")
        missing = sorted({"name", "models", "seeds", "steps"} - set(spec))
        if missing:
            raise ValueError(f"{source}: missing study keys {missing}")
        study = cls(**spec, base_dir=Path(base_dir) if base_dir is not None else Path.cwd())
        study.validate(source)
        return study

    def resolved(self, entry: dict[str, Any]) -> dict[str, Any]:  # data_dir: relative to the study file's directory
        return entry | {"data_dir": str(self.path(entry["data_dir"]))} if entry.get("data_dir") else entry

    def path(self, text: str) -> Path:
        """A path of the study file, resolved against :attr:`base_dir`."""
        return Path(os.path.normpath(self.base_dir / Path(text).expanduser()))

    def validate(self, source: str = "study") -> None:
        """Raise ``ValueError`` naming the key for a value of the wrong type, an unknown or repeated name, an empty
        grid, a flag the study sets itself, a missing script or a bad dataset definition."""
        expect(self.name, str, f"{source}: name")
        expect(self.description, str, f"{source}: description")
        expect_list(self.seeds, int, f"{source}: seeds")
        expect(self.steps, int, f"{source}: steps")
        if self.steps < 1:
            raise ValueError(f"{source}: steps must be a positive integer, got {self.steps}")
        expect(self.dropout, (int, float), f"{source}: dropout")
        if not 0 < self.dropout < 1:
            raise ValueError(f"{source}: dropout must be in (0, 1), got {self.dropout}")
        expect_list(self.conditioning, str, f"{source}: conditioning")
        expect_flags(self.flags, f"{source}: flags", STUDY_FLAGS)
        expect(self.models, dict, f"{source}: models")
        if not self.models:
            raise ValueError(f"{source}: models is empty")
        for name, model in self.models.items():
            where = f"{source}: model {name!r}"
            expect(name, str, f"{where}: its name")
            expect(model, dict, where)
            extra = sorted(set(model) - {"recipe", "script", "tokens", "flags", "conditioning", *FINE_TUNING_KEYS})
            if extra:
                raise ValueError(f"{where} has unknown keys {extra}")
            self._validate_program(model, where)
            expect(model.get("tokens", False), (bool, str), f"{where}: tokens")
            tokenizer_flags = {"tokenizer_path": "its tokenizer", "vqvae_path": "its tokenizer"}  # and the old name
            reserved = STUDY_FLAGS | (tokenizer_flags if model.get("tokens") else {})
            expect_flags(model.get("flags", {}), f"{where}: flags", reserved)
            self._validate_fine_tuning(name, model, where)
            if "conditioning" in model:
                expect_list(model["conditioning"], str, f"{where}: conditioning")
            if model.get("tokens") is True and self.tokenizer is None:
                raise ValueError(f"{where} uses tokens but the study has no tokenizer")
            if isinstance(model.get("tokens"), str) and model["tokens"] not in (self.tokenizers or {}):
                raise ValueError(f"{where}: tokens {model['tokens']!r} names no entry of tokenizers "
                                 f"{sorted(self.tokenizers or {})}")
        modes = list(self.conditioning) + [c for m in self.models.values() for c in m.get("conditioning", [])]
        bad = [c for c in modes if c not in CONDITIONING_MODES]
        if bad:
            raise ValueError(f"{source}: unknown conditioning modes {bad}; choose from {list(CONDITIONING_MODES)}")
        if self.tokenizers is not None:
            expect(self.tokenizers, dict, f"{source}: tokenizers")
            if not self.tokenizers or not all(isinstance(n, str) and n for n in self.tokenizers):
                raise ValueError(f"{source}: tokenizers must map non-empty names to tokenizers")
        for name, spec in self.tokenizer_specs().items():
            where = f"{source}: tokenizer" + (f" {name!r}" if name else "")
            expect(spec, dict, where)
            extra = sorted(set(spec) - {"recipe", "script", "flags", "dataset"})
            if extra:
                raise ValueError(f"{where} has unknown keys {extra}" if name else
                                 f"{source}: the tokenizer has unknown keys {extra}")
            self._validate_program(spec, where)
            expect_flags(spec.get("flags", {}), f"{where}: flags", dict.fromkeys(TOKENIZER_FLAGS, "the study"))
        expect_list(self.datasets, (str, dict), f"{source}: datasets")
        tokenizer_datasets = [spec["dataset"] for spec in self.tokenizer_specs().values() if "dataset" in spec]
        model_datasets = [entry for model in self.models.values() for entry in model.get("datasets", [])]
        for entry in self.datasets + tokenizer_datasets + model_datasets:
            expect(entry, (str, dict), f"{source}: dataset {entry!r}")
            if isinstance(entry, dict):
                check_definition(self.resolved(entry), f"{source}: dataset {entry.get('name')!r}")
        expect_unique(self.dataset_names, f"{source}: datasets")
        definitions: dict[str, dict[str, Any]] = {}
        for entry in self.datasets + tokenizer_datasets + model_datasets:  # one name, one dataset, one export
            if isinstance(entry, dict) and definitions.setdefault(entry["name"], entry) != entry:
                raise ValueError(f"{source}: the dataset name {entry['name']!r} has two definitions "
                                 f"({canonical_json(definitions[entry['name']])} and {canonical_json(entry)}); both "
                                 "would export into one folder: give each its own name")
        directories: dict[Path, Cell | TokenizerCell] = {}
        for run in [*self.tokenizer_runs(Path("study")), *self.cells(Path("study"))]:
            other = directories.setdefault(run.output_dir, run)
            if other is not run:
                raise ValueError(f"{source}: {other.name!r} and {run.name!r} would share the directory "
                                 f"{run.output_dir.name} (their names are the same once made file-safe): rename one")

    def _validate_program(self, spec: dict[str, Any], where: str) -> None:
        """What a model or tokenizer runs: ``recipe`` (a name of :func:`compgen.families.recipes`) or ``script`` (a
        training script's path), exactly one."""
        given = [key for key in ("recipe", "script") if key in spec]
        if len(given) != 1:
            raise ValueError(f"{where}: give its recipe ({', '.join(recipes())}) or a script path, "
                             f"{'not both' if given else 'got neither'}")
        expect(spec[given[0]], str, f"{where}: {given[0]}")
        if "recipe" in spec and spec["recipe"] not in recipes():
            raise ValueError(f"{where}: unknown recipe {spec['recipe']!r}; the recipes are {', '.join(recipes())}")
        if "script" in spec and not self.path(spec["script"]).is_file():
            raise ValueError(f"{where}: no script at {self.path(spec['script'])}")

    def program(self, spec: dict[str, Any]) -> str:
        """The first word of a run's command: its recipe's name, or its script's path."""
        return spec["recipe"] if "recipe" in spec else str(self.path(spec["script"]))

    def _trains_with(self, spec: dict[str, Any]) -> str:
        """The recipe a model trains with (an example script read as its recipe), else its script's full path."""
        recipe = spec.get("recipe") or getattr(recipe_of_script(spec["script"]), "name", None)
        return recipe or str(self.path(spec["script"]).resolve())

    @staticmethod
    def _program_identity(spec: dict[str, Any]) -> dict[str, str]:
        return {key: spec[key] for key in ("recipe", "script") if key in spec}

    @property
    def dataset_names(self) -> list[str]:
        return [entry if isinstance(entry, str) else entry["name"] for entry in self.datasets]

    def model_datasets(self, model: dict[str, Any]) -> list[str]:
        """The datasets a model's cells train on: its own ``datasets``, else the study's."""
        return [e if isinstance(e, str) else e["name"] for e in model["datasets"]] if "datasets" in model \
            else self.dataset_names

    def _validate_fine_tuning(self, name: str, model: dict[str, Any], where: str) -> None:
        """A model's own ``steps`` and ``datasets``, and ``init_from``: another model of the study (not itself
        fine-tuned, on one dataset, with this model's conditioning modes) whose cells of the same seed and mode give
        the weights this model's cells start from (:mod:`compgen.launch.init_from`)."""
        if "steps" in model and (not isinstance(model["steps"], int) or isinstance(model["steps"], bool)
                                 or model["steps"] < 1):
            raise ValueError(f"{where}: steps must be a positive integer, got {model['steps']!r}")
        if "datasets" in model:
            expect_list(model["datasets"], (str, dict), f"{where}: datasets")
            if model.get("tokens"):
                raise ValueError(f"{where}: a model with its own datasets cannot use tokens (one tokenizer per "
                                 "study dataset)")
        if "init_from" not in model:
            return
        source = model["init_from"]
        if not isinstance(source, str) or source not in self.models or source == name:
            raise ValueError(f"{where}: init_from must name another model of the study {sorted(self.models)}, got "
                             f"{source!r}")
        if "init_from" in self.models[source] or len(self.model_datasets(self.models[source])) != 1:
            raise ValueError(f"{where}: init_from {source!r} must be trained from scratch on one dataset")
        missing = set(model.get("conditioning", self.conditioning)) - set(
            self.models[source].get("conditioning", self.conditioning))
        if missing:
            raise ValueError(f"{where}: init_from {source!r} has no cells of conditioning {sorted(missing)}")
        trains_with = [self._trains_with(self.models[name]) for name in (name, source)]
        if trains_with[0] != trains_with[1]:
            raise ValueError(f"{where}: init_from {source!r} trains with {trains_with[1]}, this model with "
                             f"{trains_with[0]}: a model fine-tunes weights of its own architecture")
        if "tokens" in model and self.model_tokenizer(model) != self.model_tokenizer(self.models[source]):
            raise ValueError(f"{where}: tokens {model['tokens']!r}, but init_from {source!r} decodes through "
                             f"{self.models[source].get('tokens', False)!r}: a fine-tuned model keeps its source's "
                             "tokenizer (leave tokens out)")

    def tokenizer_specs(self) -> dict[str, dict[str, Any]]:
        """The study's tokenizers by name: the entries of ``tokenizers``, and ``tokenizer`` under the name ``""``."""
        return ({"": self.tokenizer} if self.tokenizer is not None else {}) | dict(self.tokenizers or {})

    @staticmethod
    def model_tokenizer(model: dict[str, Any]) -> str | None:
        """The name of the tokenizer a model's cells decode through (``tokens: true``: ``""``), or ``None``."""
        tokens = model.get("tokens", False)
        return None if tokens is False else "" if tokens is True else tokens

    def defined_datasets(self) -> list[dict[str, Any]]:
        """The dataset configs the study defines (its datasets' and its tokenizers')."""
        entries = list(self.datasets) + [spec.get("dataset") for spec in self.tokenizer_specs().values()]
        entries += [entry for model in self.models.values() for entry in model.get("datasets", [])]
        unique = {json.dumps(entry, sort_keys=True): entry for entry in entries if isinstance(entry, dict)}
        return list(unique.values())

    def _dataset_definition(self, name: str) -> str | dict[str, Any]:
        """What identifies a dataset of the study: its definition, or its name (a config, a directory, a Hub id)."""
        return next((entry for entry in self.defined_datasets() if entry["name"] == name), name)

    def tokenizer_dataset(self, dataset: str, tokenizer: str = "") -> str:
        """The dataset whose images train the tokenizer ``tokenizer`` of ``dataset``'s cells."""
        entry = self.tokenizer_specs()[tokenizer].get("dataset")
        if entry is None:
            return dataset
        return entry if isinstance(entry, str) else entry["name"]

    def dataset_flags(self, output_dir: Path, name: str) -> dict[str, str]:
        """``--dataset`` (and ``--dataset_config``) for one dataset of the study."""
        if isinstance(self._dataset_definition(name), dict):
            return {"dataset": str(output_dir / "data" / file_safe(name)), "dataset_config": name}
        local = self.path(name)
        return {"dataset": str(local) if local.is_dir() else name}

    def prepare_datasets(self, output_dir: Path) -> None:
        """Export the datasets the study defines: once, and again when a definition changed (the runs that trained
        on the old one were refused before: :func:`~compgen.studies.records.check_unchanged`)."""
        from ..data.concept_graph_builder import ConceptGraphShapesConfig
        from ..data.export import export_concept_graph_configs

        for entry in self.defined_datasets():
            target = output_dir / "data" / file_safe(entry["name"])
            if not export_is_current(target, entry):
                export_concept_graph_configs([ConceptGraphShapesConfig(**self.resolved(entry))], target, overwrite=True,
                                             cache_dir=str(output_dir / "data" / ".cache"))
                record_definition(target, entry)

    def tokenizer_dir(self, output_dir: Path, dataset: str, tokenizer: str = "") -> Path:
        """``tokenizer/<dataset>`` for the study's ``tokenizer``, ``tokenizer/<name>__<dataset>`` for a named one."""
        prefix = f"{tokenizer}__" if tokenizer else ""
        return output_dir / TOKENIZER_DIR / file_safe(prefix + self.tokenizer_dataset(dataset, tokenizer))

    def _tokenizer_identity(self, dataset: str, tokenizer: str = "") -> dict[str, Any]:
        spec = self.tokenizer_specs()[tokenizer]
        return {**self._program_identity(spec), "flags": spec.get("flags", {}),
                "dataset": self._dataset_definition(self.tokenizer_dataset(dataset, tokenizer))}

    def tokenizer_runs(self, output_dir: Path) -> list[TokenizerCell]:
        """One run per tokenizer that a model uses and per dataset it trains on."""
        used = dict.fromkeys(filter(lambda t: t is not None, map(self.model_tokenizer, self.models.values())))
        runs = []
        for tokenizer in used:
            spec = self.tokenizer_specs()[tokenizer]
            for dataset in dict.fromkeys(self.tokenizer_dataset(d, tokenizer) for d in self.dataset_names):
                directory = self.tokenizer_dir(output_dir, dataset, tokenizer)
                command = (self.program(spec), *flags_to_argv(
                    spec.get("flags", {}) | self.dataset_flags(output_dir, dataset)
                    | {"output_dir": str(directory), "resume_from_checkpoint": "latest"}))
                identity = canonical_json(self._tokenizer_identity(dataset, tokenizer))
                runs.append(TokenizerCell(dataset, command, directory, identity, tokenizer))
        return runs

    def tokenizer_commands(self, output_dir: Path) -> list[tuple[str, ...]]:
        """The commands of :meth:`tokenizer_runs`."""
        return [run.command for run in self.tokenizer_runs(output_dir)]

    def cells(self, output_dir: Path) -> list[Cell]:
        """Every cell of the grid, in a fixed order (dataset, model, conditioning, seed); fine-tuning cells last."""
        cells: list[Cell] = []
        datasets = dict.fromkeys(d for model in self.models.values() for d in self.model_datasets(model))
        for fine_tuning in (False, True):
            for dataset in dict.fromkeys([*self.dataset_names, *datasets]):
                for model_name, model in self.models.items():
                    if ("init_from" in model) == fine_tuning and dataset in self.model_datasets(model):
                        cells += self._model_cells(output_dir, model_name, dataset, cells)
        return cells

    def _model_cells(self, output_dir: Path, model_name: str, dataset: str, before: list[Cell]) -> list[Cell]:
        model, cells = self.models[model_name], []
        for mode in model.get("conditioning", self.conditioning):
            conditioning, dropped = CONDITIONING_MODES[mode]
            for seed in self.seeds:
                directory = output_dir / CELLS_DIR / file_safe(f"{model_name}__{mode}__{dataset}__seed{seed}")
                options = self.flags | model.get("flags", {}) | {
                    "conditioning": conditioning, "concept_dropout": self.dropout if dropped else 0.0, "seed": seed}
                steps = model.get("steps", self.steps)
                flags = options | {"max_train_steps": steps, **self.dataset_flags(output_dir, dataset),
                                   "output_dir": str(directory), "resume_from_checkpoint": "latest"}
                identity = {**self._program_identity(model), "flags": options,
                            "dataset": self._dataset_definition(dataset), "tokenizer": None}
                tokenizer = self.model_tokenizer(model)
                if tokenizer is not None:
                    flags["tokenizer_path"] = str(self.tokenizer_dir(output_dir, dataset, tokenizer))
                    identity["tokenizer"] = self._tokenizer_identity(dataset, tokenizer)
                source = None
                if "init_from" in model:  # the same seed and mode of the source model, on its one dataset
                    source = next(c for c in before if (c.model, c.conditioning, c.seed) == (model["init_from"],
                                                                                           mode, seed))
                    flags["init_from"] = str(source.output_dir)
                    identity["init_from"] = json.loads(source.identity)
                command = (self.program(model), *flags_to_argv(flags))
                cells.append(Cell(model_name, mode, seed, dataset, command, directory, canonical_json(identity),
                                  steps, source.name if source else None))
        return cells
