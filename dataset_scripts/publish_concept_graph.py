"""Build concept-graph configs of the shapes dataset, export them in Hub layout and optionally push them.

    python dataset_scripts/publish_concept_graph.py --output_dir DIR [--configs NAME ...] [--push_to_hub REPO_ID]

The export (Parquet per config and split, README dataset card, contact sheets) loads offline with
``datasets.load_dataset(DIR, "<config>")`` exactly as from the Hub.
"""

from __future__ import annotations

from pathlib import Path

from compgen.atomic_io import check_writable_directory
from compgen.cli import ArgumentParser
from compgen.data.concept_graph_builder import ConceptGraphShapes
from compgen.data.export import export_concept_graph_configs, push_export_to_hub
from compgen.hub import files_to_upload


def main(argv: list[str] | None = None) -> None:
    available = [config.name for config in ConceptGraphShapes.BUILDER_CONFIGS]
    parser = ArgumentParser(description="Export concept-graph shapes configs in Hugging Face Hub layout.")
    parser.add_argument("--output_dir", required=True,
                        help="export directory: new or empty (written atomically), or any with --overwrite")
    parser.add_argument("--overwrite", action="store_true", help="replace what --output_dir holds")
    parser.add_argument("--configs", nargs="+", default=available, choices=available, help="configs to export")
    parser.add_argument("--cache_dir", default=None, help="datasets cache directory for building")
    parser.add_argument("--push_to_hub", metavar="REPO_ID", default=None, help="also upload to this dataset repo")
    parser.add_argument("--token", default=None, help="Hub token (default: the logged-in token)")
    args = parser.parse_args(argv)
    try:
        check_writable_directory(Path(args.output_dir), args.overwrite)
    except FileExistsError as error:
        parser.error(str(error))

    output_dir = export_concept_graph_configs(args.configs, args.output_dir, cache_dir=args.cache_dir,
                                              overwrite=args.overwrite)
    files = files_to_upload(output_dir)
    print(f"exported {len(args.configs)} configs to {output_dir}:")
    for name in files:
        print(f"  {name}")
    if args.push_to_hub:
        commit = push_export_to_hub(output_dir, args.push_to_hub, token=args.token)
        print(f"pushed to https://huggingface.co/datasets/{args.push_to_hub} ({commit.commit_url})")


if __name__ == "__main__":
    main()
