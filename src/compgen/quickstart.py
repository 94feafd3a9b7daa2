"""The project's main job on a small CPU default (``make quickstart``): the data, then Paper A's emergence.

``python -m compgen.quickstart --output_dir outputs`` builds the quick start's concept-graph dataset (Okawa et al.
2023's headline split H32-train1 with sizes drawn as its text says, ``okawa-h32-train1-sizes-touching``:
``results/paper-a-sizes/``), exports it in Hugging Face Hub layout to ``<output-dir>/dataset`` and writes a contact
sheet of samples per concept class. After a training run, ``python -m compgen.quickstart --report RUN_DIR`` prints its
per-level accuracy at the last evaluation by both scorers, whether Paper A's headline holds there
(:func:`~compgen.evaluation.compare.headline_held`), and writes the learning-dynamics plots and the sample sheet
(Paper A, Fig. 5: level 2 emerges last).
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from .atomic_io import atomic_write_bytes
from .cli import ArgumentParser
from .data.concept_graph_builder import build_concept_graph_dataset
from .data.export import contact_sheet, export_datasets
from .evaluation.compare import headline_reason as headline_reason  # its home
from .hub import files_to_upload

DEFAULT_CONFIG = "okawa-h32-train1-sizes-touching"


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="outputs", help="where to write the dataset and the contact sheet")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="concept-graph dataset config")
    parser.add_argument("--cache_dir", default=None, help="datasets cache directory")
    parser.add_argument("--report", default=None, metavar="RUN_DIR",
                        help="instead: the per-level table, plots and sample sheet of a trained run")
    args = parser.parse_args(argv)
    if args.report is not None:
        log = Path(args.report) / "learning_dynamics.jsonl"
        if not log.is_file():
            parser.error(f"--report {args.report}: no learning_dynamics.jsonl there (train first)")
        problem = report_problem(Path(args.report))
        if problem:
            parser.error(f"--report {args.report}: {problem}")
        print(run_report(Path(args.report)))
        return
    output_dir = Path(args.output_dir)
    dataset_dir = output_dir / "dataset"
    kept = (dataset_dir / args.config).is_dir() and (dataset_dir / "README.md").is_file()
    if not kept and dataset_dir.exists() and (not dataset_dir.is_dir() or any(dataset_dir.iterdir())):
        parser.error(f"{dataset_dir} holds another export (not {args.config}): choose another --output_dir, or remove "
                     f"{dataset_dir} first")  # checked before building anything

    # 1. Build the dataset: train = training classes only, test = every class of the concept graph.
    dataset = build_concept_graph_dataset(args.config, cache_dir=args.cache_dir)
    print(f"built {args.config}: " + ", ".join(f"{split} {len(rows)} rows" for split, rows in dataset.items()))

    # 2. Export it in Hub layout (loads with datasets.load_dataset(<dir>, <config>)). A rerun finds the export of the
    #    first run (the dataset is deterministic) and keeps it.
    if kept:
        print(f"kept the export in {dataset_dir}")
    else:
        export_datasets({args.config: dataset}, dataset_dir)
        print(f"wrote {dataset_dir}: {', '.join(files_to_upload(dataset_dir))}")

    # 3. Contact sheet: one row per concept class (with its level), samples of the test split.
    sheet_path = output_dir / "contact_sheet.png"
    atomic_write_bytes(sheet_path, _png_bytes(contact_sheet(dataset["test"], samples_per_class=10)))
    print(f"wrote {sheet_path}")


def report_problem(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot be reported on, before any plotting: a log with no evaluation, a log of something else
    (no per-level accuracy), or a folder its figures cannot be written into; ``None`` when it can."""
    import os

    from .evaluation.tracker import own_records, read_log

    try:
        records = read_log(run_dir / "learning_dynamics.jsonl")
    except (ValueError, UnicodeDecodeError) as error:
        return f"learning_dynamics.jsonl is not a learning-dynamics log ({error})"
    if not records:
        return "learning_dynamics.jsonl holds no evaluation yet (the run stopped before its first evaluation)"
    needed = ("step", "level_accuracy", "chance")
    foreign = [index for index, record in enumerate(records, start=1)
               if not isinstance(record, dict) or any(key not in record for key in needed)]
    if foreign:
        return (f"learning_dynamics.jsonl line {foreign[0]} is not an evaluation record (it lacks one of {needed}): "
                "is this a compgen training run?")
    if not own_records(records):
        return ("learning_dynamics.jsonl holds only the source run's records of a fine-tuning run (--init_from): "
                "it stopped before its own first evaluation")
    figures = run_dir / "figures"
    if not os.access(figures if figures.is_dir() else run_dir, os.W_OK):
        return f"the plots go to {figures}, which cannot be written here"
    return None


def run_report(run_dir: Path) -> str:
    """The per-level accuracy at a run's last evaluation by both scorers, the headline's verdict, and where its
    plots and sample sheet are (written into ``run_dir/figures``)."""
    from .evaluation.compare import result_lines
    from .evaluation.plots import plot_all
    from .evaluation.tracker import own_records, read_log

    records = own_records(read_log(run_dir / "learning_dynamics.jsonl"))  # a fine-tuning run: its own phase
    paths = plot_all(run_dir / "learning_dynamics.jsonl", run_dir / "figures", samples_dir=run_dir / "samples")
    lines = result_lines(records)
    named = {path.stem: path for path in paths}
    for stem, text in (("learning_dynamics", "learning dynamics"), ("samples", "sample sheet"),
                       ("emergence_order", "order of emergence")):
        if stem in named:
            lines.append(f"{text}: {named[stem]}")
    return "\n".join(lines)




def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


if __name__ == "__main__":
    main()
