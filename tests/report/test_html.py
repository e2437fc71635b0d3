"""The HTML page of a report: every part there under its id, every link landing, nothing
loaded from anywhere, every store text escaped, outcomes told without colour, small."""

from __future__ import annotations

import hashlib
import re
import shlex
from html.parser import HTMLParser

import attrs
import pytest
from _samples import HOSTILE, empty_report, large_report, run_point, sample_report
from markupsafe import escape

from runstore.report import MatrixCell, MatrixRow, ReportData, render_html
from runstore.report._html import LETTERS, format_ms, nodeid_anchor, shell_word, visible
from runstore.services._test_runs_rules import normalize_message
from runstore.services.test_runs import Classification, EvidenceRule, Outcome, RunId, RunStatus

SECTIONS = ("runs-chart", "matrix", "signatures", "slowest", "coverage", "failing")


_VOID = frozenset({"meta", "link", "br", "hr", "img", "input"})


class _Page(HTMLParser):
    """What the browser would find: every id, every link target, the matrix cells' text,
    and the text under each id'd element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.links: list[tuple[str, str]] = []  # (tag, href)
        self.resources: list[str] = []  # src= of any element
        self.tags: list[str] = []
        self.cells: list[tuple[str, str]] = []  # (class, text) of matrix body cells
        self._in_matrix_body = False
        self._cell: list[str] | None = None
        self._cell_class = ""
        self.texts: dict[str, list[str]] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.append(tag)
        if "id" in found and found["id"] is not None:
            self.ids.append(found["id"])
        if found.get("href") is not None:
            self.links.append((tag, str(found["href"])))
        if found.get("src") is not None:
            self.resources.append(str(found["src"]))
        if tag == "tbody" and "matrix" in self.ids and self._open_ids_include("matrix"):
            self._in_matrix_body = True
        if tag == "td" and self._in_matrix_body:
            self._cell, self._cell_class = [], found.get("class") or ""
        if tag not in _VOID:
            self._open.append(found.get("id"))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self._open.pop()

    def _open_ids_include(self, wanted: str) -> bool:
        return wanted in self._open

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_matrix_body = False
        if tag == "td" and self._cell is not None:
            self.cells.append((self._cell_class, "".join(self._cell)))
            self._cell = None
        if self._open and tag not in _VOID:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        for opened in self._open:
            if opened is not None:
                self.texts.setdefault(opened, []).append(data)

    def text(self, element_id: str) -> str:
        return "".join(self.texts.get(element_id, []))


def _page(data: ReportData) -> tuple[str, _Page]:
    html = render_html(data)
    page = _Page()
    page.feed(html)
    page.close()
    return html, page


def test_every_part_is_there_under_its_id() -> None:
    nodeid = "tests/test_a.py::test_a"
    _, page = _page(sample_report(nodeid))
    for section in SECTIONS:
        assert section in page.ids
    assert {"run-2", "run-3"} <= set(page.ids)
    assert "run-1" not in page.ids  # run 1 passed: its bar links nowhere
    assert nodeid_anchor(nodeid) in page.ids
    assert len(page.ids) == len(set(page.ids)), "an id is used twice"


def test_a_failing_test_section_is_named_by_the_sha1_of_its_node_id() -> None:
    nodeid = "tests/test_ü.py::test_a[1]"
    digest = hashlib.sha1(nodeid.encode("utf-8")).hexdigest()
    assert nodeid_anchor(nodeid) == f"test-{digest[:12]}"
    assert nodeid_anchor("a") != nodeid_anchor("b")


def test_every_link_lands_on_an_element_of_the_page() -> None:
    html, page = _page(sample_report())
    targets = [href for _, href in page.links if href.startswith("#")]
    assert {"#run-2", "#run-3", "#runs-chart", "#failing"} <= set(targets)
    assert [t for t in targets if t[1:] not in page.ids] == []
    # the chart's bars: one per run, a link for each run with failures
    bars = re.findall(r'<a class="bar" href="#(run-\d+)"', html)
    assert bars == ["run-2", "run-3"]
    assert html.count('<rect class="hit"') == 3


def test_the_page_loads_nothing() -> None:
    data = sample_report(message="see http://example.com/x.js and url(http://x/y.png)",
                         text="@import 'https://example.com/a.css';\n<img src=https://x/y>")
    html, page = _page(data)
    assert page.resources == []  # no src= at all: no script, image or frame is fetched
    external = [href for tag, href in page.links
                if not (href.startswith("#") or (tag == "link" and href == "data:,"))]
    assert external == []
    style = "".join(re.findall(r"<style>(.*?)</style>", html, re.S))
    assert "url(" not in style
    assert "@import" not in style
    tags = "".join(re.findall(r"<[^>]*>", html))  # escaped text holds no "<"
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", tags, re.I)
    assert "http" not in tags
    assert "<script" not in html


HOSTILE_MESSAGE = "</span></p><script>alert(1)</script> \"quoted\" 'single' & \x1b[1mbold\x1b[0m"
HOSTILE_TEXT = ("</pre><script>alert(2)</script>\r\n\x07bell \udcff not utf-8 \u202eevil\n"
                + "x" * 5_000)


def test_text_from_a_store_is_escaped_and_shown_as_text() -> None:
    data = sample_report(HOSTILE, HOSTILE_MESSAGE, HOSTILE_TEXT)
    html, page = _page(data)
    assert "<script" not in html
    html.encode("utf-8")  # no lone surrogate survives: the page can be written
    assert "\x00" not in html
    assert "\x1b" not in html
    assert "\x07" not in html
    assert "\u202e" not in html
    section = page.text(nodeid_anchor(HOSTILE))
    assert visible(HOSTILE, lines=False) in section
    assert "<script>alert('x')</script>" in section  # read back as the text it was
    assert "\\x00" in section
    assert "\\u202e" in section
    assert "\"quoted\" 'single' & bold" in section  # ANSI colours removed, quotes kept
    assert "</pre><script>alert(2)</script>\n\\x07bell \\udcff not utf-8 \\u202eevil" \
        in section
    assert "x" * 5_000 in section  # a very long line is kept whole (the page wraps it)


def test_a_hostile_node_id_in_an_attribute_stays_in_it() -> None:
    html, _ = _page(sample_report('t::x" onmouseover="alert(1)'))
    assert 'onmouseover="alert(1)"' not in html
    assert "&#34;" in html or "&quot;" in html


def test_each_cell_tells_its_outcome_by_a_letter_not_by_colour_alone() -> None:
    _, page = _page(sample_report())
    letters = {letter: cls for cls, letter in
               (("p", "P"), ("f", "F"), ("e", "E"), ("s", "S"), ("xf", "x"), ("xp", "X"))}
    assert set(LETTERS.values()) == set(letters)
    # sample: P F F² for the failing test, F P² and no item for the flaky one
    assert page.cells == [("p", "P"), ("f", "F"), ("f", "F2"), ("f", "F"), ("p", "P2"),
                          ("n", "·")]
    for cls, text in page.cells:
        assert cls == "n" or letters[text[0]] == cls


def test_each_cell_names_its_duration_and_attempts_in_its_tooltip() -> None:
    html = render_html(sample_report())
    assert 'title="run 3, 5.0 ms, 2 attempts">F<sup>2</sup></td>' in html
    assert 'title="run 1, 3.0 ms">P</td>' in html


def test_a_flaky_verdict_is_shown_with_its_reason() -> None:
    _, page = _page(sample_report())
    matrix = page.text("matrix")
    assert "tests/test_b.py::test_flaky" in matrix
    assert "flaky" in matrix
    assert "passed on rerun" in matrix
    assert "passed on a rerun in run 2" in matrix
    # and in full under the matrix, where no tooltip or cut line hides any of it
    why = matrix[matrix.index("Why each flaky test is flaky"):]
    assert "tests/test_b.py::test_flaky passed on rerun: passed on a rerun in run 2" in why
    assert "test_a" not in why  # a failing test is not flaky


def test_a_test_skipped_in_every_run_is_not_called_stable() -> None:
    skipped = MatrixRow("tests/test_s.py::test_skipped", Classification.STABLE,
                        EvidenceRule.NOT_EXECUTED, "not executed",
                        (MatrixCell(Outcome.SKIPPED, 0.0, 1),) * 3)
    ran = MatrixRow("tests/test_s.py::test_ran", Classification.STABLE, EvidenceRule.NO_FAILURE,
                    "no failure", (MatrixCell(Outcome.PASSED, 1.0, 1),) * 3)
    data = attrs.evolve(sample_report(), matrix=(skipped, ran))
    html, _ = _page(data)
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r'<tr><th class="t" title="([^"]*)">.*?<th class="vd"[^>]*>(.*?)</th>', html)}
    assert "not executed" in rows["tests/test_s.py::test_skipped"]
    assert "stable" not in rows["tests/test_s.py::test_skipped"]
    assert "stable" in rows["tests/test_s.py::test_ran"]


def test_the_header_names_project_time_version_and_runs() -> None:
    html, _ = _page(sample_report())
    header = html[html.index("<header"):html.index("</header>")]
    assert "shop" in header
    assert "generated 2025-11-30 11:03 UTC" in header
    assert "runstore 0.1.0" in header
    assert "3 runs covered, run 1" in header
    assert "to run 3" in header


def test_signatures_slowest_and_coverage_show_their_records() -> None:
    _, page = _page(sample_report(message="assert 1 == 2"))
    signatures = page.text("signatures")
    assert "AssertionError" in signatures
    assert "tests/test_a.py:test_a" in signatures
    assert "first seen run 2" in signatures
    assert "last seen run 3" in signatures
    slowest = page.text("slowest")
    assert "tests/test_c.py::test_slow" in slowest
    assert "3.0 ms \u2013 5.0 ms" in slowest
    coverage = page.text("coverage")
    assert "src/shop/cart.py" in coverage
    assert "75.0 %" in coverage
    assert "src/shop/<b>.py" in coverage


def test_a_failing_test_section_shows_history_error_and_frames() -> None:
    nodeid = "tests/test_a.py::test_a"
    html, page = _page(sample_report(nodeid))
    section = page.text(nodeid_anchor(nodeid))
    assert "AssertionError: assert 1 == 2" in section
    assert "tests/test_a.py:12 in test_a" in section
    assert "failing 2 runs in a row, since run 2" in section
    assert "E       assert 1 == 2" in section  # the traceback text, in a <pre>
    strip = html[html.index('<div class="strip">'):]
    strip = strip[:strip.index("</div>")]
    assert re.findall(r">([A-Za-z])</i>", strip) == ["P", "F", "F"]


@pytest.mark.parametrize(
    ("section", "line"),
    [
        ("runs-chart", "No run in this report had failures."),
        ("matrix", "No tests in the reported runs."),
        ("signatures", "No failure signatures recorded."),
        ("slowest", "No timed items in the newest run."),
        ("coverage", "No run in this report measured coverage."),
        ("coverage", "No coverage measured in the reported runs."),
        ("failing", "No failing tests in the newest run."),
    ],
)
def test_an_empty_part_says_so(section: str, line: str) -> None:
    html, page = _page(empty_report())
    assert line in html
    assert section in page.ids


def test_a_report_of_no_runs_renders() -> None:
    html, page = _page(empty_report(runs=()))
    assert "No runs recorded." in html
    assert "no runs covered" in html
    assert set(SECTIONS) <= set(page.ids)


def test_what_a_cap_left_out_is_counted_on_the_page() -> None:
    data = attrs.evolve(sample_report(), failing_omitted=4, signatures_omitted=3,
                        coverage_files_omitted=2,
                        runs=(*sample_report().runs[:2],
                              attrs.evolve(sample_report().runs[2], failing_omitted=6)))
    html = render_html(data)
    assert "7 stable tests not shown (at most 200 rows)." in html
    assert "and 4 more failing items not shown (at most 100)." in html
    assert "3 older signatures not shown (at most 50)." in html
    assert "2 better-covered files not shown." in html
    assert "and 6 more failing items not shown" in html


def test_a_run_without_duration_or_coverage_breaks_the_lines() -> None:
    runs = (run_point(1, covered=50.0), run_point(2, duration_ms=None, covered=None),
            run_point(3, covered=60.0))
    html = render_html(empty_report(runs=runs))
    assert html.count('<polyline class="duration"') == 2
    assert html.count('<polyline class="covline"') == 2
    assert html.count('<circle class="covdot"') == 2


def test_a_large_report_stays_under_two_megabytes() -> None:
    html = render_html(large_report(runs=500, tests=2_000))
    size = len(html.encode("utf-8"))
    assert size < 2_000_000, size
    assert html.count('<rect class="hit"') == 500
    assert html.count('<section class="test"') == 100


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0.42, "0.42 ms"), (3.25, "3.2 ms"), (37.4, "37 ms"), (4_200, "4.20 s"),
     (12_345, "12.3 s"), (187_000, "3 min 07 s"), (7_500_000, "2 h 05 min")],
)
def test_durations_read_as_a_person_reads_them(ms: float, text: str) -> None:
    assert format_ms(ms) == text


def test_visible_writes_hidden_characters_as_escapes() -> None:
    assert visible("a\x1b[31mred\x1b[0m") == "ared"
    assert visible("a\r\nb\tc") == "a\nb\tc"
    assert visible("a\r\nb\tc", lines=False) == "a\\r\\nb\\tc"
    assert visible("\x00\x7f\x9b\u202e\udcff") == "\\x00\\x7f\\x9b\\u202e\\udcff"
    assert visible("plain ü text") == "plain ü text"


def test_every_stored_text_is_escaped_wherever_it_is_shown() -> None:
    evil = "<script>x()</script>\x1b]8;;http://e\x07\x00\u202e\"'"
    data = sample_report()
    failing = data.failing_tests[0]
    data = attrs.evolve(
        data,
        project=evil,
        runstore_version=evil,
        runs=tuple(attrs.evolve(r, git_commit=evil) for r in data.runs),
        matrix=tuple(attrs.evolve(row, because=evil) for row in data.matrix),
        signatures=tuple(attrs.evolve(g, signature=attrs.evolve(
            g.signature, signature=evil, exception_type=evil, message=evil, frame=evil))
            for g in data.signatures),
        coverage_files=tuple(attrs.evolve(f, path=evil) for f in data.coverage_files),
        failing_tests=(attrs.evolve(
            failing, exception_type=evil, because=evil, signature=evil,
            frames=tuple(attrs.evolve(fr, path=evil, function=evil) for fr in failing.frames)),),
    )
    html, page = _page(data)
    assert "<script" not in html
    for hidden in ("\x00", "\x1b", "\x07", "\u202e"):
        assert hidden not in html
    assert "http://e" not in "".join(re.findall(r"<[^>]*>", html))
    assert "<script>x()</script>" in page.text("failing")
    assert "<script>x()</script>" in page.text("signatures")
    assert "<script>x()</script>" in page.text("coverage")
    assert len(page.ids) == len(set(page.ids))


def test_a_file_coverage_bar_fills_its_track_from_inside() -> None:
    html, _ = _page(sample_report())
    rules: dict[str, str] = {}
    for name, body in re.findall(r"\.(bar-[hb])\{([^}]*)\}", html):
        rules.setdefault(name, body)  # the first rule; the dark scheme's only recolours
    # an inline-block fill in an inline-block track sat on the text's baseline, under it
    assert "display:block" in rules["bar-h"]
    assert "height:100%" in rules["bar-h"]
    assert "line-height:0" in rules["bar-b"]


def test_the_matrix_header_reads_across_over_its_columns_and_gives_the_reason_room() -> None:
    html, _ = _page(sample_report())
    head = re.search(r'<table class="(m[^"]*)">\s*<thead><tr>(.*?)</tr></thead>', html, re.S)
    assert head is not None
    assert head.group(1) == "m"  # run ids of up to 2 digits: no standing labels
    # test | cells | verdict: with the verdict before them, the spare width it takes put
    # a few runs' cells at the far right, away from their test's name
    assert re.findall(r"<th[^>]*>", head.group(2)) == [
        '<th class="t">', '<th class="r">', '<th class="r">', '<th class="r">',
        '<th class="vd">']
    body = html[html.index("<tbody>", html.index('<table class="m')):]
    row = body[body.index("<tr>"):body.index("</tr>")]
    assert re.findall(r"<t[hd] class=\"(\w+)\"", row) == ["t", "p", "f", "f", "vd"]
    assert head.group(2).count('<th class="r">') == 3  # one per column, over it
    rules = dict(re.findall(r"(table\.m th\.vd|table\.m thead th\.r)\{([^}]*)\}", html))
    assert "writing-mode" not in rules["table.m thead th.r"]
    assert "width:100%" in rules["table.m th.vd"]  # the reason takes the width left over
    late = attrs.evolve(sample_report(), matrix_run_ids=(RunId(99), RunId(100), RunId(101)))
    assert '<table class="m long">' in render_html(late)  # three digits abreast run together
    early = attrs.evolve(sample_report(), matrix_run_ids=(RunId(97), RunId(98), RunId(99)))
    assert '<table class="m">' in render_html(early)


def test_a_signature_whose_message_is_all_masked_shows_a_real_example() -> None:
    data = sample_report()
    (group,) = data.signatures
    masked = attrs.evolve(group, signature=attrs.evolve(
        group.signature, exception_type="KeyError", message="<str>"),
        example="KeyError: 'sku-9'")
    _, page = _page(attrs.evolve(data, signatures=(masked,)))
    signatures = page.text("signatures")
    assert "for example 'sku-9'" in signatures  # the type is named once, in the heading
    _, plain = _page(data)
    assert "for example" not in plain.text("signatures")


def test_a_cut_traceback_names_the_command_that_shows_it_with_the_node_id_quoted() -> None:
    nodeid = "tests/test_a.py::test_x[<b>it's a b]"
    data = sample_report(nodeid)
    (failing,) = data.failing_tests
    cut = attrs.evolve(data, failing_tests=(attrs.evolve(failing, text_truncated=True),))
    html, page = _page(cut)
    quoted = shlex.quote(nodeid)
    assert f"runstore show 3 {quoted} shows what the store holds" in page.text(
        nodeid_anchor(nodeid))
    assert f"<code>runstore show 3 {escape(quoted)}</code>" in html  # escaped as all text
    assert "NODEID" not in html
    assert shell_word("-x") == "-- -x"  # an argument, not an option


def test_a_signature_of_an_ansi_coloured_message_reads_as_its_text() -> None:
    """Masking makes a stored colour ``\\x1b[31m`` into ``\\x1b[<num>m``; the page drops the
    whole sequence (it showed ``um>m``, the rest after a cut ``\\x1b[<n``)."""
    stored = "assert \x1b[0m\x1b[94m1\x1b[39;49;00m == \x1b[94m2\x1b[39;49;00m"
    data = sample_report(message=stored)
    (group,) = data.signatures
    masked = attrs.evolve(group, signature=attrs.evolve(
        group.signature, message=normalize_message(stored)))
    html, page = _page(attrs.evolve(data, signatures=(masked,)))
    assert "assert 1 == 2" in page.text("signatures")
    assert "um>" not in html
    assert "assert 1 == 2" in page.text(nodeid_anchor("tests/test_a.py::test_a"))


def test_an_unfinished_run_has_its_bar_outlined_and_named_in_the_legend() -> None:
    # an interrupted run holds only the items recorded before it stopped: without a mark its
    # short green bar read as a clean, whole run
    finished = attrs.evolve(sample_report(), runs=(run_point(1), run_point(2)))
    html = render_html(finished)
    assert 'class="unfinished"' not in html
    assert "interrupted, aborted or still running" not in html
    runs = (run_point(1), run_point(2, status=RunStatus.INTERRUPTED, passed=3),
            run_point(3, status=RunStatus.RUNNING, passed=1, duration_ms=None), run_point(4))
    html = render_html(attrs.evolve(sample_report(), runs=runs))
    chart = html[html.index('id="runs-chart"'):html.index("</svg>", html.index('id="runs-chart"'))]
    outlines = re.findall(r'<rect class="unfinished" x="([\d.]+)"', chart)
    assert len(outlines) == 2
    bars = re.findall(r'<rect class="hit" x="([\d.]+)"', chart)
    assert outlines == [bars[1], bars[2]]  # over the interrupted and the running run's bars
    assert "interrupted, aborted or still running" in html
