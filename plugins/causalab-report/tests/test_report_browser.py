"""The report page in a real browser (Debian's headless chromium through chromium-driver and Selenium),
opened from disk with the network off: what a person would check, and that nothing is fetched or fails.

One browser for the session; each test opens a page, looks, and checks the browser's logs: no console
error, and no request but the page's own ``file://`` address. Screenshots are saved under pytest's tmp
folder and listed at the end of the session."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path

import pytest

from causalab_core import api, load

from causalab_report.page import write_report

SWEEP = Path(__file__).parents[3] / "documents" / "real" / "weekdays_layer_sweep.json"
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
INSTALL = "install Debian's chromium and chromium-driver (scripts/setup.sh does, as root)"


@pytest.fixture(scope="session")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install causalab-report[test]")
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium") or CHROMIUM, shutil.which("chromedriver") or DRIVER
    assert Path(chromium).is_file() and Path(driver).is_file(), INSTALL
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--no-first-run", "--disable-extensions",
                     "--disable-background-networking", "--disable-component-update",
                     # the network off: every name fails to resolve and every proxied request fails
                     "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    chrome = webdriver.Chrome(service=Service(driver), options=options)  # a given driver: no Selenium Manager
    chrome.set_page_load_timeout(30)
    yield chrome
    chrome.quit()


@pytest.fixture(scope="session")
def pages(runs):
    """The pages the tests open: the sweep's, the one-axis run's, and the sweep compared with its planted copy."""
    return {"sweep": write_report(runs["sweep"])[0], "line": write_report(runs["line"])[0],
            "cube": write_report(runs["cube"])[0], "signed": write_report(runs["signed"])[0],
            "nudged": write_report(runs["sweep"], compare_with=runs["nudged"])[0],
            "compare": write_report(runs["compared"], compare_with=runs["planted"])[0]}


def open_page(browser, path: Path):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get_log("browser"), browser.get_log("performance")  # what an earlier page left
    browser.get(path.as_uri())
    WebDriverWait(browser, 10).until(lambda b: b.execute_script("return document.body.dataset.ready") == "1")
    return browser


def quiet(browser, path: Path) -> None:
    """No console message above info, no failed load, and no request but for the page itself."""
    logged = [e for e in browser.get_log("browser") if e["level"] != "INFO" or e.get("source") == "network"]
    assert logged == []
    requested = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.loadingFailed"):
            requested.append(message["params"].get("request", {}).get("url") or message["method"])
    assert set(requested) <= {path.as_uri()}, requested


def payload(browser) -> dict:
    return browser.execute_script("return JSON.parse(document.getElementById('report-data').textContent)")


def test_the_heatmap_has_a_cell_per_point_with_its_value(browser, pages, runs, shoot):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    open_page(browser, pages["sweep"])
    run = load(runs["sweep"])
    for metric in ("iia_count", "iia_day", "iia_answer"):
        cells = browser.find_elements(By.CSS_SELECTOR, f'svg.heatmap[data-metric="{metric}"] rect.cell')
        assert len(cells) == 24  # 8 layers x 3 positions
        means = {(s["layer"], s["pos"]): s["mean"] for s in run.records["summaries"] if s["metric"] == metric}
        shown = {}
        for cell in cells:
            point = payload_point(browser, int(cell.get_attribute("data-p")))
            shown[point] = float(cell.get_attribute("data-value"))
        assert shown == {(layer, str(pos)): mean for (layer, pos), mean in means.items()}
    # what a person reads off the figure: the printed value in each cell, and the axis labels with tokens
    texts = [t.text for t in browser.find_elements(By.CSS_SELECTOR, 'svg.heatmap[data-metric="iia_count"] text.v')]
    assert len(texts) == 24 and texts.count("1.00") == 2
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, 'svg.heatmap[data-metric="iia_count"] text')]
    assert "-4 (varies: Thursday, …)" in labels and "layer" in labels
    # hover: the value, its interval over rows and the eligible rows
    p = [q["name"] for q in payload(browser)["points"]].index("layer=7,pos=-1")
    cell = browser.find_element(By.CSS_SELECTOR, f'svg.heatmap[data-metric="iia_day"] rect.cell[data-p="{p}"]')
    ActionChains(browser).move_to_element(cell).perform()
    tip = browser.find_element(By.ID, "tip")
    assert tip.is_displayed()
    summary = json.loads((runs["sweep"] / "layer=7,pos=-1" / "iia_day.json").read_text())["summary"]
    assert tip.text.splitlines()[:5] == [
        "layer = 7", "pos = -1 (:)", f"iia_day: {summary['mean']:.4g}",
        f"95% interval over rows: [{summary['mean_low']:.4g}, {summary['mean_high']:.4g}]", "eligible rows: 60 of 60"]
    assert browser.find_element(By.CSS_SELECTOR, "header .provenance").is_displayed()
    shoot(browser, "sweep-heatmaps")
    quiet(browser, pages["sweep"])


def payload_point(browser, p: int) -> tuple:
    point = browser.execute_script(
        "const D = JSON.parse(document.getElementById('report-data').textContent);"
        "return D.points[arguments[0]].at.map((i, k) => D.labels[D.axes[k]][i]);", p)
    return int(point[0]), point[1]


def test_a_click_on_a_cell_shows_its_rows_with_the_windows_highlighted(browser, pages, runs, shoot):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(browser, pages["sweep"])
    data = payload(browser)
    p = [q["name"] for q in data["points"]].index("layer=1,pos=-4")
    browser.find_element(By.CSS_SELECTOR, f'svg.heatmap[data-metric="iia_count"] rect.cell[data-p="{p}"]').click()
    detail = browser.find_element(By.CSS_SELECTOR, '.detail[data-metric="iia_count"]')
    assert detail.is_displayed() and detail.find_element(By.TAG_NAME, "h3").text.startswith("layer=1,pos=-4 — iia_count")
    content = json.loads((runs["sweep"] / "layer=1,pos=-4" / "iia_count.json").read_text())
    rows = [json.loads(line) for line in (runs["sweep"] / "data.jsonl").read_text().splitlines()]
    shown = detail.find_elements(By.CSS_SELECTOR, "tr.row")
    assert len(shown) == 60
    for tr in shown[:12]:  # every row is drawn alike: a dozen, read as a person reads them
        row = int(tr.get_attribute("data-row"))
        assert float(tr.find_element(By.CSS_SELECTOR, "td.value").get_attribute("data-value")) == content["values"][row]
        for name, record in content["positions"].items():
            prompt = tr.find_element(By.CSS_SELECTOR, f'.prompt[data-input="{record["input"]}"]')
            marked = prompt.find_elements(By.CSS_SELECTOR, f".tok.win.{record['role']}")
            assert [int(t.get_attribute("data-pos")) for t in marked] == record["rows"][row]["window"]
            assert [t.text for t in marked] == record["rows"][row]["tokens"]
        base = tr.find_element(By.CSS_SELECTOR, '.prompt[data-input="base"]').find_element(By.CSS_SELECTOR, ".tok.win")
        assert base.text == rows[row]["day"]  # position -4 of the base prompt is its start day
        assert f'label_count "{rows[row]["label_count"]}"' in tr.text.replace("\n", " ")
    # filter: the rows whose value is 0, then sorted by value (largest first)
    Select(detail.find_element(By.CSS_SELECTOR, "select.filter")).select_by_value("zero")
    detail = browser.find_element(By.CSS_SELECTOR, '.detail[data-metric="iia_count"]')
    zeros = [i for i, v in enumerate(content["values"]) if v == 0]
    assert [int(tr.get_attribute("data-row")) for tr in detail.find_elements(By.CSS_SELECTOR, "tr.row")] == zeros
    assert detail.find_element(By.CSS_SELECTOR, ".count").text == f"{len(zeros)} of 60 rows"
    Select(detail.find_element(By.CSS_SELECTOR, "select.filter")).select_by_value("all")
    browser.find_element(By.CSS_SELECTOR, '.detail[data-metric="iia_count"] th[data-sort="value"]').click()
    browser.find_element(By.CSS_SELECTOR, '.detail[data-metric="iia_count"] th[data-sort="value"]').click()
    first = browser.find_element(By.CSS_SELECTOR, '.detail[data-metric="iia_count"] tr.row')
    assert float(first.find_element(By.CSS_SELECTOR, "td.value").get_attribute("data-value")) == max(content["values"])
    browser.execute_script("arguments[0].scrollIntoView()", browser.find_element(By.CSS_SELECTOR, '.detail[data-metric="iia_count"]'))
    shoot(browser, "sweep-rows-of-a-point")
    quiet(browser, pages["sweep"])


def test_a_one_axis_sweep_is_a_line_with_its_interval(browser, pages, runs, shoot):
    from selenium.webdriver.common.by import By

    open_page(browser, pages["line"])
    points = browser.find_elements(By.CSS_SELECTOR, 'svg.line[data-metric="iia_day"] circle.pt')
    assert len(points) == 8 and browser.find_elements(By.CSS_SELECTOR, 'svg.line[data-metric="iia_day"] polygon.band')
    run = load(runs["line"])
    means = [s["mean"] for s in run.records["summaries"] if s["metric"] == "iia_day"]
    assert [float(c.get_attribute("data-value")) for c in points] == means
    points[1].click()
    rows = browser.find_elements(By.CSS_SELECTOR, '.detail[data-metric="iia_day"] tr.row')
    assert len(rows) == 60 and all(r.find_elements(By.CSS_SELECTOR, ".tok.win.write") for r in rows[:5])
    shoot(browser, "line")
    quiet(browser, pages["line"])


def test_a_third_axis_is_chosen_in_a_bar_and_the_heatmap_follows(browser, pages, runs, shoot):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(browser, pages["cube"])
    summaries = load(runs["cube"]).records["summaries"]
    for scale in (1, 8):
        Select(browser.find_element(By.CSS_SELECTOR, '.controls select[data-axis="2"]')).select_by_visible_text(str(scale))
        cells = browser.find_elements(By.CSS_SELECTOR, 'svg.heatmap[data-metric="p_base"] rect.cell')
        assert sorted(float(c.get_attribute("data-value")) for c in cells) == sorted(
            s["mean"] for s in summaries if s["scale"] == scale)
    cells[0].click()  # at scale 8
    heading = browser.find_element(By.CSS_SELECTOR, '.detail[data-metric="p_base"] h3').text
    assert heading.endswith("60 of 60 rows eligible") and ",scale=8 — p_base" in heading
    shoot(browser, "three-axes")
    quiet(browser, pages["cube"])


def test_the_compare_view_lists_the_planted_difference(browser, pages, runs, shoot):
    from selenium.webdriver.common.by import By

    open_page(browser, pages["compare"])
    point, metric = runs["at"]
    listed = browser.find_elements(By.CSS_SELECTOR, "#differences tr.diff")
    assert [(tr.get_attribute("data-metric"), tr.find_elements(By.TAG_NAME, "td")[1].text) for tr in listed] == [(metric, point)]
    cells = [td.text for td in listed[0].find_elements(By.TAG_NAME, "td")]
    assert cells[5:8] == ["1", str(runs["row"]), str(runs["row"])]  # rows that differ, which, IIA rows flipped
    assert "1 IIA rows flipped" in browser.find_element(By.CSS_SELECTOR, "#differences pre.line").text
    assert len(browser.find_elements(By.CSS_SELECTOR, f'svg.heatmap[data-metric="{metric}"]')) == 3  # A, B, B - A
    shoot(browser, "compare-top")
    listed[0].click()
    detail = browser.find_element(By.CSS_SELECTOR, f'.detail[data-metric="{metric}"]')
    (tr,) = detail.find_elements(By.CSS_SELECTOR, "tr.row")  # filtered to the rows that differ
    assert int(tr.get_attribute("data-row")) == runs["row"] and "differs" in tr.get_attribute("class")
    assert tr.find_element(By.CSS_SELECTOR, "td.value").text == "0" and tr.find_element(By.CSS_SELECTOR, "td.value-b").text == "1"
    browser.execute_script("arguments[0].scrollIntoView()", detail)
    shoot(browser, "compare-rows")
    quiet(browser, pages["compare"])


def test_the_page_says_what_was_done_and_how_to_run_it_again(browser, pages, runs, shoot):
    from selenium.webdriver.common.by import By

    open_page(browser, pages["cube"])
    (row,) = browser.find_elements(By.CSS_SELECTOR, "#what table.done tbody tr")
    cells = dict(zip(["write", "into", "at", "does", "source", "featurizer"],
                     (td.text for td in row.find_elements(By.TAG_NAME, "td"))))
    assert cells == {"write": "noise", "into": "the base run",
                     "at": "block_input, layer each of layer, position each of pos",
                     "does": "noise (scale each of scale)", "source": "none", "featurizer": "the whole vector"}
    assert "p_base: p_answer of the base run" in browser.find_element(By.CSS_SELECTOR, "#what ul").text
    open_page(browser, pages["sweep"])
    (row,) = browser.find_elements(By.CSS_SELECTOR, "#what table.done tbody tr")
    said = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert said[3:] == ["swap", "cf_resid: the counterfactual run at block_input, layer each of layer, position "
                                "each of pos", "the whole vector"]
    provenance = {tr.find_element(By.TAG_NAME, "th").text: tr.find_element(By.TAG_NAME, "td").text
                  for tr in browser.find_elements(By.CSS_SELECTOR, ".prov table.kv tr")}
    assert provenance["command"] == f"causalab run document.json --engine hooks --out {runs['sweep']}"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", provenance["written"])
    shoot(browser, "what-was-done")
    quiet(browser, pages["sweep"])


def test_each_row_shows_what_the_intervened_run_predicted(browser, pages, runs, shoot):
    from selenium.webdriver.common.by import By

    open_page(browser, pages["sweep"])
    data = payload(browser)
    rows = [json.loads(line) for line in (runs["sweep"] / "data.jsonl").read_text().splitlines()]
    # Where the swap moves the whole answer (block 5, last token) the model now says the counterfactual's
    # answer; where it moves nothing (the count's token in the last block) it still says the base's.
    for point, column in (("layer=5,pos=-1", "label_answer"), ("layer=7,pos=-7", "base_answer")):
        p = [q["name"] for q in data["points"]].index(point)
        browser.find_element(By.CSS_SELECTOR, f'svg.heatmap[data-metric="iia_answer"] rect.cell[data-p="{p}"]').click()
        detail = browser.find_element(By.CSS_SELECTOR, '.detail[data-metric="iia_answer"]')
        assert "predicted (intervened)" in detail.find_element(By.TAG_NAME, "thead").text
        shown = {int(tr.get_attribute("data-row")): json.loads(tr.find_element(By.CSS_SELECTOR, "td.pred").text)
                 for tr in detail.find_elements(By.CSS_SELECTOR, "tr.row")}
        assert len(shown) == 60
        # (a lone token decodes without the space the answer column begins with, as the prompts' tokens do)
        assert shown == {i: row[column].strip() for i, row in enumerate(rows)}, point
    browser.execute_script("arguments[0].scrollIntoView()", detail)
    shoot(browser, "predicted-tokens")
    quiet(browser, pages["sweep"])


def rgb(fill: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", fill))


def test_a_signed_metric_is_centred_on_zero_and_intervals_show_without_hover(browser, pages, runs, shoot):
    from selenium.webdriver.common.by import By

    open_page(browser, pages["signed"])
    cells = browser.find_elements(By.CSS_SELECTOR, 'svg.heatmap[data-metric="ld"] rect.cell')
    values = [float(c.get_attribute("data-value")) for c in cells]
    assert min(values) < 0 < max(values)  # the logit difference is signed here
    low, high = cells[values.index(min(values))], cells[values.index(max(values))]
    r, _, b = rgb(low.get_attribute("fill"))
    assert b > r + 60  # below zero: blue
    r, _, b = rgb(high.get_attribute("fill"))
    assert r > b + 60  # above zero: red
    centre = browser.find_element(By.CSS_SELECTOR, 'svg.heatmap[data-metric="ld"] text.centre').text
    assert centre == "0.00"
    widths = browser.find_elements(By.CSS_SELECTOR, 'svg.heatmap[data-metric="ld"] text.hw')
    assert len(widths) == len(cells)
    summaries = payload(browser)["summary"]["ld"]
    expected = sorted(f"±{(s['mean_high'] - s['mean_low']) / 2:.2f}" for s in summaries)
    assert sorted(w.text for w in widths) == expected
    shoot(browser, "signed-centred")
    quiet(browser, pages["signed"])


def test_compare_hides_differences_below_its_stated_tolerance(browser, pages, shoot):
    from selenium.webdriver.common.by import By

    assert pages["nudged"].name == "compare-nudged.html"
    open_page(browser, pages["nudged"])
    assert browser.find_elements(By.CSS_SELECTOR, "#differences tr.diff") == []
    said = browser.find_element(By.CSS_SELECTOR, "#differences p.tolerance").text
    assert said == ("Row values that differ by at most 0.000001 count as equal: 1 point's metric files differ by no "
                    "more and are not listed.")
    quiet(browser, pages["nudged"])


def test_a_notebook_cell_shows_the_page_inline(browser, runs, tmp_path, shoot):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    cell = tmp_path / "cell.html"
    cell.write_text(f"<!doctype html><html><body>{load(runs['signed'])._repr_html_()}</body></html>")
    browser.get_log("browser"), browser.get_log("performance")
    browser.get(cell.as_uri())
    browser.switch_to.frame(browser.find_element(By.TAG_NAME, "iframe"))
    try:
        WebDriverWait(browser, 10).until(lambda b: b.execute_script("return document.body.dataset.ready") == "1")
        assert len(browser.find_elements(By.CSS_SELECTOR, 'svg.heatmap[data-metric="ld"] rect.cell')) == 8
        assert browser.find_element(By.CSS_SELECTOR, "#what h2").text == "What was done"
    finally:
        browser.switch_to.default_content()
    shoot(browser, "notebook-cell")
    quiet(browser, cell)


# The shipped studies and a 1,000-point sweep (issue #35's acceptance), each page opened like the ones above.

REAL = Path(__file__).parents[3] / "documents" / "real"
STUDIES = sorted(p.name for p in REAL.glob("*.json"))
KEPT = 7
"""Rows each study runs on: a row file's first week (every day once: the steering studies' means are over
its Monday and its Sunday rows), as many drawn from a causal model; a DAS featurizer trains one epoch on
as many. The 23 studies so cut run and write their pages in about 20 s on 2 shared cores, so all run."""

CELLS = """const [metric, kind] = arguments;
const drawn = document.querySelectorAll(kind === "line" ? 'svg.line[data-metric="' + metric + '"] circle.pt'
                                                        : 'svg.heatmap[data-metric="' + metric + '"] rect.cell');
return Array.from(drawn, (c) => [Number(c.dataset.p), c.dataset.value]);"""
"""Each cell (or a line's point) of a metric's figure: its point's index and its ``data-value``, in one call."""


def cut_study(source: Path, folder: Path) -> tuple[Path, Path | None]:
    """The shipped document in ``folder`` on ``KEPT`` rows (a row file's first lines, vector files as
    shipped, DAS training data cut too and one epoch); returns its path and its row file, if any."""
    document = json.loads(source.read_text())
    specs = [document["data"]] + [f["train"]["data"] for f in document.get("featurizers", {}).values() if "train" in f]
    rows = None
    for i, spec in enumerate(specs):
        if "causal_model" in spec:
            spec["causal_model"]["rows"] = KEPT
        if "path" in spec:
            lines = (source.parent / spec["path"]).read_text().splitlines()[:KEPT]
            (folder / f"rows{i}.jsonl").write_text("\n".join(lines) + "\n")
            spec["path"] = str(folder / f"rows{i}.jsonl")
            rows = rows or folder / f"rows{i}.jsonl"
    for featurizer in document.get("featurizers", {}).values():
        if "label" in featurizer.get("train", {}):  # trained by interchange (a PCA is fitted in one pass)
            featurizer["train"]["epochs"] = 1
    for featurizer in document.get("featurizers", {}).values():  # an SAE's folder stays the shipped one
        if featurizer.get("kind") == "sae":
            featurizer["path"] = str((source.parent / featurizer["path"]).resolve())
    for write in document.get("writes", {}).values():  # a steering vector stays the shipped file, swept or not
        vector = (write.get("intervention") or {}).get("vector")
        if isinstance(vector, dict):
            axis = document["sweep"][vector["sweep"]]
            axis[:] = [str((source.parent / name).resolve()) for name in axis]
        elif vector is not None:
            write["intervention"]["vector"] = str((source.parent / vector).resolve())
    path = folder / "doc.json"
    path.write_text(json.dumps(document))
    return path, rows


@pytest.fixture(scope="session")
def studies(tmp_path_factory) -> dict[str, Path]:
    """Every shipped study under ``documents/real/`` run on ``KEPT`` rows, and its page: name -> run folder."""
    from causalab_core import api

    folders = {}
    with one_thread():
        for name in STUDIES:
            folder = tmp_path_factory.mktemp(name.removesuffix(".json"))
            document, rows = cut_study(REAL / name, folder)
            api.run(document, out=folder / "out", engine="hooks")
            write_report(folder / "out", data_file=rows)
            folders[name] = folder / "out"
    return folders


@contextlib.contextmanager
def one_thread():
    """Torch on one thread while the fixtures run their documents: on 2 cores shared with other work, two
    threads made them five times slower (124 s for the studies, against 22 s); the checks compare the page
    with the run's own files, so the thread count changes no assertion."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def drawn_as_summarized(browser, run, metric: str, names: list[str]) -> int:
    """Assert that the metric's figure has a cell per point of its first two axes (a point per value of a
    one-axis sweep, one cell without a sweep), each showing its point's mean; return how many."""
    axes = list(run.document.get("sweep", {}))
    kind = "line" if len(axes) == 1 else "heatmap"
    cells = browser.execute_script(CELLS, metric, kind)
    sizes = [len(run.document["sweep"][a]) for a in axes[:2]]
    assert len(cells) == (sizes[0] * sizes[1] if len(sizes) == 2 else sizes[0] if sizes else 1), (metric, len(cells))
    means = {s["point"]: s["mean"] for s in run.records["summaries"] if s["metric"] == metric}
    for p, value in cells:
        assert (None if value == "" else float(value)) == means[names[p]], (metric, names[p])
    return len(cells)


@pytest.mark.parametrize("name", STUDIES)
def test_each_shipped_study_opens_offline_with_a_cell_per_point(browser, studies, name, shoot):
    """Every study under ``documents/real/`` (layer sweeps, noising and denoising by site, tracing and its
    controls, ablations, DAS and its control, steering by vector and by pairs), cut to ``KEPT`` rows: its
    page draws, per metric, as many cells as its first two axes have points, each with its point's mean;
    a click on a cell shows that point's rows; nothing logged, nothing fetched."""
    from selenium.webdriver.common.by import By

    page = studies[name] / "report.html"
    run = load(studies[name])
    open_page(browser, page)
    try:
        metrics, data = list(run.document["metrics"]), payload(browser)
        assert [m["name"] for m in data["metrics"]] == metrics
        for metric in metrics:
            drawn_as_summarized(browser, run, metric, [q["name"] for q in data["points"]])
        figure = "svg.line circle.pt" if len(run.document.get("sweep", {})) == 1 else "svg.heatmap rect.cell"
        browser.find_element(By.CSS_SELECTOR, f'{figure}[data-metric="{metrics[0]}"]').click()
        rows = browser.find_elements(By.CSS_SELECTOR, f'.detail[data-metric="{metrics[0]}"] tr.row')
        assert len(rows) == KEPT and all(r.find_elements(By.CSS_SELECTOR, ".prompt .tok") for r in rows)
        trained = [f for f in run.document.get("featurizers", {}).values() if f.get("train")]
        # a trained file per point and trained featurizer, each a row; untrained rotations only: no table
        files = browser.find_elements(By.CSS_SELECTOR, "section.featurizers table.feat tbody tr")
        assert len(files) == len(data["points"]) * len(trained)
        if run.circuit is not None:
            drawn_circuit(browser, run, data)
        quiet(browser, page)
    except AssertionError:
        shoot(browser, f"study-{name.removesuffix('.json')}")
        raise


def drawn_circuit(browser, run, data) -> None:
    """A circuit search's page draws the circuit: a line per chosen edge (a key or value group's to each of
    its heads), each node on its layer's row, and a click on an edge shows the rows of the point that scored
    it (its sweep point, named by the edge)."""
    from selenium.webdriver.common.by import By

    lines = browser.find_elements(By.CSS_SELECTOR, "svg.circuit line.edge")
    assert {line.get_attribute("data-edge") for line in lines} == {f"{s}->{r}" for s, r in run.circuit["edges"]}
    nodes = {g.get_attribute("data-node"): float(g.find_element(By.TAG_NAME, "circle").get_attribute("cy"))
             for g in browser.find_elements(By.CSS_SELECTOR, "svg.circuit g.node")}
    assert nodes["logits"] < min(y for n, y in nodes.items() if n != "logits")  # the logits on top
    line = lines[0]
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", line)
    metric = run.circuit["metric"]
    point = data["points"][int(line.get_attribute("data-p"))]["name"]
    sender, receiver = line.get_attribute("data-edge").split("->")
    assert point == f"edge={sender}+{receiver.replace('<', '.').rstrip('>')}"  # the point that scored the edge
    shown = browser.find_elements(By.CSS_SELECTOR, f'.detail[data-metric="{metric}"] tr.row')
    assert len(shown) == KEPT


THOUSAND_ROWS = 4


@pytest.fixture(scope="session")
def thousand(tmp_path_factory) -> Path:
    """The README's 1,000-point sweep (``benchmarks/thousand_points.py``: noise at 8 layers x 12 positions x
    11 scales = 1,056 points, 3 metrics) on 4 rows: its run and page take 5 to 12 s on 2 shared cores."""
    import importlib.util

    from causalab_core import api

    spec = importlib.util.spec_from_file_location(
        "thousand_points", Path(__file__).parents[1] / "benchmarks" / "thousand_points.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    document = benchmark.document()
    document["data"]["causal_model"]["rows"] = THOUSAND_ROWS
    folder = tmp_path_factory.mktemp("thousand")
    (folder / "doc.json").write_text(json.dumps(document))
    with one_thread():
        api.run(folder / "doc.json", out=folder / "out", engine="hooks")
    return write_report(folder / "out")[0]


def test_a_thousand_point_page_draws_every_point_and_opens_a_cell(browser, thousand, shoot):
    """All 1,056 points are drawn: 96 cells (layer x position) per metric at each of the 11 scales chosen
    in the bar, each with its mean; a click shows its 4 rows with the noised position highlighted."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = load(thousand.parent)
    open_page(browser, thousand)
    names = [q["name"] for q in payload(browser)["points"]]
    assert len(names) == 1056
    scales = [str(s) for s in run.document["sweep"]["scale"]]
    seen = set()
    for scale in scales:
        Select(browser.find_element(By.CSS_SELECTOR, '.controls select[data-axis="2"]')).select_by_visible_text(scale)
        for metric in run.document["metrics"]:
            assert drawn_as_summarized(browser, run, metric, names) == 96
            seen |= {p for p, _ in browser.execute_script(CELLS, metric, "heatmap")}
    assert seen == set(range(1056))
    name = "layer=3,pos=7,scale=8"
    p = names.index(name)
    Select(browser.find_element(By.CSS_SELECTOR, '.controls select[data-axis="2"]')).select_by_visible_text("8")
    browser.find_element(By.CSS_SELECTOR, f'svg.heatmap[data-metric="p_base"] rect.cell[data-p="{p}"]').click()
    detail = browser.find_element(By.CSS_SELECTOR, '.detail[data-metric="p_base"]')
    assert detail.find_element(By.TAG_NAME, "h3").text.startswith(f"{name} — p_base")
    rows = detail.find_elements(By.CSS_SELECTOR, "tr.row")
    assert len(rows) == THOUSAND_ROWS
    for tr in rows:
        (marked,) = tr.find_elements(By.CSS_SELECTOR, '.prompt[data-input="base"] .tok.win.write')
        assert marked.get_attribute("data-pos") == "7"
    browser.execute_script("arguments[0].scrollIntoView()", detail)
    shoot(browser, "thousand-points")
    quiet(browser, thousand)


def test_an_estimated_run_says_so_and_shows_the_confirmed_points_real_values(browser, tmp_path, shoot):
    """The weekdays logit difference estimated by integrated gradients, its top 3 points patched for real: the
    agreement is in view (not in a tooltip), every cell is marked, the confirmed ones outlined with their
    patched value, and the table beside lists estimate and patched value as the metric files have them."""
    from selenium.webdriver.common.by import By

    doc = {**json.loads(SWEEP.read_text()), "name": "weekdays-estimated"}
    doc["metrics"] = {"ld": {"kind": "logit_diff", "target": "label_answer", "other": "base_answer"}}
    doc["sweep"] = {"layer": [0, 3, 5, 7], "pos": [-4, -1]}
    doc["data"]["causal_model"]["rows"] = 20
    doc["estimate"] = {"method": "attribution", "steps": 2, "confirm": {"top": 3}}
    (tmp_path / "doc.json").write_text(json.dumps(doc))
    api.run(tmp_path / "doc.json", out=tmp_path / "out", engine="hooks")
    page = write_report(tmp_path / "out")[0]
    open_page(browser, page)
    confirmed = json.loads((tmp_path / "out" / "run.json").read_text())["estimate"]["confirmed"]
    note = browser.find_element(By.CSS_SELECTOR, '#metric-ld .estimate-note')
    assert note.is_displayed()
    assert note.text.startswith("Estimated (attribution, integrated gradients over 2 steps), not patched")
    assert f"Spearman {confirmed['spearman']:.2f}, same sign {round(100 * confirmed['same_sign'])}%" in note.text
    cells = browser.find_elements(By.CSS_SELECTOR, 'svg.heatmap[data-metric="ld"] rect.cell')
    assert len(cells) == 8 and all("estimated" in c.get_attribute("class") for c in cells)
    assert all(t.text.startswith("≈") for t in browser.find_elements(By.CSS_SELECTOR, 'svg.heatmap[data-metric="ld"] text.v'))
    outlined = {payload(browser)["points"][int(c.get_attribute("data-p"))]["name"]: float(c.get_attribute("data-patched"))
                for c in cells if "confirmed" in c.get_attribute("class")}
    assert sorted(outlined) == sorted(confirmed["points"])
    listed = browser.find_elements(By.CSS_SELECTOR, '#metric-ld table.confirmed tbody tr')
    assert len(listed) == 3
    for row in listed:
        name, estimate, patched, _ = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        content = json.loads((tmp_path / "out" / name / "ld.json").read_text())
        assert float(estimate) == pytest.approx(content["summary"]["mean"], rel=1e-3, abs=1e-4)
        assert float(patched) == pytest.approx(content["patched"]["summary"]["mean"], rel=1e-3, abs=1e-4)
        assert outlined[name] == content["patched"]["summary"]["mean"]
    shoot(browser, "estimated")
    quiet(browser, page)
