"""The assets' corpus (``fixtures.data.assets.corpus_documents``: stdlib docstrings) does not
depend on what the building process imported before: a package that adds a method of its own
to a stdlib class (transformers adds ``logging.Logger.warning_advice``) used to add its
docstring, so a session that built its assets after ``import transformers`` trained another
tokenizer and its runs read other batches (849 documents or 850)."""

from __future__ import annotations

import logging

import pytest

from fixtures.data import assets

pytestmark = pytest.mark.meta


def test_a_method_a_package_adds_to_a_stdlib_class_is_not_in_the_corpus(monkeypatch):
    before = assets.corpus_documents()

    def added_by_a_package(self):
        pass

    added_by_a_package.__module__ = "some_package.logging_patch"
    added_by_a_package.__doc__ = "A method some installed package adds to logging.Logger at import, " * 3
    monkeypatch.setattr(logging.Logger, "added_by_a_package", added_by_a_package, raising=False)
    assert assets.corpus_documents() == before
