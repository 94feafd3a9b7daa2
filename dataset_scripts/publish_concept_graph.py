"""Build concept-graph configs of the shapes dataset (or of the clips), export them in Hub layout, optionally push.

    python dataset_scripts/publish_concept_graph.py --output_dir DIR [--configs NAME ...] [--push_to_hub REPO_ID]
    python dataset_scripts/publish_concept_graph.py --clips --output_dir DIR      # the clips' configs (docs/clips.md)

The export (Parquet per config and split, README dataset card, contact sheets; for clips frame strips and a GIF)
loads offline with ``datasets.load_dataset(DIR, "<config>")`` exactly as from the Hub.
"""

from __future__ import annotations

from pathlib import Path

from compgen.atomic_io import check_writable_directory
from compgen.cli import ArgumentParser
from compgen.data.clips_builder import ConceptGraphClips
from compgen.data.clips_export import export_clip_configs
from compgen.data.concept_graph_builder import ConceptGraphShapes
from compgen.data.export import export_concept_graph_configs, push_export_to_hub
from compgen.hub import check_hub_access, files_to_upload


def main(argv: list[str] | None = None) -> None:
    shapes = [config.name for config in ConceptGraphShapes.BUILDER_CONFIGS]
    clips = [config.name for config in ConceptGraphClips.BUILDER_CONFIGS]
    parser = ArgumentParser(description="Export concept-graph shapes (or clips) configs in Hugging Face Hub layout.")
    parser.add_argument("--clips", action="store_true", help="export the clips' configs (compgen.data.clips_builder)")
    parser.add_argument("--output_dir", required=True,
                        help="export directory: new or empty (written atomically), or any with --overwrite")
    parser.add_argument("--overwrite", action="store_true", help="replace what --output_dir holds")
    parser.add_argument("--configs", nargs="+", default=None, choices=shapes + clips,
                        help="configs to export (default: every config of the kind)")
    parser.add_argument("--cache_dir", default=None, help="datasets cache directory for building")
    parser.add_argument("--push_to_hub", metavar="REPO_ID", default=None, help="also upload to this dataset repo")
    parser.add_argument("--token", default=None, help="Hub token (default: the logged-in token)")
    args = parser.parse_args(argv)
    kind = clips if args.clips else shapes
    args.configs = args.configs or kind
    other = [name for name in args.configs if name not in kind]
    if other:
        parser.error(f"--configs {' '.join(other)}: {'shapes' if args.clips else 'clips'} configs; export them "
                     f"{'without' if args.clips else 'with'} --clips, into a directory of their own")
    try:
        check_writable_directory(Path(args.output_dir), args.overwrite)
        if args.push_to_hub:  # before the rendering and the export, not after them
            check_hub_access(args.token)
    except (FileExistsError, ValueError) as error:
        parser.error(str(error))

    export = export_clip_configs if args.clips else export_concept_graph_configs
    output_dir = export(args.configs, args.output_dir, cache_dir=args.cache_dir, overwrite=args.overwrite)
    files = files_to_upload(output_dir)
    print(f"exported {len(args.configs)} configs to {output_dir}:")
    for name in files:
        print(f"  {name}")
    if args.push_to_hub:
        commit = push_export_to_hub(output_dir, args.push_to_hub, token=args.token)
        print(f"pushed to https://huggingface.co/datasets/{args.push_to_hub} ({commit.commit_url})")


if __name__ == "__main__":
    main()
