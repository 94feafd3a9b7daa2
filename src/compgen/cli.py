"""Command-line plumbing shared by every compgen command (training scripts, probe training, dataset scripts).

It sits just above ``compgen.data`` (whose CelebA location it reads) and below the models: the commands of the
library (training scripts, ``python -m compgen.evaluation...`` commands, probe training) import it; nothing it
imports reaches past ``data``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from .data.loading import CELEBA_SOURCE
from .option_names import RENAMED_OPTIONS

CELEBA_FLAGS = ("celeba_dir", "celeba_parquet", "celeba_training_classes")
CELEBA_CONFIG_NAMES = ("cpu", "default")
"""The CelebA builder's configs (:class:`~compgen.data.celeba.CelebAConcepts`; a test holds the two together),
named here so that a run on other data does not import the CelebA modules."""


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with one option spelling across every compgen command, ``--output_dir`` as in the
    training scripts (and diffusers' examples). The hyphenated spelling of an option (``--output-dir``) is still
    accepted for a release, with a ``FutureWarning`` naming the new spelling. A prefix of a flag is not that flag
    (``allow_abbrev=False``): ``--codebook 64`` is refused, not read as ``--codebook_size 64`` behind the checks of
    which options were given, which match full names."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        known = {option for action in self._actions for option in action.option_strings}
        rewritten = []
        for token in sys.argv[1:] if args is None else list(args):
            name, equals, value = token.partition("=")
            spelled = "--" + name[2:].replace("-", "_")
            if name.startswith("--") and "-" in name[2:] and name not in known and spelled in known:
                warnings.warn(f"{name} is spelled {spelled} now; the old spelling goes in a later release",
                              FutureWarning, stacklevel=2)
                token = spelled + equals + value
            rewritten.append(token)
        return super().parse_known_args(rewritten, namespace)


def add_renamed_argument(group: argparse._ActionsContainer, flag: str, **kwargs: Any) -> argparse.Action:
    """``group.add_argument(flag, **kwargs)`` with the flag's old name (:data:`~compgen.option_names.RENAMED_OPTIONS`)
    as an alias: the value lands in the new name, and the old one, when used, warns with a ``FutureWarning`` naming
    the new one."""
    new = flag.removeprefix("--")
    old = next(name for name, renamed in RENAMED_OPTIONS.items() if renamed == new)
    action = group.add_argument(flag, f"--{old}", **kwargs)

    class DeprecatedAlias(type(action)):  # the action argparse chose, warning when called by the old name
        def __call__(self, parser, namespace, values, option_string=None):
            if option_string is not None and option_string.lstrip("-").removeprefix("no-") == old:
                warnings.warn(f"{option_string} is deprecated: use {option_string.replace(old, new)} (the old name "
                              "goes in a later release)", FutureWarning, stacklevel=2)
            super().__call__(parser, namespace, values, option_string)

    action.__class__ = DeprecatedAlias
    return action


def apply_preset(parser: argparse.ArgumentParser, presets: dict[str, dict[str, Any]], argv: list[str] | None) -> str:
    """Parse ``--preset`` first and make its values the defaults, so explicit flags still win."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--preset", choices=sorted(presets), default=None)
    known, _ = pre.parse_known_args(argv)
    if known.preset:
        set_known_defaults(parser, presets[known.preset], f"preset {known.preset!r}")
    return known.preset or "none"


def set_known_defaults(parser: argparse.ArgumentParser, values: dict[str, Any], source: str) -> None:
    """Make ``values`` the defaults of ``parser``, refusing (``ValueError`` naming ``source``) options it lacks."""
    unknown = set(values) - {a.dest for a in parser._actions}
    if unknown:
        raise ValueError(f"{source} sets unknown options {sorted(unknown)}")
    parser.set_defaults(**values)


def peek_option(parser: argparse.ArgumentParser, name: str, argv: list[str] | None) -> Any:
    """The value ``--name`` will parse to (from ``argv``, else ``parser``'s default so far), read before the full
    parse: the layers of defaults that depend on it (``--dataset``, ``--mixed_precision``) are applied first."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument(f"--{name}", default=parser.get_default(name))
    return getattr(pre.parse_known_args(argv)[0], name)


def parse_widths(text: str, option: str) -> tuple[int, ...]:
    """A comma-separated width flag (``--block_out_channels 32,64``) as integers: the one parser of every such flag."""
    try:
        return tuple(int(width) for width in text.split(","))
    except ValueError:
        raise ValueError(f"--{option} must be comma-separated integers, got {text!r}") from None


def add_celeba_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that locate a local CelebA copy for ``--dataset celeba`` (see :mod:`compgen.data.celeba`, which a run
    on other data never imports)."""
    group = parser.add_argument_group("CelebA (--dataset celeba)")
    group.add_argument("--celeba_dir", "--celeba-dir", dest="celeba_dir", default=None,
                       help="official CelebA tree: img_align_celeba/, list_attr_celeba.txt, list_eval_partition.txt")
    group.add_argument("--celeba_parquet", "--celeba-parquet", dest="celeba_parquet", default=None,
                       help="CelebA with attribute columns as Parquet: a local file or directory, or a Hub dataset id "
                            "(its config name goes in --dataset_config)")
    group.add_argument("--celeba_config", "--celeba-config", dest="celeba_config", default="default",
                       choices=list(CELEBA_CONFIG_NAMES),
                       help="builder config: default (64 px, paper caps) or cpu (32 px, smaller caps)")
    group.add_argument("--celeba_training_classes", "--celeba-training-classes", dest="celeba_training_classes",
                       default=None, help="comma-separated training classes (default 000,001,010,100)")


def celeba_builder_options(args: argparse.Namespace) -> dict[str, Any]:
    """CelebA builder keyword arguments from the flags (``{}`` for other datasets, whose use of them is an error)."""
    if args.dataset != CELEBA_SOURCE:
        given = [f"--{name}" for name in CELEBA_FLAGS if getattr(args, name, None)]
        if given:
            raise ValueError(
                f"{', '.join(given)} only apply to --dataset {CELEBA_SOURCE} (got --dataset {args.dataset})"
            )
        return {}
    if (args.celeba_dir is None) == (args.celeba_parquet is None):
        raise ValueError(
            f"--dataset {CELEBA_SOURCE} needs exactly one of --celeba_dir DIR (the official tree with "
            "img_align_celeba/, list_attr_celeba.txt, list_eval_partition.txt) or --celeba_parquet PATH_OR_HUB_ID"
        )
    if args.celeba_dir is not None:
        options: dict[str, Any] = {"data_dir": args.celeba_dir}
    else:
        options = {"parquet": args.celeba_parquet, "parquet_config": args.dataset_config}
    if args.celeba_training_classes:
        options["training_classes"] = tuple(c.strip() for c in args.celeba_training_classes.split(",") if c.strip())
    return options


def resolved_options(args: argparse.Namespace, layers: list[tuple[str, set[str]]]) -> str:
    """Every option's resolved value and the layer that set it, as ``--print_config`` prints it. ``layers`` lists, from
    the lowest to the highest, each layer's name and the options it set (a preset, dataset defaults, the command
    line); an option no layer set is the parser's ``default``."""
    rows = []
    for name, value in sorted(vars(args).items()):
        source = next((layer for layer, names in reversed(layers) if name in names), "default")
        rows.append(f"{name} = {value!r}  [{source}]")
    return "\n".join(rows)
