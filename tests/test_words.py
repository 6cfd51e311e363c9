"""One word per idea (docs/architecture.md, "Words"): in ``eegformer_cli/``, "reference" means
the references, the comparison models every ``train`` fits beside the model (the logistic
regression, ``evaluation/reference.py``, and the tangent-space model,
``evaluation/tangent_space.py``), or is part of "average reference", the EEG re-referencing
step. Other ideas have their own words: the baseline connectome (what attributions are measured
against), the mean point (the training covariances' Riemannian mean at which the tangent space
is taken), the paper's code (the original implementation), reference-method.md's sections (its
note on the method).

The check reads every line of the package, as ``grep -w reference`` does (whole word, any case),
removes what :data:`ALLOWED` matches and fails on a "reference" left over. In the modules of
:data:`COMPARISON_MODULES`, whose subject is the comparisons, the bare word is left as it is
(``model - reference``, "each reference's clause"), except for the other ideas' old words,
:data:`NEVER`, which fail everywhere. A phrase wrapped over two lines ("average" at the end of
one, "reference" at the start of the next) fails: keep it on one line.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "eegformer_cli"

WORD = re.compile(r"\breference\b", re.IGNORECASE)

#: What "reference" may be part of, anywhere in the package.
ALLOWED = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        # the EEG re-referencing step
        r"\baverage[- ]reference\b",
        # the comparison models, named
        r"\breferences\b",
        r"\breference models?\b",
        r"\b(logistic-regression|tangent-space|built-in|first|second) reference\b",
        # the first reference's module (``evaluation.reference``, ``reference.search_logistic_c``,
        # :mod:`reference`) and the comparisons' field (``comparison.reference``)
        r"\b[\w.]*\.reference\b",
        r"\breference\.\w+",
        r":mod:`reference`",
        # persisted and typed names: metrics.json's and the comparisons' key "reference", the
        # report's preprocessing row, the CLI value ``--permutation-model reference``
        r"[\"']reference[\"']",
        r"--permutation-model reference\b",
        r"\breference \(the logistic regression\b",
        # the model file's tangent-space path: its method ``reference()`` (the mean points; its
        # buffer ``reference_invsqrt`` and ``set_reference`` are other words)
        r"\bdef reference\(self\)",
        # explain_recording's and channel_pair_attributions' keyword for the baseline connectome
        # (tests and benchmarks pass it by name)
        r"^\s*reference: tuple\[.*\] \| None = None,$",
        r"\breference=baseline\b",
        r"\bbaseline = reference\b",
        r"``reference``, the baseline\b",
        r"_baseline_tensors\(reference\b",
        # the original method's note, a file name
        r"\breference-method\.md\b",
    )
)

#: Modules about the comparisons: the bare word there is the comparison sense.
COMPARISON_MODULES = frozenset(
    {
        "evaluation/reference.py",
        "evaluation/tangent_space.py",
        "evaluation/metrics.py",
        "evaluation/run_metrics.py",
        "evaluation/sample_size.py",
        "experiment/above_chance.py",
        "experiment/permutation.py",
        "experiment/summaries.py",
        "experiment/verdict.py",
        "report/tables.py",
        "report/sample_size.py",
        "training/fold_job.py",
        "training/fold_record.py",
    }
)

#: The other ideas' old words, refused in every module.
NEVER = re.compile(
    r"\breference (points?|connectome|section|implementation|code|electrode)\b"
    r"|\(the reference\)|\bthe reference's (steps|order|call|bands?)\b",
    re.IGNORECASE,
)


def stray_references(text: str, comparison_module: bool = False) -> list[tuple[int, str]]:
    """(line number, line) of each line of ``text`` with a "reference" that is not the
    glossary's (module docstring)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if NEVER.search(line):
            found.append((number, line))
            continue
        rest = line
        for pattern in ALLOWED:
            rest = pattern.sub("", rest)
        if WORD.search(rest) and not comparison_module:
            found.append((number, line))
    return found


def test_the_package_says_reference_only_for_the_comparison_models():
    stray = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in stray_references(
            path.read_text(encoding="utf-8"),
            path.relative_to(PACKAGE).as_posix() in COMPARISON_MODULES,
        )
    ]
    assert not stray, "'reference' in another sense (docs/architecture.md, Words):\n" + "\n".join(
        stray
    )


def test_the_check_refuses_the_other_ideas_old_words():
    for line in (
        '    """The tangent vectors at the reference point of the tangent space."""',
        "# the attributions' reference (the training recordings' mean connectome)",
        "``paper`` follows section 1 of the reference: 250 Hz",
        "The official code (reference section 4.1) runs PyG ``GINEConv``",
        "    reference = str(settings.get('baseline'))",
        '``"auto"`` (the reference) or e.g. 5.0',
        "the reference's 8 bands",
    ):
        assert stray_references(line), line
    # the other ideas' words stay refused in a module about the comparisons
    assert stray_references("each band's reference point the Riemannian mean", True)


def test_the_check_accepts_the_glossarys_senses():
    for line in (
        "rank C - 1 after the average reference (the all-ones vector is in its null space)",
        "the comparison with every reference model, the logistic-regression reference's L2",
        "the tangent-space reference, and its model no tangent-space path",
        "from eegformer_cli.evaluation.reference import fit_reference",
        '    permutation_model: str = "reference",',
        "or use --permutation-model reference",
        "The official code (reference-method.md, section 4.1) runs PyG ``GINEConv``",
        "so both references get the same tuning effort",
    ):
        assert not stray_references(line), line
    assert not stray_references("model - reference; each reference's clause", True)
