"""Train any model family (or a tokenizer) by its recipe's name, from an installed package::

    python -m compgen.train tuple-unet --preset quickstart --output_dir runs/unet
    accelerate launch -m compgen.train maskgit --preset cpu-quick --output_dir runs/maskgit
    python -m compgen.train mar --help

The names are :func:`compgen.families.recipes`' (the model families' rows and ``tokenizer``); everything after the
name goes to that recipe's own parser (``compgen.recipes.<name>``), exactly as to ``examples/train_<name>.py``.
"""

from __future__ import annotations

import argparse
import sys

from .cli import ArgumentParser
from .families import recipes
from .recipes import load_recipe


def main(argv: list[str] | None = None) -> object:
    argv = sys.argv[1:] if argv is None else list(argv)
    known = recipes()
    parser = ArgumentParser(prog="python -m compgen.train", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", choices=list(known), help="the family (or tokenizer) to train")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the recipe's options (see RECIPE --help)")
    # The recipe's own flags (--help included) follow its name: only what comes before it is parsed here.
    if not argv:
        parser.error(f"name a recipe: {', '.join(known)}")
    args = parser.parse_args(argv[:1] if not argv[0].startswith("-") else argv)
    saved = sys.argv[0]
    sys.argv[0] = f"python -m compgen.train {args.recipe}"  # the recipe's usage line names this command
    try:
        return load_recipe(args.recipe).main(argv[1:])
    finally:
        sys.argv[0] = saved


if __name__ == "__main__":
    main()
