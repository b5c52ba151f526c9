"""The commit bisection's search on a synthetic history (no builds): first bad commits, skips
as ``git bisect skip`` does them, the cost, and the range's usage errors."""

from __future__ import annotations

import pytest

from upgrades import bisect_commits
from upgrades.bisect_commits import Commit, RangeError, Tried

pytestmark = pytest.mark.meta


def _history(n: int) -> list[Commit]:
    return [Commit(f"{i:09x}" + "0" * 31, f"2026-08-{i + 1:02d}T00:00:00+00:00", f"change {i}") for i in range(n)]


def _tester(commits, flips: dict[str, int], broken: set[int]):
    calls = []
    cache = {}

    def test(i):
        if i in cache:
            return cache[i]
        calls.append(i)
        if i in broken:
            cache[i] = Tried(commits[i], "build failed", "boom")
        else:
            cache[i] = Tried(commits[i], "tested",
                             outcomes={n: ("failed" if i >= at else "passed") for n, at in flips.items()})
        return cache[i]

    return test, calls


def test_two_flips_in_one_range_are_both_found():
    commits = _history(33)
    test, calls = _tester(commits, {"a": 11, "b": 25}, broken=set())
    result = bisect_commits.bisect(commits, test, ["a", "b"], {"a": "passed", "b": "passed"}, say=lambda *_: None)
    assert [(f.commit.subject, f.contracts) for f in result] == [("change 11", ("a",)), ("change 25", ("b",))]
    assert len(calls) <= 12  # two binary searches over 32 commits: about 2 x 5 builds


def test_a_commit_that_does_not_build_is_skipped_and_said():
    """As ``git bisect skip``: the search goes on around the commit that does not build; where
    it sits right before the first bad one found, the page says it could be the one."""
    commits = _history(17)
    test, calls = _tester(commits, {"a": 9}, broken={8})
    flip = bisect_commits.bisect(commits, test, ["a"], {"a": "passed"}, say=lambda *_: None)[0]
    assert flip.commit.subject == "change 9" and flip.could_be_any_of_skipped == (commits[8].short,)
    assert 8 in calls
    test, _ = _tester(commits, {"a": 12}, broken={8})
    flip = bisect_commits.bisect(commits, test, ["a"], {"a": "passed"}, say=lambda *_: None)[0]
    assert flip.commit.subject == "change 12" and flip.could_be_any_of_skipped == ()


def test_only_skipped_commits_left_are_named():
    commits = _history(9)
    test, _ = _tester(commits, {"a": 5}, broken={4, 5})
    flip = bisect_commits.bisect(commits, test, ["a"], {"a": "passed"}, say=lambda *_: None)[0]
    assert flip.commit.subject == "change 6"
    assert flip.could_be_any_of_skipped == (commits[4].short, commits[5].short)


@pytest.mark.parametrize("text", ["abc", "..abc", "abc..", "a..b..c"])
def test_a_bad_range_is_a_usage_error(text):
    with pytest.raises(RangeError, match="is not a range GOOD..BAD"):
        bisect_commits.parse_range(text)
