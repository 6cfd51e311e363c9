"""A run's interaction screens, summarised: what each fit's screen kept, its best score and the
gate it had to beat, in ``metrics.json`` (``interaction_screens``), ``train``'s summary and the
report, so a screen that kept nothing still leaves its trace.

Every fit of a screening preset screens its own training recordings
(:mod:`~eegformer_cli.training.interaction_screen`) and its fold file keeps the record
(``interaction_screen``: the kept interactions, ``top_pair_score`` / ``pair_threshold`` and
``top_age_score`` / ``age_threshold``). :func:`summarise_screens` gathers those of the CV's
folds and the final model's; :func:`describe_screens` says in one line what they found: "not
screened" (the ``paper`` preset, or ``--no-interactions`` with ``--no-age-interactions``),
what was kept and in how many folds, or that nothing was, with the best score against its gate.
"""

from __future__ import annotations

from collections import Counter

from eegformer_cli.evaluation.run_metrics import InteractionScreens, ScreenOutcome
from eegformer_cli.training.fold_record import FoldRecord

#: How the summaries name the within-recording screen.
WITHIN = "within recordings"


def outcome(fit: str, record: dict | None) -> ScreenOutcome:
    """Fit ``fit``'s :class:`ScreenOutcome` from its screen ``record``
    (``ScreenResult.summary``; None: not recorded)."""
    # imported here: the model's module imports torch, which describing a run does not need
    from eegformer_cli.model.interactions import Interaction

    if record is None:
        return ScreenOutcome(fit=fit, recorded=False)
    return ScreenOutcome(
        fit=fit,
        kept=[name(Interaction.from_dict(item)) for item in record["kept"]],
        top_pair_score=record.get("top_pair_score"),
        pair_gate=record.get("pair_threshold"),
        top_age_score=record.get("top_age_score"),
        age_gate=record.get("age_threshold"),
        top_within_score=record.get("top_within_score"),
        within_gate=record.get("within_threshold"),
    )


def name(interaction) -> str:
    """A kept interaction's name in the summaries: its label, ``(within recordings)`` after
    it when the within-recording screen kept it."""
    return interaction.label() + (f" ({WITHIN})" if interaction.within else "")


def summarise_screens(
    results: list[FoldRecord],
    interactions: bool,
    age_interactions: bool,
    final: dict | None,
    within: bool = False,
) -> InteractionScreens:
    """``metrics.json``'s ``interaction_screens`` from the folds' records (``results``), the
    settings' screens (the training config's ``interactions``, ``age_interactions`` and
    ``dynamic_pairs``, which metrics.json keeps as ``pairs``, ``with_age`` and ``within``) and
    the final model's screen record (``final``, None: none)."""
    screened = interactions or age_interactions or within
    per_fold = [outcome(f"r{r.repeat}_f{r.fold}", r.interaction_screen) for r in results]
    return InteractionScreens(
        pairs=interactions,
        with_age=age_interactions,
        within=within,
        n_folds=len(results),
        folds_kept=sum(bool(fold.kept) for fold in per_fold),
        per_fold=per_fold if screened else [],
        final=outcome("final", final) if screened and final is not None else None,
    )


def _closest(outcomes: list[ScreenOutcome], score: str, gate: str) -> ScreenOutcome | None:
    """The outcome whose ``score`` came closest to (or furthest past) its ``gate``; None when
    no outcome screened that candidate set."""
    screened = [o for o in outcomes if getattr(o, gate) is not None]
    return max(screened, key=lambda o: getattr(o, score) - getattr(o, gate), default=None)


def _best_scores(outcomes: list[ScreenOutcome], screens: InteractionScreens) -> str:
    """Per candidate set, the best score against its gate in the fit where it came closest to
    (or furthest past) its gate, or why that set was not screened."""
    parts = []
    for name, on, why, score, gate in (
        (
            "entry pairs",
            screens.pairs,
            "--no-interactions",
            "top_pair_score",
            "pair_gate",
        ),
        (
            "entries with age",
            screens.with_age,
            "no age known" if screens.with_age else "--no-age-interactions",
            "top_age_score",
            "age_gate",
        ),
        (
            WITHIN,
            screens.within,
            "no two training recordings of two segments or more",
            "top_within_score",
            "within_gate",
        ),
    ):
        best = _closest(outcomes, score, gate)
        if best is not None:
            parts.append(
                f"{name}: best score {getattr(best, score):.2f} against a gate of "
                f"{getattr(best, gate):.2f} ({best.fit})"
            )
        elif outcomes and (on or name != WITHIN):
            parts.append(f"{name}: not screened ({why})")
    return "; ".join(parts)


def describe_screens(screens: InteractionScreens | None, preset: str | None) -> str:
    """One line on what the run's screens found (module docstring); ``preset``: the run's
    (``metrics.preset``), named when it screens nothing."""
    if screens is None:
        return (
            "not recorded in this run's metrics (an earlier eegformer trained it; "
            "`eegformer train --merge RUN_DIR` adds them)"
        )
    if not (screens.pairs or screens.with_age or screens.within):
        return "not screened (" + (
            "the paper preset has no interaction screen)"
            if preset == "paper"
            else "turned off: --no-interactions and --no-age-interactions)"
        )
    fits = screens.per_fold + ([screens.final] if screens.final else [])
    unrecorded = sum(not fold.recorded for fold in screens.per_fold)
    best = _best_scores([o for o in fits if o.recorded], screens)
    note = (
        f" ({unrecorded} fold(s) of an earlier eegformer did not record theirs)"
        if unrecorded
        else ""
    )
    n = screens.n_folds
    if not any(o.kept for o in fits):
        final = ", nor for the final model" if screens.final else ""
        where = "in its one fold" if n == 1 else f"in any of the {n} folds"
        return f"the screens kept nothing {where}{final}{note}: {best}"
    counts = Counter(name for fold in screens.per_fold for name in fold.kept)
    kept = ", ".join(
        name + (f" ({k} of {n} folds)" if n > 1 else "") for name, k in counts.most_common()
    )
    final = (
        f"; the final model keeps {len(screens.final.kept)}: {', '.join(screens.final.kept)}"
        if screens.final and screens.final.kept
        else "; the final model keeps none"
        if screens.final
        else ""
    )
    return (
        f"kept something in {'its one fold' if n == 1 else f'{screens.folds_kept} of {n} folds'}"
        f"{note}: {kept or 'nothing'}"
        f"{final}; {best}"
    )
