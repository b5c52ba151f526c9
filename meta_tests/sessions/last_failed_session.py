"""Run by meta_tests/test_sessions.py twice: the second time with ``--lf``, which must rerun
only the test that failed (pytest's cache provider is on, its cache under ``.cache/``)."""


def test_passes():
    assert True


def test_fails_first_time(tmp_path_factory):
    import os

    assert os.environ.get("CONFORMANCE_META_SECOND_RUN") == "1", "fails until the second run"
