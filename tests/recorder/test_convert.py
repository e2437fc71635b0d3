"""From pytest's report objects to runstore's records, on real in-process pytest runs."""

from __future__ import annotations

import os
import textwrap
from typing import Any

import pytest

from runstore.recorder import (
    Annotator,
    ItemAssembler,
    PathResolver,
    collection_record,
    describe_exception,
    split_nodeid,
)
from runstore.services.test_runs import (
    CollectionError,
    Outcome,
    Phase,
    PhaseResult,
    TestResult,
)

pytest_plugins = ["pytester"]


class _Reports:
    """Collects every test and collect report of an in-process run."""

    def __init__(self) -> None:
        self.tests: list[pytest.TestReport] = []
        self.collected: list[pytest.CollectReport] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.tests.append(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.collected.append(report)


@pytest.fixture
def record(pytester: pytest.Pytester) -> Any:
    """Run pytest in-process on ``source`` and assemble what a recorder would store."""

    def run(
        source: str, *args: str, name: str = "test_sample"
    ) -> tuple[dict[str, TestResult], list[CollectionError | TestResult]]:
        pytester.makepyfile(**{name: textwrap.dedent(source)})
        resolver = PathResolver(str(pytester.path), str(pytester.path))
        assembler = ItemAssembler(resolver)
        reports = _Reports()
        # As in a recording process: markers reach the assembler through the sink.
        pytester.inline_run(*args, plugins=[Annotator(assembler.note_markers), reports])
        results: dict[str, TestResult] = {}
        for report in reports.tests:
            finished = assembler.add(report)
            if finished is not None:
                assert finished.nodeid not in results
                results[finished.nodeid] = finished
        assert assembler.unfinished == 0
        collected = [
            r for r in (collection_record(resolver, c) for c in reports.collected) if r is not None
        ]
        return results, collected

    return run


OUTCOMES = """
    import pytest

    def test_passes():
        pass

    def test_fails():
        assert [1, 2, 3] == [1, 2, 4]

    def test_skipped():
        pytest.skip("not here")

    @pytest.mark.skip(reason="marker skip")
    def test_skip_marker():
        pass

    @pytest.mark.xfail(reason="known bug")
    def test_xfail():
        assert False

    @pytest.mark.xfail(reason="fixed already")
    def test_xpass():
        pass

    @pytest.mark.xfail(strict=True, reason="strict")
    def test_xpass_strict():
        pass

    @pytest.mark.xfail(run=False, reason="not run")
    def test_xfail_not_run():
        pass

    @pytest.fixture
    def broken_setup():
        raise RuntimeError("setup exploded")

    def test_setup_error(broken_setup):
        pass

    @pytest.fixture
    def broken_teardown():
        yield
        raise RuntimeError("teardown exploded")

    def test_teardown_error(broken_teardown):
        pass

    def test_fails_and_teardown_error(broken_teardown):
        assert 0, "call failed too"

    @pytest.mark.parametrize("n", [1, 2])
    def test_param(n):
        assert n == 1
"""


def test_every_outcome_follows_pytest(record: Any) -> None:
    results, _ = record(OUTCOMES)
    outcomes = {nodeid.split("::")[1]: r.outcome for nodeid, r in results.items()}
    assert outcomes == {
        "test_passes": Outcome.PASSED,
        "test_fails": Outcome.FAILED,
        "test_skipped": Outcome.SKIPPED,
        "test_skip_marker": Outcome.SKIPPED,
        "test_xfail": Outcome.XFAILED,
        "test_xpass": Outcome.XPASSED,
        "test_xpass_strict": Outcome.FAILED,
        "test_xfail_not_run": Outcome.XFAILED,
        "test_setup_error": Outcome.ERROR,
        "test_teardown_error": Outcome.ERROR,
        "test_fails_and_teardown_error": Outcome.FAILED,
        "test_param[1]": Outcome.PASSED,
        "test_param[2]": Outcome.FAILED,
    }


def test_phases_reasons_and_errors(record: Any) -> None:
    results, _ = record(OUTCOMES)
    by_name = {nodeid.split("::")[1]: r for nodeid, r in results.items()}

    skipped = by_name["test_skipped"]
    assert [(p.phase, p.outcome) for p in skipped.phases] == [
        (Phase.SETUP, Outcome.PASSED),
        (Phase.CALL, Outcome.SKIPPED),
        (Phase.TEARDOWN, Outcome.PASSED),
    ]
    assert skipped.phases[1].skip_reason == "not here"
    marker_setup = by_name["test_skip_marker"].phases[0]
    assert marker_setup == PhaseResult(
        Phase.SETUP, Outcome.SKIPPED, marker_setup.duration_ms, "marker skip"
    )
    assert by_name["test_xfail"].phases[1].skip_reason == "known bug"
    assert by_name["test_xfail"].errors == ()  # an expected failure is no error
    assert by_name["test_xpass"].phases[1].skip_reason == "fixed already"

    strict = by_name["test_xpass_strict"].errors
    assert len(strict) == 1
    assert strict[0].phase is Phase.CALL
    assert strict[0].message == "[XPASS(strict)] strict"

    setup_error = by_name["test_setup_error"]
    assert [e.phase for e in setup_error.errors] == [Phase.SETUP]
    assert setup_error.errors[0].exception_type == "RuntimeError"
    assert setup_error.errors[0].message == "RuntimeError: setup exploded"
    assert "setup exploded" in setup_error.errors[0].text
    assert setup_error.errors[0].frames[-1].function == "broken_setup"

    teardown = by_name["test_teardown_error"]
    assert [(p.phase, p.outcome) for p in teardown.phases][1:] == [
        (Phase.CALL, Outcome.PASSED), (Phase.TEARDOWN, Outcome.FAILED)
    ]
    assert [e.phase for e in teardown.errors] == [Phase.TEARDOWN]
    both = by_name["test_fails_and_teardown_error"]
    assert [e.phase for e in both.errors] == [Phase.CALL, Phase.TEARDOWN]
    assert both.errors[0].message == "AssertionError: call failed too\nassert 0"

    fails = by_name["test_fails"].errors[0]
    assert fails.exception_type == "AssertionError"
    assert fails.message.startswith("assert [1, 2, 3] == [1, 2, 4]")

    param = by_name["test_param[2]"]
    assert (param.name, param.parametrize_id) == ("test_param", "2")
    assert param.module_path == "test_sample.py"
    assert param.line == 50
    assert param.markers == ("parametrize",)
    assert all(p.duration_ms >= 0 for r in results.values() for p in r.phases)


def test_cause_chain_types_and_frames(record: Any, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        helper="""
        class AppError(Exception):
            pass

        def lookup(table, key):
            return table[key]
        """
    )
    results, _ = record(
        """
        import helper

        def test_chained():
            try:
                helper.lookup({}, "missing")
            except KeyError as exc:
                raise helper.AppError("wrapped failure") from exc

        def test_context():
            try:
                1 / 0
            except ZeroDivisionError:
                raise ValueError("during handling")
        """
    )
    chained = results["test_sample.py::test_chained"].errors[0]
    assert chained.exception_type == "helper.AppError"
    assert chained.message == "helper.AppError: wrapped failure"
    assert chained.text.count("wrapped failure") >= 1
    assert [(f.path, f.function, f.is_project) for f in chained.frames] == [
        ("test_sample.py", "test_chained", True)
    ]
    cause = chained.cause
    assert cause is not None
    assert cause.cause is None
    assert cause.exception_type == "KeyError"
    assert cause.message == "KeyError: 'missing'"
    assert [(f.path, f.line, f.function) for f in cause.frames] == [
        ("test_sample.py", 5, "test_chained"),
        ("helper.py", 5, "lookup"),
    ]
    context = results["test_sample.py::test_context"].errors[0]
    assert context.cause is not None
    assert context.cause.exception_type == "ZeroDivisionError"


def test_untrusted_values_are_coerced(record: Any) -> None:
    results, _ = record(
        """
        class Unprintable(Exception):
            def __str__(self):
                raise RuntimeError("cannot render")

        def test_unprintable():
            raise Unprintable()

        def test_surrogates_and_nul():
            raise AssertionError("bad text: \\udcff and \\x00 nul")

        def test_huge():
            raise AssertionError("big:" + "y" * 200_000)
        """
    )
    unprintable = results["test_sample.py::test_unprintable"].errors[0]
    assert unprintable.exception_type == "test_sample.Unprintable"
    assert "<exception str() failed>" in unprintable.message
    bad = results["test_sample.py::test_surrogates_and_nul"].errors[0].message
    assert bad == "AssertionError: bad text: \\udcff and \x00 nul"
    bad.encode("utf-8")  # storable
    huge = results["test_sample.py::test_huge"].errors[0]
    assert len(huge.message) == len("AssertionError: big:") + 200_000  # the store bounds it


def test_captured_output_is_kept_for_failures_only(record: Any) -> None:
    results, _ = record(
        """
        import logging
        import sys

        def test_loud_failure():
            print("to stdout")
            print("to stderr", file=sys.stderr)
            logging.getLogger("x").warning("logged")
            assert False

        def test_loud_pass():
            print("quiet please")
        """
    )
    failure = results["test_sample.py::test_loud_failure"]
    assert "to stdout" in failure.stdout
    assert "to stderr" in failure.stderr
    assert "logged" in failure.log
    passing = results["test_sample.py::test_loud_pass"]
    assert (passing.stdout, passing.stderr, passing.log) == ("", "", "")


def test_rerun_attempts_belong_to_one_item(record: Any, pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_rerunfailures")
    counter = pytester.path / "count.txt"
    results, _ = record(
        f"""
        import pathlib

        COUNT = pathlib.Path({str(counter)!r})

        def test_flips():
            n = int(COUNT.read_text()) if COUNT.exists() else 0
            COUNT.write_text(str(n + 1))
            assert n >= 1, "first attempt fails"

        def test_always_fails():
            assert False
        """,
        "--reruns", "2",
    )
    flips = results["test_sample.py::test_flips"]
    assert flips.outcome is Outcome.PASSED
    assert len(flips.attempts) == 1
    assert flips.attempts[0].outcome is Outcome.FAILED
    assert flips.attempts[0].errors[0].message.startswith("AssertionError: first attempt fails")
    assert flips.attempts[0].attempts == ()
    always = results["test_sample.py::test_always_fails"]
    assert always.outcome is Outcome.FAILED
    assert [a.outcome for a in always.attempts] == [Outcome.FAILED, Outcome.FAILED]


def test_subtests_are_kept_with_their_item(record: Any) -> None:
    if not hasattr(pytest, "Subtests"):
        pytest.skip("subtests are built into pytest 9")
    results, _ = record(
        """
        def test_with_subtests(subtests):
            for i in range(3):
                with subtests.test("check", i=i):
                    assert i != 1
        """
    )
    item = results["test_sample.py::test_with_subtests"]
    assert item.outcome is Outcome.FAILED
    assert [(s.description, s.outcome) for s in item.subtests] == [
        ("[check] (i=0)", Outcome.PASSED),
        ("[check] (i=1)", Outcome.FAILED),
        ("[check] (i=2)", Outcome.PASSED),
    ]
    failed = item.subtests[1].error
    assert failed is not None
    assert failed.message == "assert 1 != 1"


def test_unittest_and_doctest_items(record: Any) -> None:
    results, _ = record(
        '''
        import unittest

        def double(x):
            """
            >>> double(2)
            5
            """
            return 2 * x

        class Case(unittest.TestCase):
            def test_ok(self):
                self.assertEqual(1, 1)

            def test_bad(self):
                self.assertEqual(1, 2)

            @unittest.skip("not today")
            def test_skip(self):
                pass

            @unittest.expectedFailure
            def test_expected(self):
                self.assertEqual(1, 2)
        ''',
        "--doctest-modules",
    )
    outcomes = {nodeid: r.outcome for nodeid, r in results.items()}
    assert outcomes == {
        "test_sample.py::Case::test_ok": Outcome.PASSED,
        "test_sample.py::Case::test_bad": Outcome.FAILED,
        "test_sample.py::Case::test_skip": Outcome.SKIPPED,
        "test_sample.py::Case::test_expected": Outcome.XFAILED,
        "test_sample.py::test_sample.double": Outcome.FAILED,
    }
    skip = results["test_sample.py::Case::test_skip"]
    assert [p.skip_reason for p in skip.phases if p.outcome is Outcome.SKIPPED] == ["not today"]
    assert results["test_sample.py::Case::test_bad"].name == "Case::test_bad"
    doctest = results["test_sample.py::test_sample.double"].errors[0]
    assert doctest.exception_type == "doctest.DocTestFailure"
    assert "Expected:" in doctest.message
    assert doctest.frames
    assert doctest.frames[0].path == "test_sample.py"


def test_collection_error_and_module_skip(record: Any, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_skipped_module="""
        import pytest
        pytest.skip("whole module", allow_module_level=True)
        """
    )
    _, collected = record(
        "import module_that_does_not_exist\n", "--continue-on-collection-errors"
    )
    errors = [c for c in collected if isinstance(c, CollectionError)]
    assert len(errors) == 1
    error = errors[0]
    assert (error.nodeid, error.module_path) == ("test_sample.py", "test_sample.py")
    assert error.error.phase is Phase.COLLECT
    assert error.error.exception_type == "ModuleNotFoundError"
    assert error.error.message == (
        "ModuleNotFoundError: No module named 'module_that_does_not_exist'"
    )
    assert "ImportError while importing test module" in error.error.text
    assert any(f.path == "test_sample.py" and f.is_project for f in error.error.frames)
    skips = [c for c in collected if isinstance(c, TestResult)]
    assert [(s.nodeid, s.outcome, s.phases[0].skip_reason) for s in skips] == [
        ("test_skipped_module.py", Outcome.SKIPPED, "whole module")
    ]


def test_a_collection_error_message_is_the_error_line(record: Any) -> None:
    # A SyntaxError prints its location first (File "...", line 1 / the source / a caret):
    # the message is the error line, as the end of a traceback shows it.
    _, collected = record("def test_broken(:\n    pass\n")
    (error,) = [c for c in collected if isinstance(c, CollectionError)]
    assert error.error.exception_type == "SyntaxError"
    assert error.error.message == "SyntaxError: invalid syntax"
    assert "def test_broken(:" in error.error.text
    _, collected = record("def test_x():\n  pass\n   pass\n", name="test_indent")
    (error,) = [c for c in collected if c.nodeid == "test_indent.py"]
    assert isinstance(error, CollectionError)
    assert error.error.message == "IndentationError: unexpected indent"


def test_a_crashed_worker_report_finishes_its_item() -> None:
    resolver = PathResolver("/proj", "/proj")
    assembler = ItemAssembler(resolver)
    setup = pytest.TestReport(
        "t.py::test_a", ("t.py", 0, "test_a"), {}, "passed", None, "setup"
    )
    crash = pytest.TestReport(
        "t.py::test_a", ("t.py", 0, "test_a"), {}, "failed",
        "worker 'gw0' crashed while running 't.py::test_a'",
        "???",  # type: ignore[arg-type]  # what pytest-xdist reports for a crashed worker
    )
    assert assembler.add(setup) is None
    result = assembler.add(crash)
    assert result is not None
    assert result.outcome is Outcome.FAILED
    assert result.errors[0].message == "worker 'gw0' crashed while running 't.py::test_a'"
    assert assembler.unfinished == 0


@pytest.mark.parametrize(
    ("nodeid", "expected"),
    [
        ("t.py::test_a", ("test_a", None)),
        ("t.py::TestX::test_y[a::b]", ("TestX::test_y", "a::b")),
        ("t.py::test_odd_ids[[x]]", ("test_odd_ids", "[x]")),
        ("t.py::test_odd_ids[]", ("test_odd_ids", "")),
        ("pkg/mod.py::pkg.mod.func", ("pkg.mod.func", None)),
        ("t.py", ("t.py", None)),
    ],
)
def test_split_nodeid(nodeid: str, expected: tuple[str, str | None]) -> None:
    assert split_nodeid(nodeid) == expected


def test_paths_are_placed_against_the_rootdir() -> None:
    root = os.path.join(os.sep, "work", "proj")
    resolver = PathResolver(root, os.path.join(root, "sub"))
    assert resolver.place("test_a.py") == ("sub/test_a.py", True)
    assert resolver.place(os.path.join(root, "src", "m.py")) == ("src/m.py", True)
    venv = os.path.join(root, ".venv", "lib", "site-packages", "dep.py")
    assert resolver.place(venv) == (".venv/lib/site-packages/dep.py", False)
    assert resolver.place("/usr/lib/python3/json/__init__.py") == (
        "/usr/lib/python3/json/__init__.py", False
    )
    frozen = "<frozen importlib._bootstrap>"
    assert resolver.place(frozen) == (frozen, False)


def test_describe_exception_survives_hostile_exceptions() -> None:
    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    try:
        try:
            raise KeyError("inner")
        except KeyError as exc:
            raise Hostile() from exc
    except Hostile as outer:
        chain = describe_exception(outer)
    assert [c["type"] for c in chain] == ["KeyError", f"{__name__}.{Hostile.__qualname__}"]
    assert "<exception str() failed>" in chain[1]["message"]
    assert chain[1]["frames"][-1][2] == "test_describe_exception_survives_hostile_exceptions"


def test_identifiers_never_carry_nul_to_the_store() -> None:
    from runstore.recorder._text import clean_identifier

    assert clean_identifier("t.py::x[a\x00b]") == "t.py::x[a\\x00b]"
    assert clean_identifier("t.py::x[\udcff]") == "t.py::x[\\udcff]"
    assert clean_identifier("plain") == "plain"
