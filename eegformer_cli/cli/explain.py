"""``eegformer explain``: a model file + recordings -> explanation files per recording and class."""

from __future__ import annotations

from pathlib import Path

import typer

from eegformer_cli import commands
from eegformer_cli.choices import DEFAULT_DEVICE, DEFAULT_METHOD, DEFAULT_N_STEPS
from eegformer_cli.cli.arguments import expand_stdin
from eegformer_cli.option_docs import EXPLAIN


def explain(
    model: Path = typer.Argument(..., metavar="MODEL|RUN_DIR", help=EXPLAIN.help("model")),
    inputs: list[Path] = typer.Argument(..., metavar="INPUT...", help=EXPLAIN.help("inputs")),
    out: Path = typer.Option(..., "--out", help=EXPLAIN.help("out")),
    target: str | None = typer.Option(None, help=EXPLAIN.help("target")),
    contrast: tuple[str, str] | None = typer.Option(
        None, "--contrast", metavar="A B", help=EXPLAIN.help("contrast")
    ),
    method: str = typer.Option(DEFAULT_METHOD, help=EXPLAIN.help("method")),
    n_steps: int = typer.Option(DEFAULT_N_STEPS, help=EXPLAIN.help("n_steps")),
    all_heads: bool = typer.Option(False, "--all-heads", help=EXPLAIN.help("all_heads")),
    participants: Path | None = typer.Option(None, help=EXPLAIN.help("participants")),
    max_interpolated: int | None = typer.Option(None, help=EXPLAIN.help("max_interpolated")),
    device: str = typer.Option(DEFAULT_DEVICE, help=EXPLAIN.help("device")),
    strict: bool = typer.Option(False, "--strict", help=EXPLAIN.help("strict")),
    overwrite: bool = typer.Option(False, "--overwrite", help=EXPLAIN.help("overwrite")),
) -> None:
    """Explain a trained model's predictions: band importance, attention and channel pairs.

    For each recording (raw, preprocessed with the model's settings, or from a preprocess
    output folder, as in `predict`): a captum attribution of the explained class's logit to
    every band x channel-pair connectivity value against the training recordings' mean
    connectome (positive: raises the logit compared with the typical training recording),
    the signed importance of each frequency band (those attributions summed per band,
    absolute values sum to 1), and the coarse and refined attention per layer with what it
    does (entropy, share of the residual stream, explanation against the rest, logit change
    when replaced by a uniform mean or the identity).

    Given RUN_DIR instead of a model file, each recording the run trained on is explained by
    the fold model(s) that did not train on it (RUN_DIR/folds/*.pt; with repeats, the mean
    over them), so its probabilities are its out-of-fold ones; other recordings by
    RUN_DIR/model.pt (recordings.csv's explained_by column says which).

    The class contrast (two classes A B: a two-class model's other and positive class, or
    --contrast A B): per channel pair, the attribution of logit(B) - logit(A), the mean over
    B's recordings minus A's (grouped by true class where the inputs give it, else by
    predicted class), beside the difference of their mean connectivity: which pairs differ
    between the classes and how that pushes the prediction, on one signed scale. Pairs that
    eye movements (Fp1, Fp2, F7, F8; delta, theta) or muscle (frontal, temporal; high beta,
    gamma) can fake carry a caution.

    Writes per recording ID.npz and ID.json (ID: the recording id), the
    long-format tables band_importance.csv, attention.csv, attention_diagnostics.csv and
    channel_pairs.csv, contrast_pairs.csv (the class contrast, strongest first),
    class_summary.json/.npz (means per explained class, the contrast), and recordings.csv:
    one row per recording with its prediction, provenance and warnings, as `predict` prints
    them (the warnings also on stderr). A rerun into the same --out removes the per-recording
    files of an earlier run's recordings that this run did not explain, so the folder always
    describes one run (how many files, on stderr). See eegformer_cli/explain/.

    Example:

        eegformer explain run/model.pt prep --out explanations --target depression

        eegformer explain run prep --out explanations

        ls recordings/*.edf | eegformer explain run/model.pt - --out explanations

    Exit codes: 0 all explained, 3 a recording failed (the others are written) or the input
    does not match the model, 4 bad model file, 2 bad flags or an --out folder holding other
    files than eegformer's (without --overwrite), 6 with --strict: a recording got a warning
    (every file written).
    """
    options = dict(locals())  # first: the parameters alone, each named as commands.explain's
    commands.explain(**{**options, "inputs": expand_stdin(inputs)})


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
