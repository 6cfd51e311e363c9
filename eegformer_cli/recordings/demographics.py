"""Age and sex, the model's two demographic inputs: every reading of them, in one module.

Value conventions of the participants and recordings tables (documented for users):

- age: years, decimal point or decimal comma (``51,59``); ``n/a``/empty = unknown;
  negative, above 130 or non-numeric values are rejected.
- sex: ``M``/``F``, ``male``/``female``, ``man``/``woman``, ``boy``/``girl`` in any case; the
  numeric codes of EDF+/MNE, ``1`` = male, ``2`` = female, ``0`` = unknown; ``O``/``other``,
  ``U`` and ``n/a``/empty = unknown (the model knows only male/female). In a ``gender`` column
  numbers are refused (datasets disagree on whether 0 or 1 is male), unless a BIDS
  ``participants.json`` beside the table gives their ``Levels`` (e.g. ``{"0": "female",
  "1": "male"}``), which then apply to any sex/gender column.

:func:`parse_age` and :func:`parse_sex` read a table's value (refusing what they cannot read);
:func:`age_value` and :func:`sex_value` turn a manifest's value into the model's input (NaN
when unknown or unreadable); :func:`age_flag` and :func:`sex_flag` check ``--age`` / ``--sex``
(and the Python API's ``age`` / ``sex``); :func:`age_input` and :func:`sex_input` take the
values of a scikit-learn table (numbers as they are, text as in a manifest).
"""

from __future__ import annotations

import math

import numpy as np

from eegformer_cli.errors import UsageError

#: Spellings read as "unknown" in any column (compared in lower case, after stripping).
MISSING_VALUES = frozenset({"", "n/a", "na", "nan", "none", "null", "unknown", "?"})

_SEX_BY_SPELLING = {
    **dict.fromkeys(("m", "male", "man", "boy"), "M"),
    **dict.fromkeys(("f", "female", "woman", "girl"), "F"),
    **dict.fromkeys(("o", "other", "u"), None),
}
_SEX_BY_NUMBER = {0: None, 1: "M", 2: "F"}
_ACCEPTED_SEX = (
    "M/F, male/female, man/woman, boy/girl, 1 = male, 2 = female; 0, O/other, U or n/a = unknown"
)
MAX_AGE_YEARS = 130.0
#: The model's sex input of each sex.
SEX_CODES = {"M": 0.0, "F": 1.0}


def is_missing(value) -> bool:
    """True for None, NaN and the texts of :data:`MISSING_VALUES` (any case, blanks stripped)."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.strip().lower() in MISSING_VALUES


def parse_sex(value, numeric_codes: bool = True) -> str | None:
    """``"M"``, ``"F"`` or None (unknown) from a sex/gender value (see the module docstring).

    Parameters
    ----------
    value : str, int or float as found in a table.
    numeric_codes : accept the numeric codes 0/1/2 (False for a ``gender`` column).

    Raises
    ------
    ValueError : an unrecognised value; the message lists the accepted codes.
    """
    if is_missing(value):
        return None
    text = str(value).strip().lower()
    if text in _SEX_BY_SPELLING:
        return _SEX_BY_SPELLING[text]
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        if not numeric_codes:
            raise ValueError(
                f"numeric gender code {str(value).strip()!r} is ambiguous (datasets "
                "differ on which number is male); write M/F, or give the codes' "
                "Levels in participants.json"
            )
        if number in _SEX_BY_NUMBER:
            return _SEX_BY_NUMBER[int(number)]
    raise ValueError(f"unknown sex code {str(value).strip()!r}; accepted: {_ACCEPTED_SEX}")


def parse_age(value) -> float | None:
    """Age in years (float) or None (unknown), from a number or text such as ``"51,59"``.

    Raises
    ------
    ValueError : not a number, not finite, negative, or above 130 years.
    """
    if is_missing(value):
        return None
    text = str(value).strip()
    if text.count(",") == 1 and "." not in text:
        text = text.replace(",", ".")
    try:
        age = float(text)
    except ValueError:
        raise ValueError(f"age {str(value).strip()!r} is not a number of years") from None
    if not math.isfinite(age):
        raise ValueError(f"age {str(value).strip()!r} is not a finite number of years")
    if age < 0:
        raise ValueError(f"age {str(value).strip()!r} is negative")
    if age > MAX_AGE_YEARS:
        raise ValueError(f"age {str(value).strip()!r} is above {MAX_AGE_YEARS:g} years")
    return age


def age_value(text: str | None) -> float:
    """Manifest age (years or ``n/a``) -> the model's age input: float years, NaN when unknown
    (or unreadable)."""
    try:
        age = parse_age(text)
    except ValueError:
        return float("nan")
    return float("nan") if age is None else age


def sex_value(text: str | None) -> float:
    """Sex text (``M``/``F``/``male``/... or ``n/a``, see :func:`parse_sex`) -> the
    model's sex input: 0.0 male, 1.0 female, NaN when unknown (or unreadable)."""
    try:
        sex = parse_sex(text)
    except ValueError:
        return float("nan")
    return float("nan") if sex is None else SEX_CODES[sex]


def age_flag(age) -> float | None:
    """``--age`` in years, checked (UsageError), or None."""
    if age is None:
        return None
    try:
        value = float(age)
    except (TypeError, ValueError):
        value = math.nan
    if not 0 <= value < 150:
        raise UsageError(f"invalid --age {age!r}; give years, e.g. 42")
    return value


def sex_flag(sex) -> float:
    """``--sex`` as the model's input (0.0 male, 1.0 female), checked (UsageError)."""
    code = sex_value(str(sex))
    if math.isnan(code):
        raise UsageError(f"invalid --sex {sex!r}; use M or F (or male/female)")
    return code


def age_input(value) -> float:
    """A table's age (a number, text or None) as the model's input: NaN when unknown."""
    if value is None or isinstance(value, (int, float, np.number)):
        return math.nan if value is None else float(value)
    return age_value(str(value))


def sex_input(value) -> float:
    """A table's sex as the model's input: 0 and 1 are the model's own codes (0 male,
    1 female), text is read as in a manifest, NaN when unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan
    if isinstance(value, (int, float, np.number)) and value in (0, 1):
        return float(value)  # the model's own code: 0 male, 1 female
    return sex_value(str(value))
