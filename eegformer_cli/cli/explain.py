"""``eegformer explain``: a model file + recordings -> explanation files per recording and class."""

from __future__ import annotations

from pathlib import Path

import typer

from eegformer_cli import console
from eegformer_cli.cli import (exit_for_failed_recordings, exit_for_warnings,
                               note_unchecked_model, print_recording_warnings)
from eegformer_cli.errors import UsageError, check_choice

# Seed of the random interpolation points of gradient_shap (the other methods are deterministic).
SEED = 0


def explain(
    model: Path = typer.Argument(..., metavar="MODEL", help="A model.pt written by `eegformer train`."),
    inputs: list[Path] = typer.Argument(..., metavar="INPUT...",
                                        help="Recordings (files or folders) or preprocess output folders."),
    out: Path = typer.Option(..., "--out", help="Output folder (created; files are replaced)."),
    target: str | None = typer.Option(
        None, help="Class to explain, e.g. healthy (default: each recording's predicted class)."),
    method: str = typer.Option("integrated_gradients",
                               help="captum method for channel pairs: integrated_gradients, "
                                    "saliency, input_x_gradient or gradient_shap."),
    n_steps: int = typer.Option(32, help="Integrated Gradients steps (gradient_shap samples)."),
    all_heads: bool = typer.Option(False, "--all-heads",
                                   help="Keep every attention head (default: mean over heads)."),
    participants: Path | None = typer.Option(
        None, help="participants table for age/sex (default: participants.tsv beside the inputs)."),
    max_interpolated: int | None = typer.Option(
        None, help="Most missing channels a raw recording may have interpolated "
                   "(default: the model's preprocessing setting)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    strict: bool = typer.Option(False, "--strict",
                                help="Exit with code 6 when a recording got a warning (every "
                                     "file is still written) \\[default: off]."),
) -> None:
    """Explain a trained model's predictions: band importance, attention and channel pairs.

    For each recording (raw, preprocessed with the model's settings, or from a preprocess
    output folder, as in `predict`): the signed importance of each frequency band from the
    model's own DeepLIFT explanation (absolute values sum to 1), the coarse and refined
    attention per layer with what it does (entropy, share of the residual stream, explanation
    against qkv bias, logit change when replaced by a uniform mean or the identity), and a
    captum attribution of the explained class's logit to every band x channel-pair
    connectivity value. Writes per recording ID.npz and ID.json (ID: the recording id), the
    long-format tables band_importance.csv, attention.csv, attention_diagnostics.csv and
    channel_pairs.csv, class_summary.json/.npz (means per explained class), and recordings.csv:
    one row per recording with its prediction, provenance and warnings, as `predict` prints
    them (the warnings also on stderr). A rerun into the same --out removes the per-recording
    files of an earlier run's recordings that this run did not explain, so the folder always
    describes one run (how many files, on stderr). See eegformer_cli/explain/.

    Example:

        eegformer explain run/model.pt prep --out explanations --target depression

    Exit codes: 0 all explained, 3 a recording failed (the others are written) or the input
    does not match the model, 4 bad model file, 2 bad flags, 6 with --strict: a recording got
    a warning (every file written).
    """
    # imported here: torch takes seconds to import (see predict.py)
    from eegformer_cli import provenance
    from eegformer_cli.atomic import ensure_dir
    from eegformer_cli.devices import resolve_device, seed_everything
    from eegformer_cli.explain import attributions, export
    from eegformer_cli.inference import load_inputs
    from eegformer_cli.training.model_file import load_model_file

    check_choice("--method", method, attributions.CAPTUM_METHODS)
    if n_steps < 1:
        raise UsageError(f"invalid --n-steps {n_steps}; must be >= 1, e.g. 32")
    torch_device = resolve_device(device)
    bundle = load_model_file(model, torch_device)
    if target is not None and target not in bundle.label_names:
        raise UsageError(f"invalid --target {target!r}; the model's classes are "
                         f"{', '.join(bundle.label_names)}")
    # the inputs as a whole are checked (load_inputs raises at once) before --out is touched
    pending = load_inputs(bundle, inputs, participants=participants,
                          max_interpolated=max_interpolated)
    note_unchecked_model(bundle, strict)
    out = ensure_dir(out)
    settings = {"model": str(model), "target": target, "method": method, "n_steps": n_steps,
                "all_heads": all_heads, "device": str(torch_device),
                "band_importance": "DeepLIFT (model layer 0), mean over segments, abs-sum 1",
                "baseline": "zero connectivity", "inputs": [str(path) for path in inputs],
                "model_trained_on": bundle.trained_on}
    seed_everything(SEED)
    earlier = export.earlier_recordings(out)
    explanations, failures, provenance_rows = [], {}, []
    with console.progress_bar() as bar:
        task = bar.add_task("explain", total=len(pending), status="")
        for item in pending:                   # a raw recording is preprocessed here
            bar.update(task, status=item.recording_id)
            if item.error is None:
                explanation = attributions.explain_recording(
                    bundle.model, item.coh, item.wpli, item.age, item.sex, bundle.label_names,
                    recording_id=item.recording_id, participant_id=item.participant_id,
                    target=target, method=method, n_steps=n_steps, all_heads=all_heads,
                    device=torch_device)
                print_recording_warnings(item.recording_id, item.warnings)
                provenance_rows.append({"recording_id": item.recording_id,
                                        **provenance.row_fields(item)})
                export.write_recording(out, explanation, bundle.bands, bundle.channels,
                                       bundle.label_names, settings, provenance_rows[-1])
                explanations.append(explanation)
            else:
                failures[item.recording_id] = item.error
                console.stderr.print(f"eegformer: error: {item.error}", markup=False)
            bar.advance(task)
    export.write_tables(out, explanations, bundle.bands, bundle.channels)
    export.write_recordings_table(out, explanations, provenance_rows, bundle.label_names)
    export.write_class_summary(out, attributions.class_means(explanations), bundle.bands,
                               bundle.channels, bundle.label_names, settings,
                               [e.recording_id for e in explanations], failures, explanations)
    explained = {e.recording_id for e in explanations}
    left_over = [rid for rid in earlier if rid not in explained]
    removed = export.remove_recordings(out, left_over)
    if removed:
        console.log(f"explain: removed {removed} files of {len(left_over)} recordings that an "
                    f"earlier run explained into {out} and this one did not (ID.npz/.json)")
    console.log(f"explained {len(explanations)} recording(s) in {out}: ID.npz/.json, "
                "band_importance.csv, attention.csv, attention_diagnostics.csv, channel_pairs.csv, "
                "recordings.csv, class_summary.json/.npz")
    exit_for_failed_recordings(list(failures), "explained")
    exit_for_warnings(strict, [row["recording_id"] for row in provenance_rows if row["warnings"]],
                      bundle, "explained")

def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
