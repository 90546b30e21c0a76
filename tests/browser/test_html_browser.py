"""`-f html` in a real browser: each verb's page (and each committed example page) loads in
headless Chromium with no console error, no refused or failed load and no request but the page
itself; in the rendered DOM the bars are there, one per known positive owner of each rank, each
as wide as its bytes on the device's scale, side by side from 0, the requested tick where the
budget is; the waterfall's steps are as tall as their deltas and each starts where the last one
ended; and the screenshot shows them in their owners' colours."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from factories import DATA, real_json, write_json

from kvaudit.diff import diff_reports
from kvaudit.engines.inputs import load_report
from kvaudit.render.charts import DEVICE_COLOR, LESS_KV, MORE_KV, OWNER_COLOR, drawable
from kvaudit.render.html import waterfall_steps

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
RESULTS = REPO / "tests" / "benchmarks" / "results"
PX = 0.75
"""How far a drawn edge may sit from where the bytes put it, in CSS pixels (SVG coordinates are
rounded to 1/1000 of a point; the browser lays them out at sub-pixel precision)."""

GEOMETRY = """JSON.stringify(Object.fromEntries([...document.querySelectorAll('[id^="kv-"]')].map(e => {
  const r = e.getBoundingClientRect();
  return [e.id, {x: r.x + window.scrollX, y: r.y + window.scrollY, w: r.width, h: r.height}];
})))"""
HANDLERS = "[...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length"


def make_page(cli, tmp_path: Path, name: str, *args: str) -> Path:
    page = tmp_path / f"{name}.html"
    result = cli(*args, "-f", "html", "-o", str(page))
    assert result.code in (0, 1), result.stderr
    return page


def load_clean(browser, page: Path):
    """The page, loaded: no console error, no exception, no refused load, nothing but itself requested."""
    loaded = browser.open(page)
    assert loaded.problems == [], loaded.problems
    assert loaded.requests == [page.resolve().as_uri()]
    assert loaded.evaluate("document.scripts.length") == 0
    assert loaded.evaluate(HANDLERS) == 0
    return loaded


def pixel(image, x: float, y: float) -> tuple[int, int, int]:
    return image.getpixel((int(x), int(y)))[:3]


def near(rgb: tuple[int, int, int], hex_color: str, tolerance: int = 10) -> bool:
    want = tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return all(abs(a - b) <= tolerance for a, b in zip(rgb, want))


def check_bars(loaded, report) -> int:
    """The rank bars of `report` in the loaded page, against its bytes; returns the segments seen."""
    from PIL import Image
    boxes = json.loads(loaded.evaluate(GEOMETRY))
    shot = Image.open(io.BytesIO(loaded.screenshot())).convert("RGB")
    drawn = drawable(report.ranks)
    assert drawn, "nothing to draw in this report"
    expected = {f"kv-bar-{d.index}-{o.value}" for d in drawn for o, _ in d.segments}
    assert {k for k in boxes if k.startswith("kv-bar-")} == expected
    colours_checked = 0
    for d in drawn:
        device = boxes[f"kv-device-{d.index}"]
        total = d.rank.device_total_bytes
        per_byte = device["w"] / total
        left = device["x"]
        for owner, value in d.segments:
            box = boxes[f"kv-bar-{d.index}-{owner.value}"]
            # as wide as its bytes, right after the owner before it
            assert abs(box["w"] - value * per_byte) <= PX, (owner, box, value * per_byte)
            assert abs(box["x"] - left) <= PX, (owner, box["x"], left)
            left = box["x"] + box["w"]
            # inside its rank's device box, vertically
            assert device["y"] <= box["y"] and box["y"] + box["h"] <= device["y"] + device["h"] + PX
            if box["w"] >= 4:
                colour = pixel(shot, box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
                assert near(colour, OWNER_COLOR[owner]), (owner, colour)
                colours_checked += 1
        tick = boxes[f"kv-requested-{d.index}"]
        assert abs(tick["x"] + tick["w"] / 2 - (device["x"] + d.rank.requested_bytes * per_byte)) <= PX + 1
        room = device["x"] + device["w"] - max(left, tick["x"] + tick["w"])
        if room >= 6:  # the device past the budget shows as the device's grey
            colour = pixel(shot, device["x"] + device["w"] - room / 2, device["y"] + device["h"] / 2)
            assert near(colour, DEVICE_COLOR), colour
    assert colours_checked >= 1
    return len(expected)


REPORT_PAGES = {
    "tp2-run": (DATA / "run2.json",),
    "h200-8b": (RESULTS / "h200-real-llama-3.1-8b-vllm0.33.0.json",),
    "does-not-fit": (DATA / "run5.json",),
    "h200-log": (EXAMPLES / "h200-graphs.vllm.log",),
}


@pytest.mark.parametrize("name", list(REPORT_PAGES))
def test_a_report_page_shows_each_ranks_owners_to_scale(browser, cli, tmp_path, name):
    source = REPORT_PAGES[name][0]
    page = make_page(cli, tmp_path, name, "show", str(source))
    loaded = load_clean(browser, page)
    assert check_bars(loaded, load_report(source)) >= 3
    assert loaded.evaluate("document.querySelector('.banner').textContent").split(":")[0] in ("OK", "FAIL", "UNKNOWN")


def test_a_plan_page_shows_the_predicted_bars_and_the_planned_vs_measured_table(browser, cli, tmp_path):
    from kvaudit.plan import Edits, plan_report
    page = make_page(cli, tmp_path, "plan", "plan", str(DATA / "run1.json"), "--gmu", "0.2",
                     "--max-num-batched-tokens", "256")
    loaded = load_clean(browser, page)
    plan = plan_report(load_report(DATA / "run1.json"), Edits(gpu_memory_utilization=0.2, max_num_batched_tokens=256))
    check_bars(loaded, plan.report)
    rows = loaded.evaluate("""[...document.querySelectorAll('table')].find(t => t.textContent.includes('planned (GiB)'))
                              .querySelectorAll('tbody tr').length""")
    assert rows == sum(len(r.figures) + 1 for r in plan.ranks)


DIFFS = {
    "cpu-batch": (EXAMPLES / "cpu-batch512.json", EXAMPLES / "cpu-batch2048.json"),
    "h200-8b-upgrade": (RESULTS / "h200-real-llama-3.1-8b.json", RESULTS / "h200-real-llama-3.1-8b-vllm0.33.0.json"),
}


@pytest.mark.parametrize("name", list(DIFFS))
def test_a_diff_page_shows_the_waterfall_step_by_step(browser, cli, tmp_path, name):
    from PIL import Image
    a, b = DIFFS[name]
    page = make_page(cli, tmp_path, name, "diff", str(a), str(b))
    loaded = load_clean(browser, page)
    boxes = json.loads(loaded.evaluate(GEOMETRY))
    shot = Image.open(io.BytesIO(loaded.screenshot())).convert("RGB")
    steps, _ = waterfall_steps(diff_reports(load_report(a), load_report(b), "a", "b"))
    assert [k for k in boxes if k.startswith("kv-wf-")] == \
        ["kv-wf-start", *(f"kv-wf-{s.key}" for s in steps), "kv-wf-end"]
    biggest = max(steps, key=lambda s: abs(s.delta_bytes))
    per_byte = boxes[f"kv-wf-{biggest.key}"]["h"] / abs(biggest.delta_bytes)
    level = None  # where the last step ended, in page pixels (y grows downwards)
    for step in steps:
        box = boxes[f"kv-wf-{step.key}"]
        assert abs(box["h"] - abs(step.delta_bytes) * per_byte) <= PX, (step, box)
        before, after = (box["y"] + box["h"], box["y"]) if step.delta_bytes > 0 else (box["y"], box["y"] + box["h"])
        if level is not None:
            assert abs(before - level) <= PX, (step, before, level)
        level = after
        if box["h"] >= 4:
            colour = pixel(shot, box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
            assert near(colour, MORE_KV if step.delta_bytes > 0 else LESS_KV), (step, colour)
    knobs = loaded.evaluate("[...document.querySelectorAll('h2')].map(h => h.textContent)")
    assert knobs[:3] == ["KV from A to B, owner by owner (binding rank)", "Knob differences", "Environment differences"]


def test_report_strings_are_text_in_the_dom(browser, cli, tmp_path):
    hostile = "</title><script>console.error('pwned')</script><img src=x onerror=\"console.error('pwned')\">"
    doc = real_json("run2")
    doc["environment"]["device_name"] = hostile
    doc["warnings"] = [hostile]
    page = make_page(cli, tmp_path, "hostile", "show", str(write_json(tmp_path / "hostile.json", doc)))
    loaded = load_clean(browser, page)  # no 'pwned' on the console, no script, no handler
    assert loaded.evaluate("document.title").endswith(" · " + hostile)
    assert hostile in loaded.evaluate("document.body.textContent")
    assert loaded.evaluate("document.images.length") == 0


@pytest.mark.parametrize("page", sorted(EXAMPLES.glob("*.html")), ids=lambda p: p.name)
def test_the_committed_example_pages_load_cleanly_with_their_charts(browser, page):
    loaded = load_clean(browser, page)
    ids = json.loads(loaded.evaluate(GEOMETRY))
    assert any(k.startswith(("kv-bar-", "kv-wf-")) for k in ids), sorted(ids)
    assert all(box["w"] >= 0 and box["h"] >= 0 for box in ids.values())


def test_there_is_an_example_page_per_verb():
    names = {p.name.split("-")[0] for p in EXAMPLES.glob("*.html")}
    assert {"run", "show", "diff", "plan"} <= names


# ------------------------------------------------------------------------------------------
# the checks above can fail: a page that errs, or loads something, is seen


def test_a_console_error_is_seen(browser, tmp_path):
    page = tmp_path / "err.html"
    page.write_text("<!DOCTYPE html><title>x</title><script>console.error('boom')</script>")
    assert browser.open(page).problems == ["console: boom"]


def test_a_load_refused_by_the_pages_policy_is_seen(browser, tmp_path):
    from kvaudit.render.html import CSP
    page = tmp_path / "csp.html"
    page.write_text(f'<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="{CSP}"><title>x</title>'
                    '<img src="http://127.0.0.1:9/x.png">')
    problems = browser.open(page).problems
    assert problems and "Content Security Policy" in " ".join(problems)


def test_a_request_is_seen(browser, tmp_path):
    page = tmp_path / "req.html"
    page.write_text('<!DOCTYPE html><title>x</title><link rel="stylesheet" href="http://127.0.0.1:9/x.css">')
    loaded = browser.open(page)
    assert "http://127.0.0.1:9/x.css" in loaded.requests

