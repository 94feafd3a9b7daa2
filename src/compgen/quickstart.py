"""The project's main job on a small CPU default: ``python -m compgen.quickstart --output_dir outputs``.

Steps: build the default concept-graph dataset (Okawa et al. 2023's ``okawa-h32-train1``), export it in
Hugging Face Hub layout to ``<output-dir>/dataset`` and write a contact sheet of samples per concept class.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from .atomic_io import atomic_write_bytes
from .cli import ArgumentParser
from .data.concept_graph_builder import build_concept_graph_dataset
from .data.export import contact_sheet, export_datasets
from .hub import files_to_upload

DEFAULT_CONFIG = "okawa-h32-train1"


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="outputs", help="where to write the dataset and the contact sheet")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="concept-graph dataset config")
    parser.add_argument("--cache_dir", default=None, help="datasets cache directory")
    args = parser.parse_args(argv)
    output_dir = Path(args.output_dir)

    # 1. Build the dataset: train = training classes only, test = every class of the concept graph.
    dataset = build_concept_graph_dataset(args.config, cache_dir=args.cache_dir)
    print(f"built {args.config}: " + ", ".join(f"{split} {len(rows)} rows" for split, rows in dataset.items()))

    # 2. Export it in Hub layout (loads with datasets.load_dataset(<dir>, <config>)). A rerun finds the export of the
    #    first run (the dataset is deterministic) and keeps it.
    dataset_dir = output_dir / "dataset"
    if (dataset_dir / args.config).is_dir() and (dataset_dir / "README.md").is_file():
        print(f"kept the export in {dataset_dir}")
    else:
        export_datasets({args.config: dataset}, dataset_dir)
        print(f"wrote {dataset_dir}: {', '.join(files_to_upload(dataset_dir))}")

    # 3. Contact sheet: one row per concept class (with its level), samples of the test split.
    sheet_path = output_dir / "contact_sheet.png"
    atomic_write_bytes(sheet_path, _png_bytes(contact_sheet(dataset["test"], samples_per_class=10)))
    print(f"wrote {sheet_path}")


def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


if __name__ == "__main__":
    main()
