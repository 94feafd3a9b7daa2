"""Publish CelebA concept-graph split definitions (image ids, tuples, splits, levels) as a Hub-layout Parquet dataset.

Examples::

    # definitions of the default split from the official download, written locally
    python dataset_scripts/publish_celeba_splits.py --data_dir /data/celeba --output_dir celeba-splits

    # from a Parquet mirror, a custom training set, pushed to the Hub
    python dataset_scripts/publish_celeba_splits.py --parquet flwrlabs/celeba --parquet_config img_align+identity+attr \
        --config_name train-000-011 --training_classes 000 011 101 110 --output_dir out --push_to_hub user/celeba-splits

Images are never included unless ``--include_images`` is given, which prints CelebA's license terms first and
then requires ``--accept_celeba_license``; image pushes always go to a private repository.
"""

from __future__ import annotations

import argparse
import sys

from compgen.cli import ArgumentParser
from compgen.data.celeba import DEFAULT_TRAINING_CLASSES, CelebAConcepts, CelebAConceptsConfig, config_summary
from compgen.data.celeba.publish import (
    CELEBA_LICENSE_SUMMARY,
    compute_split_definitions,
    save_materialized_splits,
    save_split_definitions,
)
from compgen.hub import upload_folder_to_hub


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data_dir", help="official CelebA tree (img_align_celeba/, list_attr_celeba.txt, ...)")
    source.add_argument("--parquet", nargs="+", help="Parquet file(s), a Hub-layout folder or a Hub dataset id")
    parser.add_argument("--parquet_config", help="config name of the Parquet dataset (e.g. img_align+identity+attr)")
    parser.add_argument("--id_column", help="column holding the image file name (default: detected)")
    parser.add_argument("--partition_file", help="list_eval_partition.txt for mirrors without official partitions")
    parser.add_argument("--output_dir", required=True, help="where the Hub-layout dataset is written")
    parser.add_argument("--config_name", default="default", help="config name of the published split")
    parser.add_argument("--training_classes", nargs="+", default=list(DEFAULT_TRAINING_CLASSES))
    parser.add_argument("--max_train_per_class", type=int, default=10_000)
    parser.add_argument("--max_test_per_class", type=int, default=100)
    parser.add_argument("--max_probe_train_per_class", type=int, default=5_000)
    parser.add_argument("--max_probe_val_per_class", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--push_to_hub", metavar="REPO", help="push the written folder to this dataset repository")
    parser.add_argument("--private", action="store_true", help="make the pushed repository private")
    parser.add_argument("--include_images", action="store_true", help="also publish the images (prints the license)")
    parser.add_argument("--accept_celeba_license", action="store_true", help="confirm the terms for --include_images")
    parser.add_argument("--image_size", type=int, default=64, help="image size with --include_images")
    parser.add_argument("--cache_dir", help="datasets cache for --include_images")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.include_images:
        print(CELEBA_LICENSE_SUMMARY)
        if not args.accept_celeba_license:
            print("\n--include_images needs --accept_celeba_license after reading the terms above.", file=sys.stderr)
            return 2
    selection = {
        "training_classes": tuple(args.training_classes),
        "max_train_per_class": args.max_train_per_class,
        "max_test_per_class": args.max_test_per_class,
        "max_probe_train_per_class": args.max_probe_train_per_class,
        "max_probe_val_per_class": args.max_probe_val_per_class,
        "seed": args.seed,
    }
    source = {
        "data_dir": args.data_dir,
        "parquet": tuple(args.parquet) if args.parquet else None,
        "parquet_config": args.parquet_config,
        "id_column": args.id_column,
        "partition_file": args.partition_file,
    }
    definitions = compute_split_definitions(**source, **selection)
    settings = config_summary(CelebAConceptsConfig(**selection))
    if args.include_images:
        builder = CelebAConcepts(cache_dir=args.cache_dir, image_size=args.image_size, **source, **selection)
        builder.download_and_prepare()
        save_materialized_splits(builder.as_dataset(), definitions, args.output_dir, args.config_name, settings)
    else:
        save_split_definitions(definitions, args.output_dir, args.config_name, settings)
    counts = {split: len(rows) for split, rows in definitions.items()}
    print(f"wrote config {args.config_name!r} to {args.output_dir}: {counts}")
    if args.push_to_hub:
        private = args.private or args.include_images
        url = upload_folder_to_hub(args.output_dir, args.push_to_hub, repo_type="dataset", private=private,
                                   commit_message="Upload CelebA concept splits").commit_url
        print(f"pushed to {args.push_to_hub} ({'private' if private else 'public'}): {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
