"""Run a controlled study (models x conditioning x seeds x datasets) from a YAML file, and summarize it.

    python examples/run_study.py --study studies/paper_b_h32.yaml --output_dir runs/paper_b_h32
    python examples/run_study.py --smoke --output_dir /tmp/smoke          # seconds: every model x conditioning mode
    python examples/run_study.py --study studies/paper_b_grid.yaml --smoke --output_dir /tmp/grid-smoke  # its grid

Cells already finished are skipped, unfinished ones resume from their last checkpoint, a failing cell is reported
while the rest go on (the exit status is then 1, after the summary). A cell whose definition changed in the study file
since it trained is refused before any work, with the list of changed cells (exit status 2). An interrupt (Ctrl-C,
SIGINT) stops the running cells, cancels the queued ones and writes the summary of what finished (exit status 130).
On a GPU the cells run one after another in this process (several processes sharing one GPU were each about six
times slower); on a CPU ``--parallel K`` runs K cells at once, one thread each. The summary
(``summary.md``, ``summary.json``, ``plots/``) reports both scorers per arm: final and best per-level accuracy (mean
and spread over seeds) and the first steps at which each level reaches 0.5 and 0.9. See ``compgen.studies``
for the file format and ``studies/`` for the studies of ``results/paper-b-h32/README.md``.

On a SLURM cluster, ``--launcher submitit`` submits every run as a job of one job array (through submitit), with
the same skipping, resuming and summary; a failed job is reported with its log::

    python examples/run_study.py --study studies/paper_b_h32.yaml --output_dir runs/paper_b_h32 \
        --launcher submitit --slurm_partition gpu --slurm_time 120 --gpus_per_job 1 --cpus_per_job 8 \
        --array_parallelism 8
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from compgen.cli import ArgumentParser
from compgen.launch.directory_claim import RunDirectoryInUseError
from compgen.studies import Study, run_study
from compgen.studies.launchers import SUBMITIT_CLUSTERS, SubmititLauncher
from compgen.studies.orchestration import part_cells
from compgen.studies.records import StudyChangedError
from compgen.studies.smoke import smoke_study

SMOKE_STUDY = Path(__file__).resolve().parents[1] / "studies" / "smoke.yaml"


def main(argv: list[str] | None = None) -> dict:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", help="a study file (YAML)")
    parser.add_argument("--smoke", action="store_true",
                        help=f"seconds scale: with --study, that study's grid on tiny data and models (2 steps, its "
                             f"first seed); alone, the grid of {SMOKE_STUDY.name}")
    parser.add_argument("--output_dir", required=True, help="the study's directory (cells, tokenizers, summary)")
    parser.add_argument("--models", nargs="+", default=None,
                        help="run only these models of the study, with the models they fine-tune from (a part of "
                             "its grid: finished cells are skipped, and the summary is the whole grid's)")
    parser.add_argument("--seeds", nargs="+", type=int, default=None,
                        help="run only these seeds of the study (as --models: parts add up, one summary of the "
                             "whole grid)")
    parser.add_argument("--parallel", type=int, default=None,
                        help="cells at once (default: 1 with a GPU, else the CPU cores, one thread each)")
    parser.add_argument("--threads_per_worker", type=int, default=None)
    cluster = parser.add_argument_group("cluster (--launcher submitit: one job per run, as a SLURM job array)")
    cluster.add_argument("--launcher", choices=["local", "submitit"], default="local")
    cluster.add_argument("--submitit_cluster", choices=SUBMITIT_CLUSTERS, default="slurm",
                         help="slurm; local runs the jobs as local processes (tests, a workstation)")
    cluster.add_argument("--slurm_partition", default=None)
    cluster.add_argument("--slurm_time", type=int, default=60, help="minutes per job")
    cluster.add_argument("--gpus_per_job", type=int, default=0)
    cluster.add_argument("--cpus_per_job", type=int, default=1)
    cluster.add_argument("--array_parallelism", type=int, default=16, help="jobs of the array running at once")
    cluster.add_argument("--submitit_dir", default=None, help="job logs (default: OUTPUT_DIR/submitit)")
    args = parser.parse_args(argv)
    if argv is None:
        # SIGINT stops a study (below) also when it was started with SIGINT ignored (a background job of a
        # non-interactive shell), as its docstring promises.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not (args.study or args.smoke):
        parser.error("give --study FILE, --smoke, or both")
    try:
        study = Study.from_file(Path(args.study) if args.study else SMOKE_STUDY)
        if args.smoke and args.study:
            study = smoke_study(study)
            study.validate(f"{args.study} (--smoke)")
        part = part_cells(study, Path(args.output_dir), args.models, args.seeds)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    parallel = args.parallel
    if parallel is None:
        import torch

        parallel = 1 if torch.cuda.is_available() else max(1, min(os.cpu_count() or 1, len(part)))
    if parallel < 1:
        parser.error(f"--parallel must be at least 1, got {parallel}")
    threads = args.threads_per_worker or (1 if parallel > 1 else None)
    launcher = None
    if args.launcher == "submitit":
        try:
            launcher = SubmititLauncher(
                folder=Path(args.submitit_dir or Path(args.output_dir) / "submitit").expanduser().resolve(),
                cluster=args.submitit_cluster, partition=args.slurm_partition, timeout_min=args.slurm_time,
                gpus_per_job=args.gpus_per_job, cpus_per_job=args.cpus_per_job,
                array_parallelism=args.array_parallelism)
            launcher.executor()  # submitit is installed and takes these options, before any work
        except ValueError as error:
            parser.error(str(error))
        threads = args.threads_per_worker or args.cpus_per_job
    try:
        summary = run_study(study, args.output_dir, parallel=parallel, threads_per_worker=threads, launcher=launcher,
                            models=args.models, seeds=args.seeds)
    except (StudyChangedError, RunDirectoryInUseError) as error:
        parser.error(str(error))
    except KeyboardInterrupt:
        print(f"interrupted: the summary of what finished is in {Path(args.output_dir) / 'summary.md'}",
              file=sys.stderr)
        sys.exit(130)
    print((Path(args.output_dir) / "summary.md").read_text())
    failed = [cell["cell"] for cell in summary["cells"] if cell.get("status") == "failed"]
    if failed:
        print(f"{len(failed)} of {len(summary['cells'])} cells failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)
    return summary


if __name__ == "__main__":
    main()
