"""The report's page: an :class:`mne.Report` whose items carry no tags, with the report's
styles (:data:`REPORT_CSS`), and the two items every section adds besides its own HTML: a
one-paragraph note and a figure (embedded as PNG, then closed); and prose made HTML
(:func:`inline_code`: escaped, a command or option in backticks shown as code).
"""

from __future__ import annotations

import html
import re

import matplotlib

matplotlib.use("Agg")  # before pyplot (figures.py chooses it too; either may come first)
import matplotlib.pyplot as plt

#: Styles added to MNE's page: the tag filter hidden (the report has no tags), the title whole,
#: the notes boxed, tables inside the page, a table of contents of readable contrast.
REPORT_CSS = """
#filter-by-tags-dropdown-menu { display: none !important; }
/* the title (data, crop, label, run folder) whole in the top bar: smaller, wrapping if it must */
#top-bar .navbar-brand { white-space: normal; }
#top-bar .navbar-brand .fs-3 { font-size: 1.25rem !important; }
.eeg-note { background: #f3f6fb; border-left: 4px solid #4a6fa5; padding: .6em 1em;
            margin: .8em 0; font-size: .92em; }
.eeg-note dt { font-weight: 600; margin-top: .35em; }
.eeg-note dd { margin-left: 1.2em; margin-bottom: .1em; }
.eeg-oof, .eeg-oof table, .eeg-oof th, .eeg-oof td { font-size: 13px; }
/* tables wrap to the page's width instead of running past its edge: cells break between
   words (a word longer than its column breaks too; the per-recording table's ids and class
   names anywhere); headers only between words, never inside one, so the table makes each
   column as wide as its header's longest word */
table.table { max-width: 100%; }
table.table td { overflow-wrap: break-word; }
table.table th { overflow-wrap: normal; word-break: normal; hyphens: manual; }
.eeg-oof td { overflow-wrap: anywhere; }
/* the table of contents: the entry of the section in view white on dark blue, hovered or
   focused too (Bootstrap's pills give white on #0d6efd, 4.5:1; this is 11:1), the others
   near black */
#toc-navbar .nav-link { color: #1c2733; }
#toc-navbar .nav-link.active, #toc-navbar .nav-link.active:hover,
#toc-navbar .nav-link.active:focus { color: #ffffff; background-color: #1f3b63;
  border-color: #1f3b63; font-weight: 600; }
.eeg-oof .bootstrap-table .fixed-table-container .table thead th .th-inner {
  white-space: normal; overflow-wrap: normal; word-break: normal; padding: .3rem; }
/* the sort arrows under a sortable header's words, not beside them: 11 columns fit the page */
.eeg-oof .bootstrap-table .fixed-table-container .table thead th .sortable {
  padding-right: .3rem !important; padding-bottom: 1.3rem; background-position: center bottom; }
"""


#: A span in backticks: a command, an option or a file name in the sentences the report shares
#: with the terminal.
_BACKTICKED = re.compile(r"`([^`]+)`")


def inline_code(text: str) -> str:
    """``text`` as HTML: escaped, and each span in backticks (`eegformer train --merge RUN`)
    as ``<code>``, so no literal backtick reaches the page."""
    return _BACKTICKED.sub(r"<code>\1</code>", html.escape(text))


def untagged_report(title: str):
    """An :class:`mne.Report` whose items carry no tags unless given: MNE's defaults
    ("custom-html", "custom-figure") only add badges and a tag filter, which say nothing here."""
    import mne

    class UntaggedReport(mne.Report):
        def add_html(self, html, title, *, tags=(), **kwargs):
            return super().add_html(html, title, tags=tags, **kwargs)

        def add_figure(self, fig, title, *, tags=(), **kwargs):
            return super().add_figure(fig, title, tags=tags, **kwargs)

    report = UntaggedReport(title=title, verbose="error")
    report.add_custom_css(REPORT_CSS)
    return report


def add_note(report, title: str, text: str, section: str) -> None:
    """Add ``text`` (:func:`inline_code`) to ``report`` as one paragraph titled ``title`` in
    ``section``."""
    report.add_html(f"<p>{inline_code(text)}</p>", title, section=section)


def add_figure(report, fig, title: str, section: str, caption: str | None = None) -> None:
    """Add the matplotlib figure ``fig`` to ``report`` (PNG) and close it; ``caption``: prose
    (:func:`inline_code`; MNE's page escapes a plain string, so it is passed as markup)."""
    from markupsafe import Markup

    shown = None if caption is None else Markup(inline_code(caption))
    report.add_figure(fig, title, section=section, image_format="png", caption=shown)
    plt.close(fig)
