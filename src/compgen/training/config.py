"""The options every training script shares: :class:`TrainingConfig`, its command-line flags, and the machine.

Each field of :class:`TrainingConfig` is a ``--flag`` (:func:`add_training_arguments`, :func:`config_from_args`) and is
checked when the config is built, so a script fails before any work. :data:`RUN_OPTIONS` says which fields a resumed
run may change.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch

from .acceleration import ATTENTION_KERNELS, parse_compile_mode

EMA_SCHEDULES = ("warmup", "constant")
"""The momentum schedules of the EMA weights (``--ema_schedule``; :class:`~compgen.training.ema.MomentumSchedule`)."""

LENGTH_FREE_LR_SCHEDULES = ("constant", "constant_with_warmup", "piecewise_constant")
"""Learning-rate schedules that do not depend on ``max_train_steps``."""

RUN_OPTIONS = ("output_dir", "resume_from_checkpoint", "overwrite_output_dir", "checkpointing_steps",
               "checkpoints_total_limit", "eval_steps", "eval_steps_held", "eval_schedule", "eval_start_step",
               "eval_images_per_class",
               "eval_mixed_precision", "logging_steps", "report_to", "push_to_hub", "hub_model_id", "hub_token",
               "hub_private", "max_train_steps", "gradient_checkpointing")
"""Training options that may differ between a run and its resumption; every other one must match. They do not change
the steps a run takes: where and how often things are written, and how long to train. The length only while nothing
is scheduled over it (a learning rate of :data:`LENGTH_FREE_LR_SCHEDULES`, no task schedule over the length): then a
longer run repeats the shorter one's steps exactly and goes on; otherwise resume refuses another length."""


@dataclass
class TrainingConfig:
    """Options shared by every training script (each becomes a ``--flag``)."""

    output_dir: str = "outputs/model"
    seed: int = 0
    """Seeds the model's initial weights and, unless given apart, the data order and the training's random draws."""
    data_seed: int | None = None
    """Seeds the order of the training examples (default: ``seed``): given apart from ``seed``, the initialisation's
    part in a result is told from the data order's."""
    noise_seed: int | None = None
    """Seeds every random draw of a training step: diffusion noise and timesteps, masks, concept dropout (default:
    ``seed``)."""
    train_batch_size: int = 64
    """Examples per process per optimizer step (the global batch is this times the number of processes)."""
    max_train_steps: int = 1000
    learning_rate: float = 1e-4
    lr_scheduler: str = "constant"
    lr_warmup_steps: int = 0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    gradient_accumulation_steps: int = 1
    mixed_precision: str = "no"
    """``no``, ``fp16`` (CUDA only), ``bf16``, or ``auto``: bf16 where the hardware computes it natively (CUDA GPUs
    with bf16, CPUs with AVX-512 BF16 or AMX), fp32 elsewhere, where bf16 autocast is far slower than fp32
    (``docs/performance.md``)."""
    torch_compile: bool | str = False
    """Compile the model with ``torch.compile`` (Accelerate's inductor backend) and sample the evaluations with it:
    ``--torch_compile`` alone for inductor's default mode, or ``--torch_compile MODE`` (``reduce-overhead``: CUDA
    graphs; ``max-autotune``; see :data:`~compgen.training.acceleration.COMPILE_MODES`). Off by default: on a CPU it
    compiles for minutes before the first step."""
    checkpointing_steps: int = 500
    checkpoints_total_limit: int | None = 2
    resume_from_checkpoint: str | None = None
    overwrite_output_dir: bool = False
    init_from: str | None = None
    """Fine-tune: start from another run's weights (its export, one checkpoint, or its run directory) instead of
    ``--seed``'s; the log starts with that run's records (:mod:`compgen.training.fine_tuning`)."""
    use_ema: bool = True
    ema_decay: float = 0.999
    ema_schedule: str = "warmup"
    """The EMA weights' momentum: ``warmup`` (``min(ema_decay, (1 + step) / (10 + step))``: the average forgets the
    initial weights within the first steps) or ``constant`` (``ema_decay`` from the first step, as MaskGIT's code
    keeps its evaluation weights: at 0.9999 about 45% of the initial weights remain after 8000 steps)."""
    eval_steps: int = 500
    eval_steps_held: int | None = None
    """Evaluate at the multiples of this many steps instead of ``eval_steps`` while the levels hold, i.e. no level's
    accuracy by either scorer moved by more than 0.05 over the last three evaluations; back to ``eval_steps`` as soon
    as one does (:func:`~compgen.evaluation.tracker.levels_held`). ``None``: every ``eval_steps`` throughout."""
    eval_schedule: str = "linear"
    """``linear``: evaluate every ``eval_steps``; ``log``: at ``eval_steps`` times 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20,
    24, ... (three per doubling, :func:`log_spaced_multiple`), so that a long run spends little on evaluation and its
    curves read evenly on a log-scaled step axis (Paper B's figures)."""
    eval_start_step: int = 0
    """No evaluation before this step (the last step is evaluated all the same): a run that only needs its last
    evaluations, such as the headline check of :func:`compgen.evaluation.compare.headline_held` (the last three),
    skips the cost of the earlier ones. Evaluation draws from generators of its own, so the training, and with it
    every evaluation that does run, is the same whatever this is."""
    eval_images_per_class: int = 50
    eval_mixed_precision: str | None = None
    """Precision of the evaluation's sampling: ``no``, ``fp16`` (CUDA only), ``bf16``, ``auto`` as ``mixed_precision``,
    or ``None`` for the training's. The scorers always judge in fp32. Kept in every evaluation record's ``sampling``."""
    logging_steps: int = 50
    report_to: str | None = None
    push_to_hub: bool = False
    hub_model_id: str | None = None
    hub_token: str | None = None
    hub_private: bool = False
    gradient_checkpointing: bool = False
    """Recompute each block's activations in the backward pass instead of keeping them (diffusers'
    ``enable_gradient_checkpointing`` on every model of the task that supports it): less memory, more time, the same
    gradients (:func:`~compgen.training.acceleration.enable_gradient_checkpointing`)."""
    attention_kernel: str = "auto"
    """The kernel of ``scaled_dot_product_attention`` in training: ``auto`` (PyTorch's pick), ``math``, ``flash``,
    ``efficient`` or ``cudnn`` (:data:`~compgen.training.acceleration.ATTENTION_KERNELS`). A choice of
    implementation: ``math`` is the faster one for bf16 training on a CPU with AMX (``docs/performance.md``)."""
    channels_last: bool = False
    """Train with the model's convolution weights and the image batches in channels-last memory layout: the same
    arithmetic in another order (float rounding aside), faster for some CPU convolutions: on a CPU the U-Net's fp32
    step gains from it and its bf16 step loses, so it is off by default (``docs/performance.md``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Script-specific hyperparameters, recorded in the trackers and the model card."""
    extra_defaults: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The script's defaults of ``extra`` (not recorded): a resumed run whose checkpoint predates one of the script's
    options matches it while this run keeps that option's default."""

    def __post_init__(self) -> None:
        self.torch_compile = parse_compile_mode(self.torch_compile)
        if self.mixed_precision not in ("no", "fp16", "bf16", "auto"):
            raise ValueError(f"mixed_precision must be no, fp16, bf16 or auto, got {self.mixed_precision!r}")
        if self.eval_steps_held is not None and self.eval_steps_held < 1:
            raise ValueError(f"eval_steps_held must be at least 1 or none, got {self.eval_steps_held}")
        if self.ema_schedule not in EMA_SCHEDULES:
            raise ValueError(f"ema_schedule must be one of {', '.join(EMA_SCHEDULES)}, got {self.ema_schedule!r}")
        if self.eval_schedule not in ("linear", "log"):
            raise ValueError(f"eval_schedule must be linear or log, got {self.eval_schedule!r}")
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise ValueError(f"attention_kernel must be one of {', '.join(ATTENTION_KERNELS)}, got "
                             f"{self.attention_kernel!r}")
        if self.eval_mixed_precision not in (None, "no", "fp16", "bf16", "auto"):
            raise ValueError(f"eval_mixed_precision must be no, fp16, bf16, auto or none (the training's), got "
                             f"{self.eval_mixed_precision!r}")
        for name in ("train_batch_size", "max_train_steps", "gradient_accumulation_steps", "checkpointing_steps",
                     "eval_steps", "logging_steps", "eval_images_per_class"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("lr_warmup_steps", "adam_weight_decay", "max_grad_norm", "eval_start_step"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be a positive number, got {self.learning_rate}")
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1):
            raise ValueError(f"adam betas must lie in [0, 1), got {self.adam_beta1}, {self.adam_beta2}")
        if not 0 <= self.ema_decay <= 1:
            raise ValueError(f"ema_decay must lie in [0, 1], got {self.ema_decay}")
        if self.checkpoints_total_limit is not None and self.checkpoints_total_limit < 1:
            raise ValueError(f"checkpoints_total_limit must be at least 1 or none, got {self.checkpoints_total_limit}")
        from diffusers.optimization import SchedulerType

        schedules = [s.value for s in SchedulerType]
        if self.lr_scheduler not in schedules:
            raise ValueError(f"lr_scheduler must be one of {schedules}, got {self.lr_scheduler!r}")
        if self.push_to_hub and not self.hub_model_id:
            raise ValueError("--push_to_hub needs --hub_model_id ORG/NAME")
        if self.resume_from_checkpoint and self.overwrite_output_dir:
            raise ValueError("--resume_from_checkpoint continues the run in --output_dir; --overwrite_output_dir "
                             "discards it: give one of them")

    @property
    def seeds(self) -> tuple[int, int]:
        """``(data order, training draws)``: ``data_seed`` and ``noise_seed``, each ``seed`` where not given."""
        return (self.seed if self.data_seed is None else self.data_seed,
                self.seed if self.noise_seed is None else self.noise_seed)

    def evaluation_due(self, step: int, held: bool = False) -> bool:
        """Whether the loop evaluates after optimizer step ``step`` (the last step is evaluated by the loop itself):
        every ``eval_steps`` (``eval_steps_held`` while the levels hold), or on the log-spaced ladder, from
        ``eval_start_step`` on."""
        interval = self.eval_steps_held if held and self.eval_steps_held else self.eval_steps
        if step < self.eval_start_step or step % interval:
            return False
        return self.eval_schedule == "linear" or log_spaced_multiple(step // interval)

    @property
    def trackers(self) -> list[str]:
        """The trackers of ``--report_to`` (comma-separated; ``none`` or empty: none)."""
        names = [name.strip() for name in (self.report_to or "").split(",")]
        return [name for name in names if name and name != "none"]

    def check_environment(self) -> None:
        """Raise ``ValueError`` if this machine cannot do what the options ask, before any work rather than after
        the training: a ``--report_to`` tracker that is unknown or not installed, ``--push_to_hub`` without Hub
        access (see :func:`compgen.hub.check_hub_access`), fp16 autocast without a CUDA GPU."""
        for name in ("mixed_precision", "eval_mixed_precision"):
            if getattr(self, name) == "fp16" and not torch.cuda.is_available():
                raise ValueError(f"--{name} fp16 needs a CUDA GPU (CPU autocast has no fp16); use bf16 or no")
        if self.trackers:
            from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers

            installed = [tracker.value for tracker in get_available_trackers()]
            for name in self.trackers:
                if name != "all" and name not in LOGGER_TYPE_TO_CLASS:
                    raise ValueError(f"--report_to {name}: unknown tracker; choose from all, none, "
                                     f"{', '.join(sorted(LOGGER_TYPE_TO_CLASS))}")
                if name not in installed and (name != "all" or not installed):
                    what = "no tracker is installed" if name == "all" else f"{name} is not installed"
                    raise ValueError(f"--report_to {name}: {what}, so nothing would be tracked (installed: "
                                     f"{', '.join(installed) or 'none'})")
        if self.push_to_hub:
            from ..hub import check_hub_access

            check_hub_access(self.hub_token)

    def resolved(self) -> TrainingConfig:
        """These options with ``auto`` precision resolved (:func:`resolve_mixed_precision`; the evaluation's defaults
        to the training's): what a run trains with and its checkpoints record, so what a resume is compared on."""
        precision = resolve_mixed_precision(self.mixed_precision)
        eval_precision = resolve_mixed_precision(self.eval_mixed_precision or precision)
        return replace(self, mixed_precision=precision, eval_mixed_precision=eval_precision)

    def _options(self) -> dict[str, Any]:
        """Every option as a dict (``extra_defaults`` is no option)."""
        options = asdict(self)
        options.pop("extra_defaults")
        return options

    def fingerprint(self) -> str:
        """A hash of every option that changes the training trajectory (all but :data:`RUN_OPTIONS`)."""
        values = {k: v for k, v in self._options().items() if k not in RUN_OPTIONS}
        return hashlib.sha256(json.dumps(jsonable(values), sort_keys=True).encode()).hexdigest()[:16]

    def to_json_dict(self) -> dict[str, Any]:
        """Every option as JSON values (what a checkpoint records, to compare a resumed run's options with)."""
        return jsonable(self._options())

    def tracker_config(self) -> dict[str, Any]:
        """The options as flat scalars for the trackers (``extra`` spread as ``extra/<name>``, no Hub token)."""
        flat = {k: v for k, v in self._options().items() if k not in ("extra", "hub_token")}
        flat.update({f"extra/{k}": v for k, v in self.extra.items()})
        return {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flat.items()}


def log_spaced_multiple(multiple: int) -> bool:
    """Whether ``multiple`` is on the log-spaced ladder 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, ... (1 to 4, then
    4, 5 and 6 times each power of two: three evaluations per doubling of the step count)."""
    if multiple < 1:
        return False
    if multiple <= 4:
        return True
    while multiple % 2 == 0 and multiple > 6:
        multiple //= 2
    return multiple in (4, 5, 6)


def resolve_mixed_precision(mixed_precision: str) -> str:
    """``auto`` -> ``bf16`` where bf16 is native (a CUDA GPU that supports it, or a CPU with AVX-512 BF16 or AMX),
    else ``no``; any other value is returned as given."""
    if mixed_precision != "auto":
        return mixed_precision
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    native = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)() or getattr(
        torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return "bf16" if native else "no"


def multi_cpu_launch() -> bool:
    """Whether this process is one of several launched on a machine without CUDA (``torchrun`` on CPUs).

    Accelerate forms a CPU (gloo) process group only when told to use the CPU; without it, each process would
    train alone and write the same files. :class:`Trainer` and :func:`compgen.launch.run_setup.prepare_run` ask
    Accelerate for the CPU exactly then.
    """
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def add_training_arguments(parser: argparse.ArgumentParser, defaults: dict[str, Any] | None = None) -> None:
    """Add one ``--flag`` per :class:`TrainingConfig` field (except ``extra`` and ``extra_defaults``) to an argparse
    parser."""
    defaults = defaults or {}
    for f in fields(TrainingConfig):
        if f.name in ("extra", "extra_defaults"):
            continue
        default = defaults.get(f.name, f.default)
        if f.type in ("bool", bool):
            parser.add_argument(f"--{f.name}", action="store_true", default=default)
            parser.add_argument(f"--no_{f.name}", dest=f.name, action="store_false")
        elif f.type == "bool | str":  # a switch that may name a mode: --torch_compile [MODE]
            parser.add_argument(f"--{f.name}", nargs="?", const=True, default=default, metavar="MODE")
            parser.add_argument(f"--no_{f.name}", dest=f.name, action="store_false")
        else:
            kind = {"int": int, "float": float}.get(str(f.type), None)
            if str(f.type).startswith("int |"):
                kind = _optional_int
            parser.add_argument(f"--{f.name}", type=kind or str, default=default)


def _optional_int(text: str) -> int | None:
    """An ``int`` flag that also takes ``none`` (e.g. ``--checkpoints_total_limit none``: no limit)."""
    return None if text.lower() in ("none", "") else int(text)


def config_from_args(args: argparse.Namespace, extra: dict[str, Any] | None = None,
                     extra_defaults: dict[str, Any] | None = None) -> TrainingConfig:
    """The :class:`TrainingConfig` of parsed flags; ``extra`` holds the script's own options (for the card),
    ``extra_defaults`` their defaults (for resuming runs older than an option)."""
    names = {f.name for f in fields(TrainingConfig)} - {"extra", "extra_defaults"}
    return TrainingConfig(**{name: getattr(args, name) for name in names}, extra=extra or {},
                          extra_defaults=extra_defaults or {})


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (anything else as its ``str``)."""
    return json.loads(json.dumps(value, default=str))
