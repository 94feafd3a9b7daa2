"""Command-line plumbing shared by the example training scripts: presets, options checked before any work, the
output directory claimed (:func:`~compgen.launch.directory_claim.start_run`), ``--init_from`` resolved
(:func:`~compgen.launch.init_from.check_init_from`), data, probes, and the loop (:class:`TrainingRun`).

The tokenizer-first workflow of token-space scripts (their tokenizer's flags, training and reuse) is in
:mod:`compgen.launch.token_model_setup`.

Option defaults are layered, each layer overriding the one before:

1. the script's own ``add_argument`` defaults;
2. its ``--preset`` (e.g. ``paper`` or ``cpu-quick``);
3. :data:`DATASET_DEFAULTS` for ``--dataset``: first its ``"*"`` entry, then the entry named like the preset
   (e.g. CelebA at 32 px with ``cpu-quick``), applied to the options the script defines;
4. the preset's entry in the script's ``cpu_fp32_presets``, where the run trains in fp32 on a CPU (``--mixed_precision
   no``, or ``auto`` on a CPU without native bf16): what keeps the preset's time near its bf16 time there;
5. flags given on the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from torch import nn

from ..cli import (
    add_celeba_arguments,
    apply_preset,
    celeba_builder_options,
    parse_widths,
    peek_option,
    resolved_options,
    set_known_defaults,
)
from ..concepts import ConceptGraph
from ..data.image_folder import is_image_folder
from ..data.loading import (
    CELEBA_SOURCE,
    ConceptImageData,
    carries_continuous_values,
    load_concept_dataset,
    split_tensors,
    training_data_from,
)
from ..evaluation.compare import print_run_result
from ..evaluation.lenient import LenientScorer
from ..models.config_bounds import CONFIG_BOUNDS, check_config_bounds
from ..training.batches import check_batch_fits
from ..training.config import (
    TrainingConfig,
    add_training_arguments,
    config_from_args,
    multi_cpu_launch,
    resolve_mixed_precision,
)
from ..training.fine_tuning import InitialWeights
from ..training.profile import RunProfile
from ..training.tasks.base import TrainingTask
from ..training.trainer import Trainer
from .directory_claim import RunDirectoryInUseError, RunStart, start_run
from .init_from import check_init_from
from .run_probes import load_probes as load_probes  # its home

logger = logging.getLogger(__name__)

DATASET_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    CELEBA_SOURCE: {
        # CelebA has no tokenizer split, so its token models' tokenizers train on the training classes.
        "*": {"celeba_config": "default", "tokenizer_data": "training-classes"},
        # 64 px with three U-Net stages keeps Paper A's bottleneck at 8x8 (28 px -> 7x7 with two stages).
        "paper": {"block_out_channels": "256,512,512"},
        "cpu-quick": {"celeba_config": "cpu"},
    },
}
"""``{dataset: {"*" or preset name: {option: default}}}``: dataset-level defaults, layered over the preset. An option a
script does not define is skipped, so one table serves every training script."""


@dataclass
class TrainingRun:
    """Everything a script needs besides its model: data, concept graph, probes and the options."""

    config: TrainingConfig
    train_data: ConceptImageData
    graph: ConceptGraph
    probes: nn.Module | None
    dataset_name: str
    eval_data: ConceptImageData | None = None
    """Real images of every class (the dataset's ``test`` split), for reports on real data."""
    start: RunStart | None = None
    """``config.output_dir``, claimed and checked before the data were built (on the main process); the claim is given
    back once training there ends."""
    initial: InitialWeights | None = None
    """The weights ``--init_from`` names, resolved before any work (:func:`~compgen.launch.init_from.check_init_from`):
    what the loop loads, and where a token model's tokenizer and latent statistics come from."""
    splits: Any = None
    """The loaded ``DatasetDict``, for the splits a script needs besides ``train`` and ``test`` (a tokenizer's)."""
    profile: RunProfile = dataclasses.field(default_factory=RunProfile)
    """Where the run's time goes, from the process's start: printed and written to ``profile.json`` at its end."""
    lenient: LenientScorer | None = None
    """Paper B's protocol (:mod:`compgen.evaluation.lenient`) fitted on ``eval_data``: a third score, no verdict."""

    @property
    def continuous_concepts(self) -> dict[str, list[list[float]]]:
        """Canonical per-class values of the continuous variables ("full" conditioning) for this dataset."""
        if self.train_data.concept_values is None or self.train_data.num_frames > 1:
            return {}  # clips: no per-clip value of every continuous variable (their recipes refuse full)
        from ..shapes import shapes_continuous_concepts

        return shapes_continuous_concepts(self.train_data.space)

    def train(self, task: TrainingTask, train_data: ConceptImageData | None = None, evaluate: bool = True
              ) -> list[dict[str, Any]]:
        """Train this run's model: ``task`` over the training split (or ``train_data``: a tokenizer's own images) into
        the run's output directory (claimed by :func:`prepare_run`, whose checks of the options, the environment and
        the training split's batch it relies on), evaluated by the probes unless ``evaluate`` is false, from
        ``--init_from``'s weights; the claim is given back when it ends."""
        state = PartialState()
        try:
            trainer = Trainer(self.config, task, self.train_data if train_data is None else train_data, self.graph,
                              self.probes if evaluate else None, self.dataset_name, profile=self.profile,
                              replaced=self.start.replaced if self.start is not None else (), initial=self.initial,
                              options_checked=train_data is None, lenient=self.lenient if evaluate else None)
            records = trainer.train()
            if state.is_main_process:
                report = self.profile.write(self.config.output_dir)
                logger.info("%s", self.profile.table(report))
                if evaluate:
                    print_run_result(self.config.output_dir)
            return records
        finally:
            if self.start is not None:
                self.start.claim.release()

    def train_first_stage(self, task: TrainingTask, train_data: ConceptImageData, output_dir: str | Path,
                          **config_overrides: Any) -> list[dict[str, Any]]:
        """Train a stage that comes before this run's model (a token model's tokenizer, ``OUTPUT/tokenizer``) as a run
        of its own: ``output_dir`` claimed here, ``config_overrides`` (its steps, learning rate) over this run's
        options, checked by the loop (its data and batch are its own), no evaluation, no ``--init_from`` weights."""
        config = dataclasses.replace(self.config, output_dir=str(output_dir), **config_overrides)
        if Path(config.output_dir) == Path(self.config.output_dir):
            raise ValueError(f"a first stage trains into a directory of its own, not the run's {output_dir}")
        state = PartialState()
        start = start_run(config, state.num_processes) if state.is_main_process else None
        try:
            return Trainer(config, task, train_data, self.graph, None, self.dataset_name, profile=self.profile,
                           phase_prefix=f"{Path(config.output_dir).name}: ",
                           replaced=start.replaced if start is not None else ()).train()
        finally:
            if start is not None:
                start.claim.release()


def apply_dataset_defaults(parser: argparse.ArgumentParser, preset: str, argv: list[str] | None) -> dict[str, Any]:
    """Make :data:`DATASET_DEFAULTS` of ``--dataset`` (``"*"``, then ``preset``) the defaults; returns them."""
    dataset = peek_option(parser, "dataset", argv)
    table = DATASET_DEFAULTS.get(dataset, {})
    if dataset and Path(dataset).is_dir() and is_image_folder(dataset):
        table = {"*": {"tokenizer_data": "training-classes"}}
    # Read from the data: without a per-image continuous value "full" conditioning has nothing to feed in.
    from_data = {"conditioning": "quantized"} if carries_continuous_values(dataset) is False else {}
    defined = {a.dest for a in parser._actions}
    values = {k: v for k, v in {**from_data, **table.get("*", {}), **table.get(preset, {})}.items() if k in defined}
    parser.set_defaults(**values)
    if values:
        logger.info("defaults for dataset %s with preset %s: %s", dataset, preset, values)
    return values


def apply_cpu_fp32_defaults(parser: argparse.ArgumentParser, cpu_fp32_presets: dict[str, dict[str, Any]],
                            preset: str, argv: list[str] | None) -> dict[str, Any]:
    """Make ``cpu_fp32_presets[preset]`` the defaults where the run trains in fp32 on a CPU (its ``--mixed_precision``,
    from the flags or the layers below, resolves to ``no`` and no CUDA GPU is present); returns what it applied.

    On a CPU without native bf16 fp32 is all there is, and there the same training takes about twice as long as in
    bf16 on one that has it; a preset may answer with cheaper choices that leave the result unchanged (e.g. the
    channels-last layout, evaluations only where the preset's verdict reads them)."""
    values = cpu_fp32_presets.get(preset, {})
    if not values or torch.cuda.is_available():
        return {}
    if resolve_mixed_precision(peek_option(parser, "mixed_precision", argv)) != "no":
        return {}
    set_known_defaults(parser, values, f"the fp32 entry of preset {preset!r}")
    return values


def keep_last_evaluations(args: argparse.Namespace, fp32_defaults: dict[str, Any], argv: list[str] | None
                          ) -> dict[str, Any]:
    """An fp32 preset's ``eval_start_step`` (evaluations only where the headline's verdict reads them) moved down
    when the run is shorter than the preset's, so that its last three evaluations still happen: a fixed step 600 in
    a 500-step run would leave one, and the headline could never hold. An explicit ``--eval_start_step`` is kept."""
    from ..evaluation.compare import HEADLINE_EVALUATIONS

    if "eval_start_step" not in fp32_defaults or peek_given(argv, "eval_start_step"):
        return fp32_defaults
    steps, interval = int(args.max_train_steps), int(getattr(args, "eval_steps", 0) or 0)
    if interval < 1:
        return fp32_defaults
    last = max(0, (steps // interval - (HEADLINE_EVALUATIONS - 1)) * interval)
    if args.eval_start_step <= last:
        return fp32_defaults
    args.eval_start_step = last
    return fp32_defaults | {"eval_start_step": last}


def given_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> frozenset[str]:
    """The options (their ``dest``) on the command line, under any of their names, not set by a preset or a default:
    for the checks of a flag that another flag makes meaningless (``--codebook_size`` with ``--tokenizer kl``)."""
    words = sys.argv[1:] if argv is None else list(argv)
    given = set()
    for action in parser._actions:
        names = action.option_strings
        if any(word == name or word.startswith(name + "=") for word in words for name in names):
            given.add(action.dest)
    return frozenset(given)


def peek_given(argv: list[str] | None, name: str) -> bool:
    """Whether ``--name`` is on the command line (not a default from any layer)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument(f"--{name}", default=None)
    return pre.parse_known_args(argv)[0].__dict__[name] is not None


IMAGE_HALVINGS: dict[str, int] = {"block_out_channels": 0, "tokenizer_block_out_channels": -1}
"""Width options whose entry count sets how often a model halves the images: the tuple U-Net halves once per
entry, a diffusers ``VQModel`` once per entry but the last; the value is that offset."""


def check_image_size(args: argparse.Namespace, image_size: int, dataset_name: str) -> None:
    """Fail before training when a model's width option (see :data:`IMAGE_HALVINGS`) cannot halve the images that
    many times, e.g. ``--block_out_channels 32,64,64`` (divisor 8) on 28 px shapes, or a tokenizer's
    ``--tokenizer_crop_size`` is larger than the images."""
    crop = getattr(args, "tokenizer_crop_size", None)
    if isinstance(crop, int) and crop > image_size:
        raise ValueError(f"--tokenizer_crop_size {crop} is larger than the images: dataset {dataset_name} has "
                         f"{image_size}x{image_size} images (0: whole images)")
    for option, offset in IMAGE_HALVINGS.items():
        widths = getattr(args, option, None)
        if not isinstance(widths, str):
            continue
        halvings = len(parse_widths(widths, option)) + offset
        if image_size % 2**halvings:
            raise ValueError(
                f"--{option} {widths} halves the images {halvings} times, so their size must be divisible by "
                f"{2**halvings}; dataset {dataset_name} has {image_size}x{image_size} images"
            )


def prepare_run(
    parser: argparse.ArgumentParser,
    presets: dict[str, dict[str, Any]],
    argv: list[str] | None = None,
    validate: Callable[[argparse.Namespace, InitialWeights | None], None] | None = None,
    model_class: type | None = None,
    cpu_fp32_presets: dict[str, dict[str, Any]] | None = None,
    default_dataset: str = "okawa-h32-train1",
    clips: bool | None = False,
) -> tuple[argparse.Namespace, TrainingConfig, TrainingRun]:
    """Add the shared flags, apply the preset and dataset defaults, parse, check every option (the shared ones and the
    script's own through ``validate``, which raises ``ValueError``), then load the data and the probes.
    ``model_class`` (the class the script trains) lets ``--init_from`` refuse another architecture before any work.
    ``--init_from`` is resolved here, once: ``validate`` gets the result with the options, and the run keeps it
    (:attr:`TrainingRun.initial`). ``cpu_fp32_presets`` holds, per preset, the defaults of a run in fp32 on a CPU
    (:func:`apply_cpu_fp32_defaults`); ``default_dataset`` is ``--dataset``'s default, and ``clips`` whether the
    recipe trains on clips (a video recipe) or images: the other kind of data is refused once loaded (``None``:
    either, as a tokenizer trains on images or on clips' frames).

    An invalid option stops the script with an argparse message (exit status 2) before any work is done."""
    parser.add_argument("--preset", choices=sorted(presets), default=None, help="named option set (flags override it)")
    parser.add_argument("--dataset", default=default_dataset,
                        help=f"concept-graph config name, {CELEBA_SOURCE!r}, local exported directory or Hub id")
    parser.add_argument("--dataset_config", default=None,
                        help="config of a directory / Hub dataset (for celeba: of the --celeba_parquet dataset)")
    parser.add_argument("--cache_dir", default=None)
    parser.add_argument("--training_classes", nargs="+", default=None,
                        help="with --dataset FOLDER of your own images: the training classes (one digit per variable)")
    parser.add_argument("--probes_path", default=None,
                        help="saved ConceptProbes (save_pretrained dir or Hub id); default: the default shapes "
                             "probes (trained once, cached), or CNN probes trained on the probe_train split (celeba)")
    parser.add_argument("--no_eval", action="store_true", help="train without the learning-dynamics evaluation")
    parser.add_argument("--accept_weak_probes", action="store_true",
                        help="train even where probes trained on the data read a concept near chance")
    add_celeba_arguments(parser)
    add_training_arguments(parser)
    parser.add_argument("--print_config", action="store_true",
                        help="print every resolved option and the layer that set it, then exit without any work")
    profile = RunProfile()
    preset = apply_preset(parser, presets, argv)
    dataset_defaults = apply_dataset_defaults(parser, preset, argv)
    fp32_defaults = apply_cpu_fp32_defaults(parser, cpu_fp32_presets or {}, preset, argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    fp32_defaults = keep_last_evaluations(args, fp32_defaults, argv)
    if fp32_defaults:
        logger.info("training in fp32 on a CPU: preset %s with its fp32 defaults %s", preset, fp32_defaults)
    if args.print_config:
        print(resolved_options(args, [(f"preset {preset}", set(presets.get(preset, {}))),
                                      ("dataset defaults", set(dataset_defaults)),
                                      ("fp32 defaults", set(fp32_defaults)),
                                      ("command line", set(given_options(parser, argv)))]))
        parser.exit(0)

    # Every option is checked before any work (building data, training probes, a tokenizer), with the output
    # directory claimed (one run per directory; see run_directory) before it is checked.
    state = PartialState(cpu=multi_cpu_launch())
    claim = start = initial = None
    try:
        extra = {k: v for k, v in vars(args).items()
                 if k not in {f for f in TrainingConfig.__dataclass_fields__} and k != "print_config"}
        extra["preset"] = preset
        config = config_from_args(args, extra=extra, extra_defaults={k: parser.get_default(k) for k in extra})
        celeba_options = celeba_builder_options(args)
        _check_dataset_config(args)
        config.check_environment()
        if config.init_from:  # a path that holds no usable weights fails here, not later
            initial = check_init_from(config.init_from, config.output_dir, model_class, clips)
        if state.is_main_process:
            start = start_run(config, state.num_processes)
            claim = start.claim
        if validate is not None:
            args.given_options = given_options(parser, argv)  # after the config: not a training option
            validate(args, initial)
        check_config_bounds("the command line", _bounded_options(args))  # before a model is built on them
        profile.mark_startup()
    except (ValueError, OSError, RunDirectoryInUseError) as error:
        if claim is not None:
            claim.release()
        parser.error(str(error))
    try:
        # Under data parallelism the main process builds the dataset and trains (or caches) the probes first; the
        # others then read both from the caches.
        with state.main_process_first(), profile.phase("startup: dataset (build or load, decode)"):
            dataset_dict, dataset_name = _load_dataset(args, celeba_options)
            train_data, graph = training_data_from(dataset_dict)
            if clips is not None and (train_data.num_frames > 1) != clips:
                raise ValueError(f"--dataset {dataset_name} holds {'clips' if train_data.num_frames > 1 else 'images'}"
                                 f", not {'clips' if clips else 'images'}: train it with a "
                                 f"{'video recipe (maskgit-video, flow-dit-video)' if not clips else 'image recipe'}")
            eval_data = split_tensors(dataset_dict, "test") if "test" in dataset_dict else None
            check_image_size(args, train_data.image_size, dataset_name)
            _check_tokenizer_split(args, dataset_dict, dataset_name)
            check_batch_fits(len(train_data), config.train_batch_size, state.num_processes)
            probe_splits = None
            if not args.no_eval and not args.probes_path and {"probe_train", "probe_val"} <= set(dataset_dict):
                probe_splits = (split_tensors(dataset_dict, "probe_train"), split_tensors(dataset_dict, "probe_val"))
        with state.main_process_first(), profile.phase("startup: probes (load, or train and cache)"):
            probes = None if args.no_eval else load_probes(args.probes_path, train_data, args.seed, probe_splits,
                                                           accept_weak=args.accept_weak_probes)
            lenient = None if args.no_eval else LenientScorer.for_run(eval_data, graph)
    except BaseException as error:
        if claim is not None:
            claim.release()  # and the output directory goes, if this run created it and wrote nothing there
        if isinstance(error, ValueError):
            parser.error(str(error))  # e.g. an option that does not fit the data (image size, batch size)
        raise
    samples = f"clips of {train_data.num_frames} frames" if train_data.num_frames > 1 else "images"
    logger.info("training data %s: %d %s (%d px) of classes %s", dataset_name, len(train_data), samples,
                train_data.image_size, train_data.class_strings())
    run = TrainingRun(config, train_data, graph, probes, dataset_name=dataset_name, eval_data=eval_data, start=start,
                      initial=initial, splits=dataset_dict, profile=profile, lenient=lenient)
    torch.manual_seed(config.seed)  # the script builds its model next: initial weights are a function of --seed
    return args, config, run


def _bounded_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options :data:`~compgen.models.config_bounds.CONFIG_BOUNDS` bounds, widths lists (``"32,64"``) as numbers."""
    options = {}
    for name in CONFIG_BOUNDS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # not a width list: the script's own check names it
                options[name] = list(parse_widths(value, name))
        elif value is not None:
            options[name] = value
    return options


def _check_tokenizer_split(args: argparse.Namespace, dataset_dict, dataset_name: str) -> None:
    """A tokenizer to train on every class (``--tokenizer_data all-classes``) needs the dataset's ``tokenizer``
    split; say so before any training (datasets built before it existed, CelebA and Paper A's files lack it)."""
    from ..data.concept_graph_builder import TOKENIZER_SPLIT

    needed = getattr(args, "tokenizer_data", None) == "all-classes" and not getattr(args, "tokenizer_path", None)
    if needed and TOKENIZER_SPLIT not in dataset_dict:
        raise ValueError(f"--tokenizer_data all-classes trains the tokenizer on the {TOKENIZER_SPLIT!r} split (images "
                         f"of every class), which dataset {dataset_name} lacks (splits: {list(dataset_dict)}); "
                         "rebuild or re-export it with this compgen, or pass --tokenizer_data training-classes")


def _check_dataset_config(args: argparse.Namespace) -> None:
    """``--dataset_config`` names a config of a directory or Hub dataset (or of ``--celeba_parquet``); a builder
    config name already is one."""
    from ..data.concept_graph_builder import ConceptGraphShapes

    if args.dataset_config and args.dataset in ConceptGraphShapes.builder_configs and not Path(args.dataset).is_dir():
        raise ValueError(f"--dataset {args.dataset} is a concept-graph config name; --dataset_config "
                         f"{args.dataset_config!r} only applies to a local export directory or a Hub dataset")
    own = Path(args.dataset).is_dir() and is_image_folder(args.dataset)
    if own and not args.training_classes:
        raise ValueError(f"--dataset {args.dataset} is a folder of your own images: name its training classes with "
                         "--training_classes (one digit per variable, e.g. 00 01 10)")
    if args.training_classes and not (Path(args.dataset).is_dir() or "/" in args.dataset):
        raise ValueError("--training_classes names the training classes of your own images (--dataset FOLDER with a "
                         "metadata.csv or metadata.jsonl, or a directory or Hub id of them); a config's are its own")


def _load_dataset(args: argparse.Namespace, celeba_options: dict[str, Any]):
    """The ``DatasetDict`` named by ``--dataset`` / ``--dataset_config``, and the name the model card gives it."""
    if args.dataset == CELEBA_SOURCE:
        dataset_name = f"{CELEBA_SOURCE}-{args.celeba_config}"
        dataset_dict = load_concept_dataset(CELEBA_SOURCE, args.celeba_config, cache_dir=args.cache_dir,
                                            **celeba_options)
    else:
        own = bool(args.training_classes)
        config_name = args.dataset_config or (args.dataset if not Path(args.dataset).is_dir() else None)
        dataset_name = config_name or args.dataset
        dataset_dict = load_concept_dataset(args.dataset, args.dataset_config, cache_dir=args.cache_dir,
                                            **({"training_classes": args.training_classes} if own else {}))
    return dataset_dict, dataset_name
