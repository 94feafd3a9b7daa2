"""MaskGIT vs MaskGIT + JEPA (Paper B) at equal steps over several seeds, with one shared VQ tokenizer.

    python examples/compare_maskgit_jepa.py --preset cpu-quick --seeds 3 --vqvae_path outputs/vq_h32

trains the tokenizer once into ``--vqvae_path`` if it is absent, then every (arm, seed) run with
``examples/train_maskgit_jepa.py`` into ``--runs_dir/ARM-seedS`` (``--jepa_weight 0`` for plain MaskGIT), one at a
time or ``--parallel K`` at once (each single-threaded), and finally writes the report to ``--report_dir``:
``README.md`` (final / best per-level multiplicative accuracy, mean +- std over seeds, first steps to 0.5 and 0.9)
and ``learning_dynamics.png`` (mean curve per level and arm, +- std band). Finished runs are reused, so a rerun only
trains what is missing; ``--report_only`` just aggregates. Flags after ``--`` go to every training run.

Ablations add arms beside the two references: each ``--arm NAME FLAGS`` is the JEPA arm plus ``FLAGS`` (later flags
win), trained for ``--arm_seeds`` seeds into ``--runs_dir/<slug of NAME>-seedS``, e.g.

    python examples/compare_maskgit_jepa.py --seeds 3 --arm_seeds 1 --arm "JEPA layers {3}" "--jepa_layers 3" \
        --arm "JEPA block masks" "--mask_type block"

``--seeds 0`` trains and reports the ablation arms alone (e.g. beside a comparison still running in the same
``--runs_dir``); a final ``--report_only`` with both seed counts puts every arm in one report.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from compgen.evaluation.compare import write_comparison_report
from compgen.evaluation.tracker import read_log
from compgen.training.trainer import LOG_NAME

EXAMPLES = Path(__file__).resolve().parent


def launch_command(script: str, *args: str) -> list[str]:
    """``accelerate launch --cpu`` of an example script as one single-threaded process."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1",
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--num_cpu_threads_per_process", "1", str(EXAMPLES / script), *args]


def run_all(commands: list[tuple[Path, list[str]]], parallel: int) -> None:
    """Run ``(log_file, command)`` pairs, at most ``parallel`` at a time; fail if any fails."""
    pending, running = list(commands), []
    while pending or running:
        while pending and len(running) < parallel:
            log_path, command = pending.pop(0)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            print(f"[compare] {' '.join(command)}  > {log_path}", flush=True)
            log = open(log_path, "w")  # noqa: SIM115 (closed when the process ends)
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            running.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log, log_path))
        time.sleep(2)
        for entry in list(running):
            process, log, log_path = entry
            if process.poll() is not None:
                log.close()
                running.remove(entry)
                if process.returncode:
                    raise SystemExit(f"[compare] run failed ({process.returncode}); see {log_path}")


def arm_slug(name: str) -> str:
    """A run-directory name for an arm: lower case, runs of other characters become one dash."""
    slug = re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-")
    if not slug or slug in {"maskgit", "jepa"}:
        raise SystemExit(f"[compare] arm name {name!r} gives the run directory name {slug!r}; choose another name")
    return slug


def is_finished(run_dir: Path) -> bool:
    return (run_dir / "model_index.json").is_file() and (run_dir / LOG_NAME).is_file()


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "examples/compare_maskgit_jepa.py", *argv])
    passthrough = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu-quick")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per arm")
    parser.add_argument("--jepa_weight", type=float, default=0.6, help="lambda of the JEPA arm")
    parser.add_argument("--max_train_steps", type=int, default=None, help="equal for both arms (default: preset)")
    parser.add_argument("--vqvae_path", default="outputs/compare_maskgit_jepa/vqvae",
                        help="shared tokenizer; trained here (seed 0) if absent")
    parser.add_argument("--runs_dir", default="outputs/compare_maskgit_jepa")
    parser.add_argument("--report_dir", default="docs/maskgit_jepa")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once, each single-threaded")
    parser.add_argument("--report_only", action="store_true", help="aggregate the finished runs only")
    parser.add_argument("--arm", nargs=2, action="append", default=[], metavar=("NAME", "FLAGS"),
                        help="an ablation arm: the JEPA arm plus these training flags (repeatable)")
    parser.add_argument("--arm_seeds", type=int, default=None, help="seeds per ablation arm (default: --seeds)")
    args = parser.parse_args(argv)
    runs_dir, vqvae_path = Path(args.runs_dir), Path(args.vqvae_path)
    jepa_flags = ["--jepa_weight", str(args.jepa_weight)]
    arms = {"MaskGIT": ("maskgit", ["--jepa_weight", "0"], args.seeds),
            f"MaskGIT + JEPA (lambda {args.jepa_weight:g})": ("jepa", jepa_flags, args.seeds)}
    for name, flags in args.arm:
        if name in arms:
            raise SystemExit(f"[compare] arm {name!r} is given twice")
        arms[name] = (arm_slug(name), jepa_flags + shlex.split(flags), args.arm_seeds or args.seeds)
    run_dirs = {name: [runs_dir / f"{slug}-seed{seed}" for seed in range(seeds)]
                for name, (slug, _, seeds) in arms.items()}

    if not args.report_only:
        if not (vqvae_path / "config.json").is_file():
            run_all([(runs_dir / "logs" / "vqvae.log",
                      launch_command("train_vq_tokenizer.py", "--preset", args.preset, "--output_dir",
                                     str(vqvae_path), "--seed", "0"))], parallel=1)
        steps = ["--max_train_steps", str(args.max_train_steps)] if args.max_train_steps else []
        commands = [
            (runs_dir / "logs" / f"{run_dir.name}.log",
             launch_command("train_maskgit_jepa.py", "--preset", args.preset, "--vqvae_path", str(vqvae_path),
                            "--seed", str(seed), "--output_dir", str(run_dir), "--resume_from_checkpoint", "latest",
                            *steps, *passthrough, *flags))
            for seed in range(max(seeds for _, _, seeds in arms.values()))
            for name, (_, flags, seeds) in arms.items()
            if seed < seeds
            for run_dir in [run_dirs[name][seed]]
            if not is_finished(run_dir)
        ]
        run_all(commands, args.parallel)

    logs = {name: [read_log(d / LOG_NAME) for d in dirs if is_finished(d)] for name, dirs in run_dirs.items() if dirs}
    if not logs:
        raise SystemExit("[compare] no runs requested: --seeds and --arm_seeds are both 0")
    missing = [name for name, runs in logs.items() if not runs]
    if missing:
        raise SystemExit(f"[compare] no finished runs for {missing} under {runs_dir}")
    first_run = next(d for dirs in run_dirs.values() for d in dirs if is_finished(d))
    notes = comparison_notes(command, args.arm, first_run / "vq_reconstruction.json")
    text = write_comparison_report(logs, args.report_dir, title="MaskGIT vs MaskGIT + JEPA", notes=notes)
    print(text)


def comparison_notes(command: str, ablation_arms: list[tuple[str, str]], report_path: Path) -> str:
    """The command, the ablation arms' flags, and the tokenizer's reconstruction ceiling per class (``report_path``,
    written by a run with the probes that scored the runs) when it is there."""
    lines = [
        "## Setup",
        "",
        f"`{command}`: every arm at equal steps, one shared VQ tokenizer trained on the training classes only.",
    ]
    if ablation_arms:
        lines += ["", "Ablation arms (the JEPA arm plus):", ""]
        lines += [f"- {name}: `{flags}`" for name, flags in ablation_arms]
    if report_path.is_file():
        report = json.loads(report_path.read_text())
        lines += ["", "Tokenizer ceiling (probe accuracy of reconstructions; no generator decoding through this "
                  "tokenizer can score higher on a class):", "", "| class | level | reconstructed | real | mse |",
                  "|---|---|---|---|---|"]
        lines += [f"| {name} | {entry['level']} | {entry['probe_accuracy_reconstructed']:.2f} | "
                  f"{entry['probe_accuracy_real']:.2f} | {entry['reconstruction_mse']:.4f} |"
                  for name, entry in report["classes"].items()]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
