"""``eegformer report``: built from a real tiny run on sample data (+ its explanations), one
self-contained HTML file; the report of ``eegformer demo`` (what ``make demo`` writes, whose
screens keep nothing) and that of a run whose screen kept the planted interaction of an XOR
study rendered by a real browser (headless Chromium): every figure decoded, the run summary,
metric notes, the preprocessing settings, the Interactions section, the class contrast with
coherence and wPLI apart and a sortable per-recording table there, no table wider than the
page, no header broken inside a word, no literal backtick, attention labels of 10 px or more,
no tag badges; a title naming the run folder and the crop; figures that label the final model,
keep their titles inside, give each attention panel its own scale, keep legends off the data
and draw on the head the band their chart puts first (or the one asked for); counts named for
what they count; parts missing; an incomplete run; not a run folder.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import matplotlib.image
import numpy as np
import pytest
from builders import run_main

from eegformer_cli.cli.app import main
from eegformer_cli.report.attention_figures import attention_figure
from eegformer_cli.report.figures import (
    confusion_matrix_figure,
    training_curves_figure,
)
from eegformer_cli.report.preprocessing import ICA_SETTINGS, PREPROCESS_SETTINGS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# figures: confusion matrix, ROC/PR, training curves, band importance, channel pairs on the head,
# one attention figure per explained class (at least one)
MIN_FIGURES = 6


@pytest.fixture(scope="module")
def report_file(sample_run, tmp_path_factory):
    """report.html of the sample run with its explanations (the CLI, in this process)."""
    run = sample_run
    out = tmp_path_factory.mktemp("report")
    shutil.copy(run["prep"] / "preprocess.json", out / "prep.json")
    for args in (
        ["explain", run["model"], run["prep"], "--out", out / "explanations"],
        [
            "report",
            run["run"],
            "--explanations",
            out / "explanations",
            "--out",
            out / "report.html",
        ],
    ):
        with pytest.raises(SystemExit) as stopped:
            main([str(a) for a in args])
        assert stopped.value.code == 0
    return out / "report.html"


@pytest.fixture(scope="module")
def interaction_report(interaction_run, tmp_path_factory):
    """report.html of a run whose screen kept the planted interaction of an XOR study, with its
    explanations (conftest.py's interaction run; 16 Integrated Gradients steps: fast)."""
    run = interaction_run
    out = tmp_path_factory.mktemp("interaction-report")
    for args in (
        ["explain", run["run"], run["prep"], "--out", out / "explanations", "--n-steps", 16],
        [
            "report",
            run["run"],
            "--explanations",
            out / "explanations",
            "--out",
            out / "report.html",
        ],
    ):
        with pytest.raises(SystemExit) as stopped:
            main([str(a) for a in args])
        assert stopped.value.code == 0
    return out / "report.html"


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    """report.html of ``eegformer demo`` (the whole chain on sample_data/, as ``make demo``)."""
    out = tmp_path_factory.mktemp("demo")
    with pytest.raises(SystemExit) as stopped:
        main(["demo", "--out", str(out)])
    assert stopped.value.code == 0
    return out / "report.html"


@pytest.mark.slow
def test_report_is_one_self_contained_file_with_every_section(report_file):
    text = report_file.read_text(encoding="utf-8")
    sources = re.findall(r'\bsrc="([^"]*)"', text)
    assert len(sources) >= MIN_FIGURES and all(
        s.startswith("data:image/png;base64,") for s in sources
    )
    assert not re.search(r'<link[^>]+href="(?!#|data:)', text)  # no external stylesheet
    assert not re.search(r"<script[^>]+src=", text)  # scripts are inlined
    for title in (
        "Dataset summary",
        "Metrics",
        "Confusion matrix",
        "ROC and precision-recall",
        "Training curves per fold",
        "Band importance per class",
        "Strongest channel-pair attributions",
        "Coarse vs refined attention",
        "logistic_regression",
        "No preprocessing failures",
        "Paired over the same folds: xaiguiformer - logistic_regression, bac:",
        "Paired over the same folds: xaiguiformer - tangent_space, bac:",
        "TS P(true)",
        "Which run this is",
        "What these numbers mean",
        "Preprocessing settings",
        "Class contrast: depression against healthy",
        "Class contrast: the 10 strongest pairs",
        "grouped by true class",
        "Per-recording out-of-fold predictions",
        "About the explanations",
        "two paths",
        "from the linear path",
        "the transformer adds",
        "Paired over the same folds: xaiguiformer - linear_path, bac:",
        "What attention does (out of fold)",
        "Attention entropy per epoch",
        "What the screens found",
        "Interactions: the screens kept nothing in its one fold: entry pairs: best score",
        "explanation / rest",
        "logit change, uniform",
    ):
        assert title in text, title
    assert 'class="badge' not in text  # no MNE tag badges
    # every setting of preprocess.json, the crop first
    settings = json.loads((report_file.parent / "prep.json").read_text())["settings"]
    section = text[text.index("Preprocessing settings") : text.index("Out-of-fold metrics")]
    crop = section.index("crop")
    assert "none: every recording analysed whole" in section
    assert settings["ica"] is False  # ICA off: none of its parameters, which did nothing
    for key in settings:
        label = PREPROCESS_SETTINGS[key][0] if key in PREPROCESS_SETTINGS else key
        if key in ICA_SETTINGS:
            assert f">{html.escape(label)}<" not in section, key
        else:
            assert crop < section.index(html.escape(label)), key
    # the title names the model, the data, its crop, the label and the run folder
    assert (
        "<title>XAIguiFormer (default preset) on sample_data, whole recordings: diagnosis; "
        "run folder run</title>"
    ) in text


@pytest.mark.slow
def test_the_interactions_section_shows_what_was_kept_and_leads_the_contrast(interaction_report):
    text = interaction_report.read_text(encoding="utf-8")
    section = text[text.index("What the screens found") :]
    assert "Interactions: kept something in its one fold: coh theta C3-P4 x wpli beta F4-C4" in (
        section
    )
    assert "<td>r0_f0</td>" in section and "(gate " in section
    # the products' attributions, per class and in the contrast
    used = section[section.index("Interactions the models use") :]
    assert "<td>coh theta C3-P4</td><td>wpli beta F4-C4</td>" in used
    assert "attribution, class patient (logit units)" in used
    # the contrast section says first that the kept product carries more than any pair
    contrast = text[text.index("Class contrast: the interactions first") :]
    assert contrast.index("The kept interactions carry more of the class contrast") < (
        contrast.index("Class contrast: patient against control")
    )


def test_report_title_names_the_dataset_its_crop_and_the_run_folder(tmp_path, monkeypatch):
    from eegformer_cli.report.build import report_title

    prep = tmp_path / "prep"
    prep.mkdir()
    dataset = tmp_path / "msu-schizophrenia"
    dataset.mkdir()
    (prep / "preprocess.json").write_text(json.dumps({"inputs": [str(dataset)]}))
    config = {"data_dir": str(prep), "preset": "paper", "label_column": "diagnosis"}
    assert report_title(config, tmp_path / "run") == (
        "XAIguiFormer (paper preset) on msu-schizophrenia: diagnosis; run folder run"
    )
    (prep / "preprocess.json").write_text(
        json.dumps(
            {
                "inputs": [  # files of a BIDS tree
                    str(dataset / "sub-01" / "eeg" / "a.edf"),
                    str(dataset / "eeg" / "b.edf"),
                ],
                "settings": {"crop_s": None},
            }
        )
    )
    whole = report_title(config, tmp_path / "run")
    assert whole == (
        "XAIguiFormer (paper preset) on msu-schizophrenia, whole recordings: diagnosis; "
        "run folder run"
    )
    # a cropped run's report never carries an uncropped one's title
    (prep / "preprocess.json").write_text(json.dumps({"settings": {"crop_s": 62.0}}))
    assert report_title(config, tmp_path / "run") == (
        "XAIguiFormer (paper preset) on prep, first 62 s of each recording: diagnosis; "
        "run folder run"
    )
    (prep / "preprocess.json").unlink()  # no settings file: the folder's name, no crop
    (tmp_path / "run-crop").mkdir()
    monkeypatch.chdir(tmp_path / "run-crop")  # `eegformer report .` names the folder too
    assert report_title(config, ".") == (
        "XAIguiFormer (paper preset) on prep: diagnosis; run folder run-crop"
    )


def test_figures_label_the_final_model_keep_titles_inside_and_scale_each_panel():
    history = [
        {"repeat": r, "fold": f, "epoch": e, "train_loss": 1.0 / e, "val_loss": 1.0, "val_bac": 0.5}
        for r, f in ((0, 0), (0, 1), (-1, -1))
        for e in (1, 2)
    ]
    fig = training_curves_figure(history)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]  # under the plots
    assert legend == ["repeat 0 fold 0", "repeat 0 fold 1", "final model"]
    assert not any("r-1" in label for label in legend)

    fig = confusion_matrix_figure([[40, 5], [6, 33]], ["healthy", "schizophrenia"], n_folds=15)
    fig.canvas.draw()
    title = fig.axes[0].title.get_window_extent()
    assert fig.bbox.x0 <= title.x0 and title.x1 <= fig.bbox.x1 and title.y1 <= fig.bbox.y1
    assert "summed over 15 folds" in fig.axes[0].get_title()

    bands = ["delta", "theta", "alpha", "beta"]
    coarse = np.full((1, 4, 4), 0.25)
    coarse[0, :, 1] += 0.06
    coarse[0, :, 0] -= 0.06  # rows still sum to 1
    refined = np.full((1, 4, 4), 0.25)
    refined[0, 2, 3], refined[0, 2, 2] = 0.251, 0.249  # nearly uniform
    fig = attention_figure(coarse, refined, bands, "test")
    limits = [image.get_clim() for ax in fig.axes for image in ax.get_images()]
    assert limits[0] == pytest.approx((-0.06, 0.06))  # coarse - 1/4
    assert limits[1] == pytest.approx((-0.001, 0.001))  # refined - 1/4: its own scale
    assert limits[2] == pytest.approx((-0.06, 0.06))  # refined - coarse

    # mne.Report reads pixels back with int(inches x dpi): a size that is not a whole number
    # of pixels by a hair (9.2 in -> 919.999 px) loses one and shears the image
    from eegformer_cli.report.figures import (
        band_importance_figure,
        connectivity_head_figure,
    )

    rng = np.random.default_rng(0)
    pairs = rng.normal(size=(2, 4, 6, 6))
    figures = [
        confusion_matrix_figure(np.eye(3), ["a", "bb", "schizophrenia"]),
        band_importance_figure(rng.normal(size=(2, 9)), ["x", "y"], list("abcdefghi")),
        connectivity_head_figure(
            pairs + pairs.transpose(0, 1, 3, 2),
            ["x", "y"],
            bands,
            ["Fp1", "Fp2", "C3", "C4", "O1", "O2"],
            band_importance=rng.normal(size=(2, 4)),
        ),
    ]
    for fig in figures:
        pixels = fig.get_size_inches() * fig.dpi
        assert (pixels == np.round(pixels)).all(), pixels


def test_report_without_explanations_says_how_to_get_them(sample_run, tmp_path, capsys):
    run = sample_run
    code, output = run_main(capsys, "report", run["run"])
    assert code == 0 and output.strip().endswith("report.html")
    text = (run["run"] / "report.html").read_text(encoding="utf-8")  # the default --out
    assert "No explanations: no --explanations folder was given" in text
    assert "eegformer explain" in text and "Band importance per class" not in text
    code, output = run_main(capsys, "report", tmp_path)
    assert code == 3 and "not a run folder" in output and "Traceback" not in output
    # a wrong --explanations folder is an error naming it, not a quiet note in the HTML
    code, output = run_main(
        capsys,
        "report",
        run["run"],
        "--explanations",
        run["prep"],
        "--out",
        tmp_path / "wrong.html",
    )
    assert code == 3 and "not an explain output folder" in output and str(run["prep"]) in output
    assert not (tmp_path / "wrong.html").exists()


def test_report_of_an_unfinished_run_says_so(sample_run, tmp_path, capsys):
    run = sample_run
    unfinished = tmp_path / "run"
    shutil.copytree(run["run"], unfinished)
    (unfinished / "model.pt").unlink()  # as after a stop before the final model
    code, output = run_main(capsys, "report", unfinished, "--out", tmp_path / "r1.html")
    assert code == 0 and "incomplete run: no model.pt" in output
    assert "incomplete run: no model.pt" in (tmp_path / "r1.html").read_text(encoding="utf-8")
    # splits planning one more fold than metrics.json holds: a stop between two folds
    splits = json.loads((unfinished / "splits.json").read_text())
    splits["folds"].append({**splits["folds"][0], "fold": 1})
    (unfinished / "splits.json").write_text(json.dumps(splits))
    code, output = run_main(capsys, "report", unfinished, "--out", tmp_path / "r2.html")
    assert code == 0 and "1 of 2 folds finished" in output
    # an interrupted run's metrics.json says so itself: the verdict box opens with it
    metrics = json.loads((unfinished / "metrics.json").read_text())
    why = "incomplete run: 1 of 3 folds finished; no final model (model.pt) yet, so ..."
    (unfinished / "metrics.json").write_text(
        json.dumps({**metrics, "complete": False, "incomplete": why})
    )
    code, output = run_main(capsys, "report", unfinished, "--out", tmp_path / "r3.html")
    text = (tmp_path / "r3.html").read_text(encoding="utf-8")
    assert code == 0 and why in output
    verdict = text[text.index('id="eeg-verdict"') :]
    assert verdict.index('scope="row">incomplete run') < verdict.index('scope="row">score')
    # the run summary: no finish time, and no final model it does not have
    summary = dict(
        re.findall(r'<th scope="row">([^<]*)</th><td>(.*?)</td>', text[text.index("Which run") :])
    )
    assert summary["finished"].startswith("not finished: 1 of 3 folds finished; no final")
    assert "UTC" not in summary["finished"]
    assert summary["model.pt"].startswith("not written: the run stopped before its final model")
    assert "retrained" not in summary["model.pt"]


@pytest.mark.slow
def test_report_refuses_another_models_explanations_and_damaged_predictions(
    report_file, sample_run, tmp_path, capsys
):
    run = sample_run
    other = tmp_path / "other"
    shutil.copytree(run["run"], other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "labels": ["control", "patient"]}))
    code, output = run_main(
        capsys,
        "report",
        other,
        "--explanations",
        report_file.parent / "explanations",
        "--out",
        tmp_path / "mix.html",
    )
    assert code == 3 and "explains another model than this run's: classes" in output
    assert "(run: ['control', 'patient'])" in output and not (tmp_path / "mix.html").exists()
    # out-of-fold predictions cut short: an input error naming the file, not a crash
    damaged = tmp_path / "damaged"
    shutil.copytree(run["run"], damaged)
    oof = damaged / "oof_predictions.tsv"
    oof.write_text(oof.read_text()[:300])
    code, output = run_main(capsys, "report", damaged, "--out", tmp_path / "d.html")
    assert code == 3 and f"{oof}: damaged out-of-fold predictions" in output
    # no metrics.json: said on stderr with the way out, not only inside the HTML
    (damaged / "metrics.json").unlink()
    code, output = run_main(capsys, "report", damaged, "--out", tmp_path / "m.html")
    assert code == 0 and "incomplete run: no metrics.json" in output
    assert "rerun the same `eegformer train` command" in output


#: Injected into a copy of a report: once loaded, it writes into the DOM what the browser shows
#: (decoded images, the verdict box, figures, tables cut by the page, header words broken, the
#: text a reader sees, the attention figures' scale) and, on the sortable per-recording table,
#: whether a click on P(true) sorts its rows.
PROBE = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const b = document.body;
  b.setAttribute('data-decoded', [...document.images].filter(
      i => i.complete && i.naturalWidth > 0).length);
  // the verdict box first, above the metrics table; the calibration section's figure and table
  const top = e => e ? e.getBoundingClientRect().top + window.scrollY : -1;
  const verdict = document.getElementById('eeg-verdict');
  const metrics = [...document.querySelectorAll('p')].find(
      p => p.textContent.startsWith('Out-of-fold metrics'));
  b.setAttribute('data-verdict-rows', verdict ? verdict.querySelectorAll('tr').length : 0);
  b.setAttribute('data-verdict-above', verdict !== null && metrics !== undefined
                 && top(verdict) < top(metrics));
  const item = title => [...document.querySelectorAll('.accordion-item')].find(e => {
    const heading = e.querySelector('.accordion-header, button');
    return heading && heading.textContent.trim() === title;
  });
  // a report item (not the table of contents) titled so, holding a decoded image
  const figureAfter = title => [...document.querySelectorAll('.accordion-item')].some(e => {
    const heading = e.querySelector('.accordion-header, button');
    const image = e.querySelector('img');
    return heading && heading.textContent.trim().startsWith(title) && image !== null
           && image.complete && image.naturalWidth > 0;
  });
  b.setAttribute('data-reliability', figureAfter('Reliability diagram'));
  b.setAttribute('data-contrast', figureAfter('Class contrast: '));
  const contrast = [...document.querySelectorAll('.accordion-item')].find(e => {
    const heading = e.querySelector('.accordion-header, button');
    return heading && heading.textContent.trim().startsWith('Class contrast: ')
           && e.querySelector('img') !== null;
  });
  b.setAttribute('data-contrast-measures', !!(contrast
      && contrast.textContent.includes('coherence (upper row) and wPLI (lower row)')));
  const screens = item('What the screens found');
  b.setAttribute('data-screens', screens ? screens.querySelector('b').textContent : 'none');
  const used = item('Interactions the models use');
  b.setAttribute('data-used-rows', used ? used.querySelectorAll('tbody tr').length : 0);
  // the preprocessing settings, the crop first
  const prep = item('Preprocessing settings');
  const firstRow = prep && prep.querySelector('tbody tr th');
  b.setAttribute('data-crop-first', !!(firstRow && firstRow.textContent.trim() === 'crop'));
  b.setAttribute('data-prep-rows', prep ? prep.querySelectorAll('tbody tr').length : 0);
  // no table running past the page's edge or cut by a box around it (the hidden copy of a
  // sortable table's header has no size)
  const page = document.documentElement.clientWidth;
  const tables = [...document.querySelectorAll('table')].filter(t => t.offsetWidth > 0);
  const cut = tables.filter(t => {
    const right = t.getBoundingClientRect().right;
    if (right > page + 1) return true;
    for (let e = t.parentElement; e; e = e.parentElement) {
      if (e.getBoundingClientRect().right + 1 < right) return true;
    }
    return false;
  });
  b.setAttribute('data-tables', tables.length);
  b.setAttribute('data-cut-tables', cut.map(t => t.textContent.slice(0, 30)).join(' | ') || 'none');
  // headers, of rows ("run folder") and of columns ("recording", "P(true)", sortable ones
  // included), wrap between words, never inside one (a hyphen may break)
  const broken = [];
  for (const th of document.querySelectorAll('th')) {
    if (th.offsetWidth === 0) continue;
    const texts = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    for (let text = texts.nextNode(); text; text = texts.nextNode()) {
      for (const word of text.textContent.matchAll(/[^\\s\\u2011-]+/g)) {
        const range = document.createRange();
        range.setStart(text, word.index);
        range.setEnd(text, word.index + word[0].length);
        if (word[0].length > 1 && range.getClientRects().length > 1) broken.push(word[0]);
      }
    }
  }
  b.setAttribute('data-broken-labels', broken.join(' | ') || 'none');
  // what a reader sees holds no backtick: commands are shown as code
  b.setAttribute('data-backticks', (b.innerText.match(/`/g) || []).length);
  b.setAttribute('data-code', document.querySelectorAll('.accordion-body code').length);
  // the attention heat maps: the page's pixels per pixel of the image
  const attention = [...document.querySelectorAll('.accordion-item')].filter(
      e => e.textContent.includes('Coarse vs refined attention')).map(e => e.querySelector('img'))
      .filter(i => i && i.naturalWidth > 0);
  b.setAttribute('data-attention-scale', Math.min(...attention.map(i => i.width / i.naturalWidth)));
  const sets = document.getElementById('eeg-prediction-sets');
  b.setAttribute('data-coverage-rows', sets ? [...sets.querySelectorAll('tbody tr')].filter(
      r => /%/.test(r.textContent)).length : 0);
  b.setAttribute('data-badges', [...document.querySelectorAll('.badge')].filter(
      e => e.offsetParent !== null).length);
  const pairItem = [...document.querySelectorAll('.accordion-item')].find(
      e => e.textContent.includes('Strongest channel-pair attributions'));
  const pairImage = pairItem && pairItem.querySelector('img');
  b.setAttribute('data-head-figure', !!(pairImage && pairImage.complete
      && pairImage.naturalWidth > 0 && pairItem.textContent.includes('montage positions')
      && pairItem.textContent.includes('colour bar')));
  // what a reader reads in the verdict box and in every item on attention
  b.setAttribute('data-verdict-text', verdict ? verdict.innerText : '');
  b.setAttribute('data-attention-text', [...document.querySelectorAll('.accordion-item')].filter(
      e => {
        const heading = e.querySelector('.accordion-header, button');
        return heading && /attention/i.test(heading.textContent)
               && !e.querySelector('.accordion-item');  // an item, not its section
      }).map(e => e.innerText).join(' | '));
  // the table of contents: the contrast (WCAG) of its active entry, focused as after a click
  const entry = document.querySelector('#toc-navbar .nav-link');
  entry.style.transition = 'none';  // its end colours at once, however busy the machine
  entry.classList.add('active');
  entry.focus({preventScroll: true});
  const luminance = colour => {
    const [r, g, bl] = colour.match(/[\\d.]+/g).slice(0, 3).map(v => {
      v = Number(v) / 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const entryStyle = getComputedStyle(entry);
  const [light, dark] = [luminance(entryStyle.color), luminance(entryStyle.backgroundColor)]
      .sort((x, y) => y - x);
  b.setAttribute('data-toc-contrast', ((light + 0.05) / (dark + 0.05)).toFixed(2));
  const filter = document.getElementById('filter-by-tags-dropdown-menu');
  b.setAttribute('data-filter-shown', filter && getComputedStyle(filter).display !== 'none');
  const heads = [...document.querySelectorAll('.bootstrap-table thead th')];
  b.setAttribute('data-sortable', heads.filter(t => t.querySelector('.sortable')).length);
  const head = heads.find(t => t.textContent.trim() === 'P(true)');
  head.querySelector('.sortable').click();
  setTimeout(() => {
    const column = [...head.parentNode.children].indexOf(head);
    const values = [...document.querySelectorAll('.bootstrap-table tbody tr')].map(
        row => parseFloat(row.children[column].textContent));
    b.setAttribute('data-rows', values.length);
    b.setAttribute('data-sorted', values.every((v, i) => i === 0 || values[i - 1] <= v));
  }, 300);
}, 300));
</script></body>"""


def rendered(report, tmp_path):
    """What headless Chromium shows of ``report`` (a 1,100 px wide window, narrower than the
    1,300 px the per-recording table was once cut at): a function of an attribute's name
    (:data:`PROBE`) and the DOM as text."""
    probe = tmp_path / f"probe-{report.parent.name}.html"
    page, end = report.read_text(encoding="utf-8").rsplit("</body>", 1)
    probe.write_text(page + PROBE + end, encoding="utf-8")
    dom = subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            "--user-data-dir=" + str(tmp_path / "profile"),
            "--window-size=1100,2000",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )

    def attribute(name: str) -> str:
        found = re.search(rf'<body[^>]* data-{name}="([^"]*)"', dom.stdout)
        assert found, (name, dom.stderr[-2000:])
        return html.unescape(found.group(1))

    return attribute, dom.stdout


def attention_label_px() -> float:
    """The attention heat maps' band labels, in pixels of the figure's image."""
    import matplotlib.pyplot as plt  # after report/figures.py chose its backend

    fig = attention_figure(np.full((1, 3, 3), 1 / 3), np.full((1, 3, 3), 1 / 3), list("abc"), "t")
    sizes = [t.get_fontsize() for ax in fig.axes for t in ax.get_xticklabels()]
    plt.close(fig)
    return min(sizes) * fig.dpi / 72


def check_page(attribute) -> None:
    """What every report shows in the browser: images decoded, the verdict first, no tag
    badge, tables inside the page, headers broken only between words, no literal backtick,
    attention labels of at least 10 px, an Interactions section, and the contrast's two
    measures apart."""
    assert int(attribute("decoded")) >= MIN_FIGURES
    assert attribute("verdict-above") == "true" and int(attribute("verdict-rows")) >= 5
    assert attribute("badges") == "0" and attribute("filter-shown") == "false"
    assert int(attribute("tables")) >= 10 and attribute("cut-tables") == "none"
    assert attribute("broken-labels") == "none"
    assert attribute("backticks") == "0" and int(attribute("code")) >= 3
    assert float(attribute("attention-scale")) * attention_label_px() >= 10
    assert attribute("screens").startswith("Interactions: ")
    assert attribute("contrast") == "true" and attribute("contrast-measures") == "true"
    assert attribute("crop-first") == "true" and int(attribute("prep-rows")) >= 17
    assert attribute("sorted") == "true"
    assert float(attribute("toc-contrast")) >= 7  # WCAG AAA: the active entry reads easily


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)"
)
def test_reports_render_in_headless_chromium(demo_report, interaction_report, tmp_path):
    attribute, dom = rendered(demo_report, tmp_path)
    check_page(attribute)
    # the calibration section's reliability diagram is drawn and the prediction sets' coverage
    # tabulated; the per-recording table sorts by P(true) (a click on its header)
    assert attribute("reliability") == "true" and int(attribute("coverage-rows")) >= 1
    assert int(attribute("sortable")) >= 9 and attribute("rows") == "24"
    assert attribute("head-figure") == "true"  # channel pairs on the head, with colour bars
    # the demo's screens kept nothing: said, with the best score against its gate
    assert attribute("screens").startswith(
        "Interactions: the screens kept nothing in any of the 3 folds, nor for the final "
        "model: entry pairs: best score "
    )
    assert attribute("used-rows") == "0"
    for text in (
        "Which run this is",
        "participant-wise 3-fold cross-validation",
        "the logistic regression (",
        "prediction sets cover",
        "Reliability diagram",
        "Prediction sets: coverage",
        "positive class for AUROC and AUC-PR",
        "What these numbers mean",
        "is chance (2 classes)",
        "Per-recording out-of-fold predictions",
        "Every explained recording was explained out of fold",
        "The strongest pairs, in words",
    ):
        assert text in dom, text
    # no tag badge anywhere (MNE writes a tag as a badge holding its name)
    assert not re.search(r"badge[^>]*>\s*custom-", dom)

    # a run whose screen kept the planted interaction: what it kept, and its attribution
    attribute, dom = rendered(interaction_report, tmp_path)
    check_page(attribute)
    assert attribute("screens").startswith(
        "Interactions: kept something in its one fold: coh theta C3-P4 x wpli beta F4-C4"
    )
    assert int(attribute("used-rows")) >= 1
    assert "The kept interactions carry more of the class contrast than any single pair" in dom
    # its transformer was kept in no fold: the verdict names the linear path, and the attention
    # sections say that the attention did not reach the output
    verdict = attribute("verdict-text")
    assert verdict.startswith(
        "The model (its linear path; the transformer was not kept in any fold): "
    )
    assert "XAIguiFormer" not in verdict and "the transformer adds" not in verdict
    assert "not kept in its one fold" in verdict and "the scores above are the static stage's" in (
        verdict
    )
    attention = attribute("attention-text")
    assert attention.count("The attention did not reach the output") == 2, attention

    screenshot = tmp_path / "report.png"
    subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            "--user-data-dir=" + str(tmp_path / "profile"),
            f"--screenshot={screenshot}",
            "--window-size=1280,4000",
            demo_report.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    pixels = matplotlib.image.imread(screenshot)[..., :3]  # (H, W, 3) in [0, 1]
    assert pixels.shape[:2] == (4000, 1280)
    not_white = (pixels < 0.9).any(axis=-1).mean()
    assert not_white > 0.05 and pixels.std() > 0.1
    # figures are drawn in many colours, not just text: count distinct colours
    rgb = (pixels * 255).astype(np.int32)
    assert len(np.unique(rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2])) > 200


def test_channel_pairs_on_the_head_and_band_importance_title_fit():
    from eegformer_cli.explain.attributions import pair_band_sums
    from eegformer_cli.report.figures import (
        band_importance_figure,
        connectivity_head_figure,
    )

    channels = ["Fp1", "Fp2", "F3", "F4", "C3", "C4", "P3", "P4", "O1", "O2"]
    pairs = np.zeros((2, 3, 10, 10))
    pairs[0, 1, 2, 4] = pairs[0, 1, 4, 2] = 2.0  # class x: F3-C3 in band b, raises
    pairs[0, 0, 3, 5] = pairs[0, 0, 5, 3] = -0.5
    pairs[1, 2, 3, 9] = pairs[1, 2, 9, 3] = -0.02  # class y: F4-O2 in band c, lowers
    fig = connectivity_head_figure(
        pairs, ["x", "y"], ["a", "b", "c"], channels, band_importance=pair_band_sums(pairs)
    )
    heads, bars = fig.axes[:2], fig.axes[2:]
    assert len(bars) == 2  # a colour bar per class, with values
    assert [b.get_xlim() for b in bars] == [
        pytest.approx((-2.0, 2.0)),
        pytest.approx((-0.02, 0.02)),
    ]
    assert "x: strongest pair, b\n(top band of the chart)" in heads[0].get_title()
    assert "y: strongest pair, c" in heads[1].get_title()
    positions = dict(zip(channels, heads[0].collections[0].get_offsets()))
    assert positions["F3"][0] < 0 < positions["F4"][0]  # left hemisphere on the left
    assert positions["Fp1"][1] > positions["C3"][1] > positions["O1"][1]  # nose up
    line = heads[0].collections[-1]
    assert len(line.get_segments()) == 1
    np.testing.assert_allclose(line.get_segments()[-1], [positions["F3"], positions["C3"]])

    fig = band_importance_figure(
        np.array([[0.5, -0.5, 0.0]]),
        ["x"],
        ["a", "b", "c"],
        "the training recordings' mean connectome",
    )
    fig.canvas.draw()
    title = fig.axes[0].title
    box = title.get_window_extent()
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1
    assert "lowers it" in title.get_text() and "mean connectome" in title.get_text()


def test_the_head_shows_the_band_the_chart_puts_first_or_the_one_asked_for():
    from eegformer_cli.explain.attributions import band_totals
    from eegformer_cli.report.figures import connectivity_head_figure

    channels = ["Fp1", "Fp2", "F3", "F4", "C3", "C4", "P3", "P4", "O1", "O2"]
    bands = ["a", "b", "c"]
    pairs = np.zeros((1, 3, 10, 10))
    # band a: large attributions that cancel (the largest sum of |.|, a small signed sum);
    # band c: small ones of one sign (the largest |signed sum|: the chart's top band)
    for k, (i, j) in enumerate([(0, 2), (1, 3), (4, 6), (5, 7)]):
        pairs[0, 0, i, j] = pairs[0, 0, j, i] = 1.0 if k % 2 else -1.0
    for i, j in [(2, 4), (3, 5), (6, 8)]:
        pairs[0, 2, i, j] = pairs[0, 2, j, i] = 0.3
    importance = band_totals(pairs[0] / 2, pairs[0] / 2)[None]
    assert np.abs(pairs[0, 0]).sum() > np.abs(pairs[0, 2]).sum()
    assert np.abs(importance[0]).argmax() == 2
    fig = connectivity_head_figure(pairs, ["x"], bands, channels, band_importance=importance)
    assert fig.axes[0].get_title().startswith("x: strongest 3 pairs, c\n(top band of the chart)")
    fig = connectivity_head_figure(
        pairs, ["x"], bands, channels, band_importance=importance, band="a"
    )
    assert fig.axes[0].get_title().startswith("x: strongest 4 pairs, a\n(chosen with --band)")
    # pairs that artefacts can fake in the band shown are dashed and counted
    rules = {"eye movements": {"bands": ["a"], "channels": ["Fp1"]}}
    fig = connectivity_head_figure(
        pairs, ["x"], bands, channels, band_importance=importance, band="a", cautions=rules
    )
    lines = fig.axes[0].collections[-1]
    dashed = [style[1] is not None for style in lines.get_linestyles()]
    assert sum(dashed) == 1 and "caution: 1 of 4 dashed" in fig.axes[0].get_title()


@pytest.mark.slow
def test_report_band_option_and_its_errors(report_file, sample_run, tmp_path, capsys):
    run = sample_run
    explanations = report_file.parent / "explanations"
    code, output = run_main(
        capsys,
        "report",
        run["run"],
        "--explanations",
        explanations,
        "--band",
        "gamma",
        "--out",
        tmp_path / "gamma.html",
    )
    assert code == 0, output
    text = (tmp_path / "gamma.html").read_text(encoding="utf-8")
    assert "the band gamma (chosen with --band)" in text
    code, output = run_main(
        capsys, "report", run["run"], "--explanations", explanations, "--band", "tetha",
        "--out", tmp_path / "bad.html",
    )  # fmt: skip
    assert code == 2 and "--band" in output and "'theta'" in output
    code, output = run_main(
        capsys, "report", run["run"], "--band", "theta", "--out", tmp_path / "bad.html"
    )
    assert code == 2 and "--explanations" in output and not (tmp_path / "bad.html").exists()


def test_legends_sit_under_the_plots_over_no_data():
    from eegformer_cli.evaluation.run_metrics import Calibration, PermutationTest
    from eegformer_cli.report.attention_figures import attention_entropy_figure
    from eegformer_cli.report.calibration import reliability_figure
    from eegformer_cli.report.figures import band_importance_figure, roc_pr_figure
    from eegformer_cli.report.trust import null_distribution_figure

    rng = np.random.default_rng(0)
    test = {  # a null around chance and observed scores inside it, as the run had
        "null": {"logistic_regression": list(rng.normal(0.5, 0.08, 100))},
        "models": {
            name: {"observed_bac": bac, "p_value": 0.3, "null_from": "logistic_regression"}
            for name, bac in (("xaiguiformer", 0.55), ("logistic_regression", 0.45))
        },
        "n_permutations": 100,
        "permuted": "between participants",
    }
    history = [
        {
            "repeat": 0,
            "fold": f,
            "epoch": e,
            "train_loss": 1 / e,
            "val_loss": 1.0,
            "val_bac": 0.5 + 0.01 * e,
            "attention": {"coarse": {"entropy": [2.0]}, "refined": {"entropy": [1.9]}},
        }
        for f in range(5)
        for e in range(1, 8)
    ]
    predictions = [
        {"model": m, "label": label, "prob_a": str(p), "prob_b": str(1 - p)}
        for m in ("xaiguiformer", "logistic_regression")
        for label, p in zip("ab" * 20, rng.uniform(0, 1, 40))
    ]
    bins = [
        {"lower": k / 10, "mean_predicted": k / 10 + 0.05, "observed": 0.9 - k / 12, "n": 5}
        for k in range(10)
    ]
    calibration = {"models": {"xaiguiformer": {"bins": bins, "ece": 0.1, "target": "P(b)"}}}
    figures = [
        null_distribution_figure(PermutationTest.from_dict(test)),
        training_curves_figure(history),
        attention_entropy_figure(history, 2.079),
        band_importance_figure(rng.normal(size=(2, 8)), ["x", "y"], list("abcdefgh")),
        roc_pr_figure(predictions, ["a", "b"], "b"),
        reliability_figure(Calibration.from_dict(calibration)),
    ]
    for fig in figures:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
        assert legends, fig
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y0 >= fig.bbox.y0
            for ax in fig.axes:
                assert not box.overlaps(ax.get_window_extent(renderer)), (fig, ax.get_title())
        pixels = fig.get_size_inches() * fig.dpi
        assert (pixels == np.round(pixels)).all(), pixels


def test_a_run_whose_transformer_was_kept_nowhere_names_its_linear_path(
    interaction_run, tmp_path, capsys
):
    """The interaction run's transformer never beat its linear path (the planted product is
    linear in the path's inputs): metrics.json, train's summary and the report name the linear
    path as what carries the score, and say that the attention did not reach the output."""
    from eegformer_cli.cli.train import _report
    from eegformer_cli.experiment import run_folder
    from eegformer_cli.experiment.verdict import LINEAR_PATH_SCORER

    run = interaction_run["run"]
    metrics = run_folder.read_metrics(run)
    assert metrics.linear_path["transformer_kept"] == 0, metrics.linear_path
    written = json.loads((run / "metrics.json").read_text())["scored_by"]
    assert written == {
        "model": "linear_path",
        "transformer_folds": 0,
        "n_folds": 1,
        "statement": LINEAR_PATH_SCORER,
    }
    capsys.readouterr()
    _report(metrics, run, as_json=False)
    printed = " ".join(re.sub("[│╭╮╰╯─]", " ", capsys.readouterr().out).split())
    assert printed.startswith("Verdict The model (its linear path; the transformer was not kept")
    assert "xaiguiformer is the model (its linear path; the transformer was not kept in any " in (
        printed
    )
    assert "The attention did not reach the output" in printed
    assert "the transformer adds" not in printed

    code, _ = run_main(capsys, "report", run, "--out", tmp_path / "r.html")
    page = html.unescape((tmp_path / "r.html").read_text(encoding="utf-8"))
    assert code == 0
    headline = re.search(r'class="eeg-headline">([^<]*)<', page).group(1)
    assert headline.startswith(LINEAR_PATH_SCORER[0].upper() + LINEAR_PATH_SCORER[1:] + ": ")
    verdict = page[page.index('id="eeg-verdict"') : page.index("Which run this is")]
    assert "XAIguiFormer" not in verdict and "the transformer adds" not in verdict
    assert "not kept in its one fold" in verdict
    attention = page[page.index("What attention does (out of fold)") :]
    assert attention.index("The attention did not reach the output") < attention.index(
        "What the attention of the two passes does"
    )
    assert "the bac of the model (its linear path" in page and "transformer's bac" not in page
    assert "The xaiguiformer row is the model (its linear path;" in page
    assert "misclassified by the model at least once" in page


def test_curves_that_coincide_are_drawn_once_with_a_legend_that_says_so():
    from eegformer_cli.evaluation.run_metrics import Calibration
    from eegformer_cli.report.calibration import reliability_figure
    from eegformer_cli.report.figures import roc_pr_figure

    rng = np.random.default_rng(0)
    probabilities = {"xaiguiformer": rng.uniform(0, 1, 40), "logistic_regression": None}
    probabilities["linear_path"] = probabilities["xaiguiformer"]  # the transformer kept nowhere
    probabilities["logistic_regression"] = rng.uniform(0, 1, 40)
    predictions = [
        {"model": m, "recording_id": f"r{k}", "repeat": 0, "fold": k % 4, "label": "ab"[k % 2]}
        | {"prob_a": str(1 - p), "prob_b": str(p)}
        for m, values in probabilities.items()
        for k, p in enumerate(values)
    ]
    fig = roc_pr_figure(predictions, ["a", "b"], "b")
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert len(legend) == 4 and len(fig.axes[0].get_lines()) == 3  # 2 curves and chance
    assert legend[0].startswith("linear_path = xaiguiformer (identical curves, drawn once): ")
    assert legend[1].startswith("logistic_regression: pooled AUC")
    bins = [
        {"lower": k / 10, "mean_predicted": k / 10 + 0.05, "observed": 0.5, "n": 4}
        for k in range(10)
    ]
    other = [dict(b, observed=0.4) for b in bins]
    calibration = Calibration.from_dict(
        {
            "models": {
                "xaiguiformer": {"bins": bins, "ece": 0.1},
                "logistic_regression": {"bins": other, "ece": 0.2},
                "linear_path": {"bins": bins, "ece": 0.1},
            }
        }
    )
    fig = reliability_figure(calibration)
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert legend == [
        "perfectly calibrated",
        "xaiguiformer = linear_path (identical curves, drawn once): ECE 0.100",
        "logistic_regression: ECE 0.200",
    ]


def test_captions_say_why_every_class_shares_a_band_and_what_the_training_curves_show():
    from eegformer_cli.report.explanation_notes import band_importance_note
    from eegformer_cli.report.tables import training_curves_caption

    bands = ["delta", "theta", "alpha"]
    same = np.array([[0.2, 0.5, 0.3], [0.1, 0.6, 0.3]])  # theta first for both, all positive
    caption = band_importance_note("the mean connectome", same, ["a", "b"], bands)
    assert caption.startswith(
        "Here every class puts theta first and every bar is positive: this is not a difference "
        "between the classes."
    )
    assert "the class contrast below says how the classes differ" in caption
    apart = np.array([[0.2, -0.5, 0.3], [0.7, 0.1, -0.2]])
    assert band_importance_note("the mean connectome", apart, ["a", "b"], bands).startswith(
        "Each bar is"
    )
    history = [
        {"repeat": 0, "fold": f, "epoch": e, "val_loss": loss}
        for f, losses in ((0, (0.7, 0.6, 0.9)), (1, (0.7, 0.6, 0.61)))
        for e, loss in enumerate(losses, start=1)
    ] + [{"repeat": -1, "fold": -1, "epoch": 1, "val_loss": None}]
    train = {"selection_metric": "log_loss"}
    caption = training_curves_caption(history, train, linear_path=True)
    assert "Here it rises after its lowest in 1 of the 2 folds" in caption
    assert "The epoch with the best validation log_loss in the second half" in caption
    assert "the static stage's (fixed, fitted first) plus the transformer path's" in caption
    flat = training_curves_caption(history[3:], train, linear_path=False)
    assert "Here it rises" not in flat and "static stage" not in flat


def test_the_attention_heat_maps_leave_no_blank_band():
    """Square heat maps in a figure taller than they need left a blank band above them: the
    figure now takes the height its panels use, each panel as wide as its box."""
    import matplotlib.pyplot as plt

    for n_layers, bands in ((1, ["theta", "alpha", "beta"]), (2, list("abcdefgh"))):
        rng = np.random.default_rng(0)
        coarse = rng.dirichlet(np.ones(len(bands)), size=(n_layers, len(bands)))
        fig = attention_figure(coarse, coarse[::-1].copy(), bands, "Attention, class x")
        fig.canvas.draw()
        pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3]
        blank = (pixels > 250).all(axis=(1, 2))  # rows without a drawn pixel
        runs = np.diff(np.flatnonzero(np.diff(np.concatenate([[0], blank, [0]]))))[::2]
        assert runs.max() < 0.35 * fig.dpi, (n_layers, runs.max())
        for ax in fig.axes[::2][: 3 * n_layers]:
            if ax.get_images():
                box, drawn = ax.get_position(original=True), ax.get_position()
                assert drawn.width > 0.98 * box.width  # square, and as wide as its box
        plt.close(fig)


def test_calibration_counts_name_predictions_and_recordings():
    from eegformer_cli.evaluation.oof_calibration import summarise
    from eegformer_cli.evaluation.run_metrics import Calibration
    from eegformer_cli.report.calibration import calibration_table_html, predictions_of

    assert predictions_of(156, 52) == "156 predictions of 52 recordings"
    assert predictions_of(52, 52) == "52 predictions, one per recording"
    rng = np.random.default_rng(1)
    rows = [  # 52 recordings of 26 people, each tested 3 times (repeats)
        {
            "model": "xaiguiformer",
            "recording_id": f"r{k}",
            "participant_id": f"p{k // 2}",
            "label": "ab"[k % 2],
            "prob_a": p,
            "prob_b": 1 - p,
        }
        for repeat in range(3)
        for k, p in enumerate(rng.uniform(0, 1, 52))
    ]
    calibration, sets, _ = summarise(rows, ["a", "b"], "b")
    summary = calibration["models"]["xaiguiformer"]
    assert summary["n"] == 156 and summary["n_recordings"] == 52
    table = calibration_table_html(Calibration.from_dict(calibration))
    assert "156 predictions of 52 recordings" in table and ">156<" not in table
    assert sets["n"] == 52  # the prediction sets: one per recording


def test_the_preprocessing_table_lists_every_setting_the_crop_first():
    from eegformer_cli.preprocess.output import PreprocessFile
    from eegformer_cli.preprocess.settings import PreprocessSettings
    from eegformer_cli.report.preprocessing import preprocessing_html

    settings = PreprocessSettings.from_preset("paper").to_dict()
    document = {
        "settings": {**settings, "crop_s": 62.0},
        "settings_hash": "abc",
        "epoch_length_s": 30.0,
        "participant_pattern": "Subject(\\d+)_",
        "bids_selection": {"task": ["rest"], "session": [], "run": ["1", "2"]},
        "later_entry": "a<b",  # an entry this table does not know yet: shown as it is
        "versions": {"mne": "1.13"},
    }
    table = preprocessing_html(PreprocessFile(document))
    rows = re.findall(r'<th scope="row">([^<]*)</th><td>([^<]*)</td>', table)
    assert rows[0] == ("crop", "the first 62 s of every recording")
    labels = [label for label, _ in rows]
    for key in settings:
        assert (PREPROCESS_SETTINGS[key][0] if key in PREPROCESS_SETTINGS else key) in labels
    values = dict(rows)
    assert values["ICA + ICLabel artefact removal"] == "on"
    assert values["frequency bands (tokens)"].endswith("theta_beta_ratio 4-8 Hz / 12-30 Hz")
    assert values["reference"] == "average of all channels (always)"
    assert values["participant id pattern"] == html.escape("Subject(\\d+)_")
    assert values["BIDS selection"] == "task rest; run 1, 2"
    assert values["later_entry"] == html.escape("a<b")
    assert "segments rejected" not in values  # no manifest: nothing counted

    # ICA off: none of its parameters; the thresholds with what they rejected (the manifest)
    plain = PreprocessSettings.from_preset("default").to_dict()
    assert plain["ica"] is False
    manifest = [
        {"status": "ok", "n_segments": "4", "n_segments_rejected": "0"},
        {"status": "ok", "n_segments": "6", "n_segments_rejected": "0"},
        {"status": "error", "n_segments": "n/a", "n_segments_rejected": "n/a"},
    ]
    table = preprocessing_html(PreprocessFile({"settings": plain}), manifest)
    values = dict(re.findall(r'<th scope="row">([^<]*)</th><td>([^<]*)</td>', table))
    assert values["ICA + ICLabel artefact removal"] == "off"
    assert not {PREPROCESS_SETTINGS[key][0] for key in ICA_SETTINGS} & set(values)
    assert [label for label in values if "ICA" in label] == ["ICA + ICLabel artefact removal"]
    assert values["segment rejected when a channel is absurd: above"] == (
        "25000 \u00b5V (25 mV) peak-to-peak in any of its 3 s windows; rejected no segment here"
    )
    assert "uV" not in table
    assert values["segments rejected"] == "none of the 10 segments: neither threshold rejected any"
    manifest[1]["n_segments_rejected"] = "2"
    values = dict(
        re.findall(
            r'<th scope="row">([^<]*)</th><td>([^<]*)</td>',
            preprocessing_html(PreprocessFile({"settings": plain}), manifest),
        )
    )
    assert values["segments rejected"].startswith("2 of 12 segments (16.7%), in 1 recording ")
    assert not values["segment rejected when a channel is absurd: above"].endswith("here")
    nothing_chosen = {"settings": settings, "bids_selection": {"task": [], "session": []}}
    assert "none: every task, session and run" in preprocessing_html(PreprocessFile(nothing_chosen))
    assert "versions" not in labels  # the run summary lists them
