"""benchmarks/hostile_round.py: its verdicts are what its docstring says, its cases have distinct names and
run, and a few of them, end to end, hold on this tree."""

from __future__ import annotations

from benchmarks import hostile_round as hr


def _case(**kw):
    return hr.Case("c", "raw", "what", argv=["x"], **kw)


def test_the_verdicts():
    judge = hr.judge
    assert judge(_case(secrets=("s3cret",)), 2, "error: s3cret", "", False, 1000) == ("secret", "printed s3cr…")
    assert judge(_case(), 2, "", "", True, 1000)[0] == "crash"
    assert judge(_case(), -9, "", "", False, 1000)[0] == "crash"
    assert judge(_case(), 2, "", "", False, 3 << 20) == ("crash", "peak RSS 3072 MiB")
    assert judge(_case(), 1, "Traceback (most recent call last):", "", False, 1000)[0] == "raw"
    assert judge(_case(env={"WHEST_DEBUG": "1"}, rc=(1,)), 1, "Traceback (most recent call last):", "", False, 1000) \
        == ("held", "")
    assert judge(_case(), 2, "", "error: a\nerror: b\n", False, 1000) == ("raw", "2 error lines")
    assert judge(_case(), 0, "", "", False, 1000) == ("silent", "exit 0")
    assert judge(_case(documented="docs say so"), 0, "", "", False, 1000) == ("silent-doc", "docs say so")
    assert judge(_case(), 1, "", "", False, 1000)[0] == "misleading"
    assert judge(_case(want="names the fix"), 2, "error: other words", "", False, 1000)[0] == "misleading"
    assert judge(_case(want="names the fix"), 2, "error: names the fix", "", False, 1000) == ("held", "")
    api = hr.Case("c", "raw", "what", code="x")
    assert judge(api, 3, "EXC builtins.TypeError: boom", "", False, 1000)[0] == "raw"


def test_the_cases_are_many_and_distinctly_named():
    cases = hr.cases()
    assert len(cases) >= 150 and len({c.name for c in cases}) == len(cases)
    assert {c.group for c in cases} == {"secret", "bomb", "raw", "forgery"}
    assert all((c.argv is None) != (c.code is None) for c in cases)


def test_a_few_cases_hold_end_to_end(tmp_path):
    root, work = tmp_path / "fixtures", tmp_path / "cases"
    root.mkdir()
    hr.build_fixtures(root)
    chosen = [c for c in hr.cases() if c.name in ("token-file-dev-zero", "card-alias-bomb", "status-world-1e9",
                                                   "endpoint-no scheme-pull", "api-card-js", "empty-status-''",
                                                   "forge-trail-value-edited", "spot-budget-per-seg")]
    assert len(chosen) == 8
    results = [hr.run_case(c, root, work, hr.REPO / "src") for c in chosen]
    assert [(r["name"], r["verdict"]) for r in results] == [(c.name, "held") for c in chosen], results
