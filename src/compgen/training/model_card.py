"""Model cards (``README.md``) that report per-level and per-class compositional accuracy."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..atomic_io import atomic_write_text
from ..concepts import ConceptGraph
from ..evaluation.curves import first_step_at
from ..evaluation.tracker import own_records
from ..families import pipelines

PLOT_NAME = "learning_dynamics.png"
CONCEPT_PLOT_NAME = "concept_accuracy.png"
"""The card's per-concept figure (:func:`~compgen.evaluation.plots.plot_concept_accuracy`), linked below its plot."""
LOCAL_OPTIONS = ("cache_dir", "celeba_dir", "celeba_parquet", "probes_path", "tokenizer_path", "vqvae_path",
                 "dataset", "peer_dir")
"""Options that name places on one machine: kept in the run's checkpoints, never published in a model card."""
THRESHOLD = 0.9
CELEBA_LICENSE_NAME = "celeba-dataset-release-agreement"
CELEBA_LICENSE_LINK = "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html"
CELEBA_LICENSE_TEXT = ("Trained on CelebA, whose release agreement allows non-commercial research purposes only: these "
                       "weights carry that restriction (`license: other`). The compgen code is Apache-2.0.")


CONFIG_LEFT_OUT = ("concept_space", "continuous_concepts")
"""Config entries the card's model section leaves out: the concept space and its values, which the card states above."""


def saved_model_config(directory: str | Path) -> tuple[str, dict[str, Any]]:
    """The trained model's config as exported in ``directory`` (a family pipeline's denoiser, ``unet`` or
    ``transformer``, or a bare model's own ``config.json``), less diffusers' ``_`` entries and :data:`CONFIG_LEFT_OUT`:
    the card's model section, read from the file ``from_pretrained`` loads. Returns ``(its path in directory,
    entries)``; ``("", {})`` where there is none."""
    directory = Path(directory)
    relative = "config.json"
    if (directory / "model_index.json").is_file():
        name = json.loads((directory / "model_index.json").read_text()).get("_class_name")
        denoiser = pipelines().get(name, ("", ""))[1]
        relative = f"{denoiser}/config.json" if denoiser else ""
    if not relative or not (directory / relative).is_file():
        return "", {}
    config = json.loads((directory / relative).read_text())
    return relative, {key: value for key, value in config.items()
                      if not key.startswith("_") and key not in CONFIG_LEFT_OUT}


def is_celeba_dataset(dataset_name: str | None) -> bool:
    """Whether a run's dataset name (``celeba``, ``celeba-cpu``, ...) is CelebA."""
    from ..data.loading import CELEBA_SOURCE

    return bool(dataset_name) and str(dataset_name).split("/")[-1].lower().startswith(CELEBA_SOURCE)


def first_step_reaching(
    records: list[dict[str, Any]], level: str, threshold: float = THRESHOLD, key: str = "level_accuracy"
) -> int | None:
    """The first evaluated step at which the mean multiplicative accuracy of ``level`` is >= ``threshold``
    (``key="pixel_level_accuracy"``: as the pixel scorer measures it)."""
    step = first_step_at([r["step"] for r in records], [r.get(key, {}).get(level, -1.0) for r in records], threshold)
    return None if step is None else int(step)


def results_markdown(records: list[dict[str, Any]], graph: ConceptGraph, eval_start_step: int = 0) -> str:
    """The results section: per-level final/best accuracy with first step >= 0.9, then per-class accuracy, each
    beside the second scorer's (pixel statistics) when the records have it, and the classes the scorers disagree on.
    With ``eval_start_step`` (the run's ``--eval_start_step``) a level already at 0.9 at the first evaluation from
    that step on reads ``<= step``: it may have got there before anything was evaluated."""
    if not records:
        return "No evaluation was run (train with probes to get compositional accuracy).\n"
    final = records[-1]
    pixel = "pixel_accuracy" in final
    lines = [
        f"Multiplicative accuracy (Okawa et al. 2023, Eq. 2: a sample counts only if every concept probe agrees) "
        f"of {final['num_images_per_class']} samples per class at step {final['step']}; "
        f"chance level {final['chance']:.3f}."
        + (" A sample without exactly one object of plausible size is wrong on every concept (the one-object "
           "check)." if "object_failures" in final else ""),
    ]
    if pixel and "num_frames" in final:  # a video generator's clips (compgen.evaluation.clip_evaluation)
        lines += ["", f"Clips of {final['num_frames']} frames, judged by two independent scorers behind one "
                      "typicality check (one object in every frame, a continuous path, no flicker): the clip probes "
                      "(per-frame CNNs and a learned reading of the path) and the pixels with the motion (colours, "
                      "the object's outline and the turn of its tracked path; no learned weights). The object rate "
                      "is the share of typical clips."]
    elif pixel:
        lines += ["", "Two independent scorers: the concept probes (a CNN) and pixel statistics of the object with "
                      "thresholds set from real renders (no learned weights). Both give the final accuracy and the "
                      "first step >= 0.9 of every level and the final accuracy of every class; the best accuracy, "
                      "the additive accuracy and the object rate come from the probes only."]
    else:
        lines += ["", "Every number comes from the concept probes (no second scorer for these images)."]
    if "probe_validation" in final:
        lines += ["", probe_validation_markdown(final["probe_validation"])]
    fidelity = "fidelity_level" in final
    if fidelity:
        lines += ["", "Hybrids (two shapes superposed) and pale objects fail the typicality check and count as wrong "
                      "for both scorers. *Fidelity* is the median colour strength of a class's samples over that of "
                      "real renders (1.0: as strong as the data; compgen.evaluation.typicality), a continuous "
                      "measure beside the categorical accuracy."]
    start = min((r["step"] for r in records if r["step"] >= eval_start_step), default=None) if eval_start_step else None
    if start is not None:
        lines += ["", f"The evaluations start at step {start} (`--eval_start_step`): a level at 0.9 there may have "
                      "got there earlier (\"<= step\")."]

    def first(step: int | None) -> str:
        if step is None:
            return "not reached"
        return f"<= {step}" if step == start else str(step)

    pixel_header = (" pixel scorer final | pixel scorer first step >= 0.9 |", "---|---|") if pixel else ("", "")
    if fidelity:
        pixel_header = (pixel_header[0] + " fidelity |", pixel_header[1] + "---|")
    lines += [
        "",
        "| level | classes | final accuracy | best accuracy | first step >= 0.9 |" + pixel_header[0],
        "|---|---|---|---|---|" + pixel_header[1],
    ]
    for level in sorted(final["level_accuracy"], key=int):
        classes = ", ".join(graph.format(c) for c in graph.classes_at_level(int(level)))
        best = max(r["level_accuracy"][level] for r in records)
        row = (f"| {level} | {classes} | {final['level_accuracy'][level]:.3f} | {best:.3f} | "
               f"{first(first_step_reaching(records, level))} |")
        if pixel:
            pixel_reached = first_step_reaching(records, level, key="pixel_level_accuracy")
            row += f" {final['pixel_level_accuracy'][level]:.3f} | {first(pixel_reached)} |"
        if fidelity:
            row += f" {final['fidelity_level'][level]:.2f} |"
        lines.append(row)
    if "lenient_level_accuracy" in final:
        lines += ["", lenient_markdown(final)]
    # the object rate where an object check ran (images: the one-object check; clips: the typicality check)
    objects = "object_rate" in final and ("object_failures" in final or "num_frames" in final)
    extra = ((" object rate |" if objects else "") + (" pixel scorer | agreement |" if pixel else "")
             + (" fidelity |" if fidelity else ""))
    columns = graph.space.num_variables + 3 + objects + 2 * pixel + fidelity
    lines += ["", "| class | " + " | ".join(graph.space.names) + " | level | multiplicative | additive |" + extra,
              "|---|" + "---|" * columns]
    for name, value in final["accuracy"].items():
        described = graph.space.describe(name)
        row = (f"| {name} | " + " | ".join(described.values()) + f" | {final['levels'][name]} | {value:.3f} | "
               f"{final['additive_accuracy'][name]:.3f} |")
        if objects:
            row += f" {final['object_rate'][name]:.2f} |"
        if pixel:
            row += f" {final['pixel_accuracy'][name]:.3f} | {final['scorer_agreement'][name]:.2f} |"
        if fidelity:
            row += f" {final['fidelity'][name]:.2f} |"
        lines.append(row)
    if pixel:
        lines += ["", disagreement_markdown(records)]
    return "\n".join(lines) + "\n"


def probe_validation_markdown(validation: dict[str, dict[str, Any]]) -> str:
    """A sentence on the probes trained on the run's own data: each one's validation accuracy beside its chance, and
    a warning where one reads near chance (a run accepted with ``--accept_weak_probes``)."""
    read = ", ".join(f"{name} {row['accuracy']:.3f} (chance {row['chance']:.3f})" for name, row in validation.items())
    weak = [name for name, row in validation.items() if row.get("near_chance")]
    warning = (f" **The {', '.join(weak)} probe reads near chance (accepted with --accept_weak_probes): every "
               "accuracy here that needs it is unreliable.**") if weak else ""
    return f"The probes were trained on this dataset's probe splits; validation accuracy: {read}.{warning}"


def lenient_markdown(final: dict[str, Any]) -> str:
    """A sentence with the last evaluation's lenient score per level (Paper B's protocol), marked as no verdict."""
    levels = ", ".join(f"level {level} {value:.3f}" for level, value in sorted(final["lenient_level_accuracy"].items(),
                                                                             key=lambda item: int(item[0])))
    validation = final.get("lenient_probes", {}).get("validation_accuracy", {})
    fitted = (" (its linear probes read real images at " + ", ".join(f"{k} {v:.2f}" for k, v in validation.items())
              + ")") if validation else ""
    return (f"Paper B's protocol, for comparison with its figures and no verdict here: linear probes on raw pixels, "
            f"the product of the per-concept accuracies, no typicality check{fitted}; chance "
            f"{final['lenient_chance']:.3f}. At step {final['step']}: {levels}.")


def disagreement_markdown(records: list[dict[str, Any]]) -> str:
    """A sentence on where the probes and the pixel scorer disagree by more than 10 points on a class."""
    flagged = [(r["step"], r.get("scorer_disagreements", [])) for r in records if r.get("scorer_disagreements")]
    final = records[-1].get("scorer_disagreements", [])
    if not flagged:
        return "The two scorers agree within 10 points on every class at every evaluation."
    text = (f"**The two scorers disagree by more than 10 points** at {len(flagged)} of {len(records)} evaluations "
            f"(first at step {flagged[0][0]}: {', '.join(flagged[0][1])}).")
    if final:
        accuracy, pixel = records[-1]["accuracy"], records[-1]["pixel_accuracy"]
        text += " At the final step: " + ", ".join(
            f"{name} (probes {accuracy[name]:.2f}, pixel statistics {pixel[name]:.2f})" for name in final) + "."
    return text


def hub_dataset_id(dataset_name: str | None) -> str | None:
    """``dataset_name`` if it is a Hub dataset id (``namespace/name``), else ``None`` (a local path or a builder name).

    Only a Hub id belongs in the card's ``datasets:`` metadata, which the Hub turns into a link.
    """
    if not dataset_name or dataset_name.count("/") != 1 or Path(dataset_name).exists():
        return None
    try:
        validate_repo_id(dataset_name)
    except HFValidationError:
        return None
    return dataset_name


def sections_markdown(sections: list[tuple[str, str]]) -> list[str]:
    """Card lines for extra ``(title, markdown)`` sections, each rendered as ``## title``."""
    lines = []
    for section in sections:
        if not (isinstance(section, tuple | list) and len(section) == 2 and all(isinstance(s, str) for s in section)):
            raise ValueError(f"a model card section must be a (title, markdown) pair of strings, got {section!r}")
        title, markdown = section
        lines += [f"## {title}", "", markdown.rstrip("\n"), ""]
    return lines


def _usage_lines(pipeline_class: str, prompt: str) -> list[str]:
    """The card's sampling lines: images, or clips (``frames``, a video pipeline) saved as a GIF."""
    if "Video" not in pipeline_class:
        return [f'images = pipe("{prompt}", num_images_per_prompt=4).images']
    return [f'frames = pipe("{prompt}", num_videos_per_prompt=4).frames  # 4 clips, each a list of frames',
            "", "from diffusers.utils import export_to_gif", "", f'export_to_gif(frames[0], "{prompt}.gif")']


def write_model_card(
    output_dir: str | Path,
    records: list[dict[str, Any]],
    graph: ConceptGraph,
    config: Any,
    details: dict[str, Any],
    dataset_name: str | None = None,
) -> ModelCard:
    """Write ``output_dir/README.md`` (and the learning-dynamics plot when there are records).

    ``details`` (from the training task) may hold ``model_name``, ``pipeline_class``, ``tags``, ``hyperparameters``
    (``{name: value}``: the objective, sampler and task options, listed under *Model* above the model's own config,
    which :func:`saved_model_config` reads from the export already in ``output_dir``) and ``sections``: ``(title,
    markdown)`` pairs rendered as ``## title`` sections after *Results* (e.g. MaskGIT's tokenizer reconstruction table).
    """
    output_dir = Path(output_dir)
    has_plot = False
    if records:
        from ..evaluation.plots import plot_learning_dynamics

        dashed = "pixel_accuracy" if all("pixel_accuracy" in r for r in records) else None
        plot_learning_dynamics(records, output_dir / PLOT_NAME, log_x=False, dashed_metric=dashed,
                               title="accuracy per class (probes solid, pixel statistics dashed)" if dashed else None)
        has_plot = True
        if all("concept_accuracy" in r for r in records) and "concept_space" in records[0]:
            from ..evaluation.plots import plot_concept_accuracy

            plot_concept_accuracy(records, output_dir / CONCEPT_PLOT_NAME, log_x=False)
    pipeline_class = details.get("pipeline_class", "DiffusionPipeline")
    hub_id = hub_dataset_id(dataset_name)
    # The weights carry the licence of the data they were trained on: the synthetic shapes data is under the code's
    # licence (Apache-2.0, LICENSE); CelebA is for non-commercial research only. No Hub pipeline tag fits a
    # generator conditioned on concept tuples (neither text-to-image nor unconditional), so none is set.
    celeba = is_celeba_dataset(dataset_name)
    card_data = ModelCardData(
        library_name="diffusers",
        license="other" if celeba else "apache-2.0",
        license_name=CELEBA_LICENSE_NAME if celeba else None,
        license_link=CELEBA_LICENSE_LINK if celeba else None,
        tags=["compgen", "compositional-generalization", "concept-graph", "diffusers", *details.get("tags", [])],
        datasets=[hub_id] if hub_id else None,
    )
    skipped = {"extra", "hub_token", "output_dir", "resume_from_checkpoint", "overwrite_output_dir", *LOCAL_OPTIONS}
    training = {k: v for k, v in asdict(config).items() if k not in skipped}
    training |= {k: v for k, v in config.extra.items() if v is not None and k not in skipped}
    hyper = details.get("hyperparameters", {})
    training_classes = ", ".join(graph.format(c) for c in graph.training_classes)
    # A fine-tuning run's statistics are of its own phase (its log starts with its source's records, whose steps its
    # own continue): the plot above shows both.
    own = own_records(records)
    phase_start = int(own[0].get("phase_start_step", 0)) if own else 0
    body = [
        f"# {details.get('model_name', pipeline_class)} trained with compgen",
        "",
        f"A tuple-conditioned generator trained on the concept-graph dataset `{dataset_name}` "
        f"(concept variables {', '.join(graph.space.names)}; training classes {training_classes}). "
        "Held-out classes test compositional generalization; a class's *level* is its concept distance to the "
        "nearest training class.",
        "",
        "## Usage",
        "",
        "```python",
        f"from compgen import {pipeline_class}",
        "",
        f"pipe = {pipeline_class}.from_pretrained({str(config.hub_model_id or config.output_dir)!r})",
        *_usage_lines(pipeline_class, "1" * graph.space.num_variables),
        "```",
        "",
        "## Results",
        "",
        results_markdown(own, graph, config.eval_start_step + phase_start if config.eval_start_step else 0),
    ]
    if has_plot:
        body += [f"![learning dynamics]({PLOT_NAME})", ""]
        if (output_dir / CONCEPT_PLOT_NAME).is_file():
            body += [f"Which concept each class misses, and when: [accuracy per concept]({CONCEPT_PLOT_NAME}).", ""]
    body += sections_markdown(details.get("sections", []))
    body += ["## Model", ""] + [f"- {k}: `{v}`" for k, v in hyper.items()]
    config_path, model_config = saved_model_config(output_dir)
    if model_config:
        body += ["", f"Its config (`{config_path}`, as `from_pretrained` loads it):", ""]
        body += [f"- {k}: `{v}`" for k, v in model_config.items()]
    body += ["", "## Training", ""] + [f"- {k}: `{v}`" for k, v in sorted(training.items())]
    body += ["", "Evaluation: concept probes and, for the shapes data, pixel statistics score every generated image "
                 "(compgen.evaluation; docs/evaluation.md).", ""]
    body += ["## License", "", CELEBA_LICENSE_TEXT if celeba else
             "Apache-2.0, as the compgen code; the synthetic concept-graph shapes data it was trained on is under the "
             "same licence.", ""]
    content = f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(body)
    atomic_write_text(output_dir / "README.md", content)
    return ModelCard(content)
