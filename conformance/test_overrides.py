"""Override contracts: what a ``fqns`` selector selects, conflicts, warnings, imports.

The system under test is torchtitan's own ``torchtitan/config/override.py`` (``override``,
``derive``, ``apply_overrides``, ``OverrideConfig``). Facts: CONTRACTS.md "Overrides" (the
write-up's ``fqns=["layers.1[0-9].attention.rope"]`` limits an override to layers 10 to 19;
two overrides claiming one node is an error; a selector matching nothing warns) and "What
upstream torchtitan 0.3.0 actually does" (globs use fnmatch, ``*`` crosses dots, matched
against the full path from the ``Trainer.Config`` root; ``--override.imports`` entries are
``module.function``).

Expected sets come from ``glob_oracle`` below, written from the documented rules, never
from calling fnmatch or the code under test.
"""

from __future__ import annotations

import itertools
import logging
import re
import sys
import types
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.rank import run_files
from fixtures.contract import expect, expect_equal, require_trained
from fixtures.runs.catalogue import LAYER_OVERRIDE, LAYER_OVERRIDE_KWARGS, layers_10_to_19
from fixtures.rank.titan import by_feature
from fixtures.rank.titan.api import detect
from fixtures.rank.titan.selectors import WRITEUP_SELECTOR

pytestmark = pytest.mark.overrides


# ----------------------------------------------------------------------------- the oracle


def glob_oracle(pattern: str, name: str) -> bool:
    """fnmatch's documented rules, by hand: ``*`` any run of characters (dots included),
    ``?`` one character, ``[seq]`` one character in seq (``a-b`` ranges), ``[!seq]`` one not
    in seq; anything else matches itself; the whole name must match."""
    regex, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            regex += ".*"
        elif c == "?":
            regex += "."
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("!", "]") else i + 1)
            if j < 0:
                regex += re.escape(c)
            else:
                body = pattern[i + 1:j]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                parts, k = [], 0
                while k < len(body):
                    if k + 2 < len(body) and body[k + 1] == "-":
                        parts.append(re.escape(body[k]) + "-" + re.escape(body[k + 2]))
                        k += 3
                    else:
                        parts.append(re.escape(body[k]))
                        k += 1
                regex += "[" + ("^" if negate else "") + "".join(parts) + "]"
                i = j
        else:
            regex += re.escape(c)
        i += 1
    return re.fullmatch(regex, name, flags=re.S) is not None


def writeup_layers(n_layers: int) -> list[int]:
    """What the write-up says ``layers.1[0-9].attention.rope`` selects: layers 10 to 19."""
    return [i for i in range(10, 20) if i < n_layers]


# ----------------------------------------------------------------------------- helpers

_counter = itertools.count()


@dataclass(frozen=True)
class Registered:
    entry: str  # what --override.imports lists to activate it
    name: str  # what torchtitan calls it in its log lines and errors


def register(fqns, target=None, factory=None, exact: bool = False) -> Registered:
    """Register an override in a fresh module, with the installed override API
    (``fixtures.rank.titan.api``): named ``<module>.ov`` on both APIs."""
    from torchtitan.config import derive
    from torchtitan.models.common.rope import CosSinRoPE

    from fixtures.rank.titan.rope_override import KernelRoPE  # torchtitan: see conformance/conftest.py

    module_name = f"conformance_dynamic_overrides_{next(_counter)}"
    module = types.ModuleType(module_name)

    def replace(cfg):
        return derive(cfg, KernelRoPE.Config)

    fn = factory or replace
    fn.__module__, fn.__name__, fn.__qualname__ = module_name, "ov", "ov"
    api = detect()
    name = api.logged_name(module_name, "ov", f"{module_name}.ov")
    api.register(name, target=target or CosSinRoPE.Config, fqns=fqns, exact=exact)(fn)
    module.ov = fn
    sys.modules[module_name] = module
    return Registered(entry=api.entry(module_name, "ov"), name=name)


def trainer_config(n_layers: int):
    from fixtures.rank.titan.tiny_qwen3 import tiny_trainer_config  # torchtitan: see conformance/conftest.py

    return tiny_trainer_config(n_layers=n_layers)


def apply(imports, root) -> list[str]:
    from torchtitan.config.override import OverrideConfig, apply_overrides

    return apply_overrides(OverrideConfig(imports=list(imports)), root)


def replaced_layers(model_config) -> list[int]:
    from fixtures.rank.titan.rope_override import KernelRoPE  # torchtitan: see conformance/conftest.py

    return [i for i, layer in enumerate(model_config.layers)
            if isinstance(layer.attention.rope, KernelRoPE.Config)]


def only_ropes_replaced(lines: list[str]) -> bool:
    return all(line.split(": ", 1)[1].split(" ", 1)[0].endswith(".attention.rope") for line in lines)


# ----------------------------------------------------------------------------- matching


@given(n_layers=st.integers(1, 128))
def test_writeup_selector_on_module_fqns(n_layers):
    """At the model level (bare module FQNs, as the ``override()`` docstring shows), the
    write-up's ``layers.1[0-9].attention.rope`` selects exactly layers 10 to 19 that exist:
    none when L <= 10, fewer when L < 20, never 1 or 100-119, and only their RoPE."""
    model = trainer_config(n_layers).model_spec.model
    lines = apply([register([WRITEUP_SELECTOR]).entry], model)
    expect_equal(f"{WRITEUP_SELECTOR} on a {n_layers}-layer model selects layers 10..19", writeup_layers(n_layers),
                 replaced_layers(model), detail="\n".join(lines))
    expect(only_ropes_replaced(lines), "only attention.rope nodes are replaced", "attention.rope", lines)


@given(n_layers=st.integers(1, 128))
def test_writeup_selector_under_trainer(n_layers):
    """Under the trainer (``apply_overrides`` on the ``Trainer.Config``, as ``Trainer``
    does), the write-up's selector must select layers 10 to 19. Upstream 0.3.0 matches from
    the ``Trainer.Config`` root, so the bare selector matches nothing and only warns: a
    known deviation, listed in the stack's expectations file."""
    config = trainer_config(n_layers)
    lines = apply([register([WRITEUP_SELECTOR]).entry], config)
    expect_equal(f"{WRITEUP_SELECTOR} under the trainer selects layers 10..19 of {n_layers}", writeup_layers(n_layers),
                 replaced_layers(config.model_spec.model),
                 detail="\n".join(lines) or "no replacement lines")


@pytest.mark.parametrize("selector", ["model_spec.model.layers.1[0-9].attention.rope",
                                      "*layers.1[0-9].attention.rope"])
@given(n_layers=st.integers(1, 128))
def test_rooted_selectors_under_trainer(selector, n_layers):
    """The spellings that do select layers 10 to 19 under the trainer: rooted at
    ``model_spec.model``, or with a leading ``*``."""
    config = trainer_config(n_layers)
    lines = apply([register([selector]).entry], config)
    expect_equal(f"{selector} under the trainer selects layers 10..19 of {n_layers}", writeup_layers(n_layers),
                 replaced_layers(config.model_spec.model), detail="\n".join(lines))
    expect(only_ropes_replaced(lines), "only attention.rope nodes are replaced", "attention.rope", lines)


def test_leading_star_crosses_dots():
    """fnmatch's ``*`` crosses dots. ``*layers.1[0-9].attention.rope`` still cannot reach
    layers 1 or 100-127 (the digit class takes exactly one character), but ``*layers.1*``
    reaches 1, 10-19 and 100-127, and ``*1[0-9].attention.rope`` also reaches 110-119: a
    leading or trailing ``*`` is not a path-segment wildcard."""
    for selector, expected in (
        ("*layers.1[0-9].attention.rope", list(range(10, 20))),
        ("*layers.1*", [1, *range(10, 20), *range(100, 128)]),
        ("*1[0-9].attention.rope", [*range(10, 20), *range(110, 120)]),
    ):
        config = trainer_config(128)
        lines = apply([register([selector]).entry], config)
        expect_equal(f"{selector} on 128 layers selects {expected[:3]}...{expected[-2:]}", expected,
                     replaced_layers(config.model_spec.model))
        expect(only_ropes_replaced(lines), f"{selector} replaces only RoPE nodes (the target class)",
               "attention.rope", lines)


_PARTS = st.sampled_from(["layers", "model_spec", "model", "attention", "rope", "1", "0", "12",
                          "*", "?", "[0-9]", "[1-3]", "[!0]", "1[0-9]", "[0-9]*", "l*s", "a?tention"])


@st.composite
def selectors(draw):
    parts = draw(st.lists(_PARTS, min_size=1, max_size=7))
    seps = draw(st.lists(st.sampled_from([".", ".", ".", ""]), min_size=len(parts) - 1,
                         max_size=len(parts) - 1))
    text = parts[0] + "".join(s + p for s, p in zip(seps, parts[1:]))
    return draw(st.sampled_from(["", "*", "*."])) + text


@settings(max_examples=500)
@given(selector=selectors(), n_layers=st.integers(1, 128))
def test_selector_matches_oracle(selector, n_layers):
    """For any selector built from literal parts, ``*``, ``?`` and ``[a-b]`` classes, the
    nodes ``apply_overrides`` replaces under the trainer are exactly those the oracle
    (fnmatch's documented rules, written by hand) accepts among the model's RoPE FQNs."""
    from torchtitan.models.common.rope import RoPE

    config = trainer_config(n_layers)
    fqns = [fqn for fqn, *_ in config.traverse(RoPE.Config)]
    expected = [int(f.split(".layers.", 1)[1].split(".", 1)[0]) for f in fqns if glob_oracle(selector, f)]
    apply([register([selector]).entry], config)
    expect_equal(f"selector {selector!r} on {n_layers} layers replaces what the oracle selects", expected,
                 replaced_layers(config.model_spec.model))


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "subclasses_too"])
@given(selector=selectors(), n_layers=st.integers(1, 24), subclassed=st.sets(st.integers(0, 23)))
def test_exact_override_claims_only_its_exact_target(exact, selector, n_layers, subclassed):
    """A real model tree with a subclass of the target in it: the tiny trainer config with the
    RoPE of some layers already the write-up's ``KernelRoPE.Config`` (a subclass of
    ``CosSinRoPE.Config``, as the kernel override leaves them). An override of
    ``CosSinRoPE.Config`` registered with ``exact=True`` replaces only the matching nodes whose
    type is exactly ``CosSinRoPE.Config`` and leaves the subclass nodes alone; with
    ``exact=False`` it replaces both ("``exact`` restricts the match to exactly
    ``target_cls``", torchtitan/config/override.py). Expected: the selector oracle over the
    RoPE FQNs, filtered by each node's type as the tree was built."""
    from torchtitan.config import derive
    from torchtitan.models.common.rope import CosSinRoPE, RoPE

    from fixtures.rank.titan.rope_override import KernelRoPE  # torchtitan: see conformance/conftest.py

    class MarkedRoPE(CosSinRoPE):
        """What the override under test puts in: a class no node had before."""

        @dataclass(kw_only=True, slots=True)
        class Config(CosSinRoPE.Config):
            pass

    config = trainer_config(n_layers)
    layers = config.model_spec.model.layers
    for i in sorted(subclassed):
        if i < n_layers:
            layers[i].attention.rope = derive(layers[i].attention.rope, KernelRoPE.Config)
    before = {fqn: type(cfg) for fqn, cfg, *_ in config.traverse(RoPE.Config)}
    given = sorted(i for i in subclassed if i < n_layers)
    expect_equal("the tree holds the subclass nodes it was given", len(given),
                 sum(t is KernelRoPE.Config for t in before.values()), detail=str(before))
    claimed = sorted(int(f.split(".layers.", 1)[1].split(".", 1)[0]) for f, t in before.items()
                     if glob_oracle(selector, f) and (t is CosSinRoPE.Config or (not exact and issubclass(t, CosSinRoPE.Config))))
    registered = register([selector], factory=lambda cfg: derive(cfg, MarkedRoPE.Config), exact=exact)
    apply([registered.entry], config)
    replaced = [i for i, layer in enumerate(config.model_spec.model.layers)
                if isinstance(layer.attention.rope, MarkedRoPE.Config)]
    untouched = [i for i, layer in enumerate(config.model_spec.model.layers)
                 if i in subclassed and i not in replaced and type(layer.attention.rope) is KernelRoPE.Config]
    expect_equal(f"exact={exact}: {selector!r} on {n_layers} layers (KernelRoPE at {given}) "
                 "replaces what the oracle selects among the nodes of the right type", claimed, replaced)
    if exact:
        expect_equal("exact=True leaves every subclass node as it was", given, untouched)


# ----------------------------------------------------------------------------- conflicts, warnings


def test_two_overrides_on_one_node_raise():
    """Two overrides claiming the same node: ``ValueError`` naming both and the node."""
    a = register(["*layers.1[0-9].attention.rope"])
    b = register(["*layers.11.attention.rope"])
    with pytest.raises(ValueError) as err:
        apply([a.entry, b.entry], trainer_config(12))
    message = str(err.value)
    expected = f"Overrides '{a.name}' and '{b.name}' both claim node 'model_spec.model.layers.11.attention.rope'"
    expect(expected in message, "the conflict names both overrides and the node", expected, message)


def test_ancestor_and_descendant_claims_raise():
    """An override of a layer's attention and one of its RoPE: nested claims raise."""
    from torchtitan.config import derive

    config = trainer_config(12)
    attention_cls = type(config.model_spec.model.layers[11].attention)
    outer = register(["*layers.11.attention"], target=attention_cls,
                     factory=lambda cfg: derive(cfg, attention_cls))
    inner = register(["*layers.11.attention.rope"])
    with pytest.raises(ValueError) as err:
        apply([outer.entry, inner.entry], config)
    message = str(err.value)
    expect("an ancestor of" in message and "layers.11.attention.rope" in message and outer.name in message,
           "a nested claim names the ancestor and the descendant", "... an ancestor of ...", message)


def test_same_target_listed_twice():
    """Listing one override twice in ``--override.imports``: where entries are
    ``module.function`` targets, an error ("is named by two entries"); where entries are
    modules imported whole (the fork's vintage), the module is imported once and its
    override applied once (``_resolve_active`` keeps an override whose module is listed)."""
    registered = register(["*layers.1.attention.rope"])
    config = trainer_config(2)
    error = detect().duplicate_entry_error(registered.name)
    if error is not None:
        with pytest.raises(ValueError, match=re.escape(error)):
            apply([registered.entry, registered.entry], config)
    else:
        lines = apply([registered.entry, registered.entry], config)
        expect_equal("the override is applied once", [1], replaced_layers(config.model_spec.model),
                     detail="\n".join(lines))
        expect_equal("one replacement line", 1, len(lines), detail="\n".join(lines))


def test_selector_matching_nothing_warns(caplog):
    """A selector that matches no node: no replacement and the "produced no replacements"
    warning (this is all the write-up's bare selector gets under the trainer)."""
    target = register([WRITEUP_SELECTOR]).entry
    config = trainer_config(12)
    with caplog.at_level(logging.WARNING):
        lines = apply([target], config)
    expect_equal("no replacement lines", [], lines)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    expect(any("produced no replacements" in w and target in w for w in warnings),
           "the warning names the import and says it produced no replacements",
           "override.imports=[...] produced no replacements", warnings)


def test_function_registered_twice_raises():
    """Registering the same override again (same ``module.function``, or same name where the
    API names overrides) raises "is already registered"."""
    from torchtitan.models.common.rope import CosSinRoPE

    registered = register(["*"])
    module, function = registered.name.rsplit(".", 1)
    fn = getattr(sys.modules[module], function)
    with pytest.raises(ValueError, match="is already registered"):
        detect().register(registered.name, target=CosSinRoPE.Config)(fn)


# ----------------------------------------------------------------------------- imports, derive


# Bad --override.imports entries and the message each API gives (from its own code), by
# case: 0.3.0 takes module.function targets; the fork's vintage takes modules imported whole.
@pytest.mark.parametrize("case", ["dotless-name", "missing-module", "other-api-spelling"])
def test_bad_imports_fail_with_documented_message(case):
    """A bad ``--override.imports`` entry fails with the installed API's own message: on
    0.3.0 (``module.function`` targets) a bare module fails with "names no registered
    @override", a dotless name and a missing module fail too; on the fork's vintage (modules)
    a missing module, or 0.3.0's ``module.function`` spelling, fails to import."""
    import fixtures.rank.titan.layer_overrides  # noqa: F401  (registers its overrides; see conformance/conftest.py)

    bad = detect().bad_imports(*LAYER_OVERRIDE)[case]
    with pytest.raises((ValueError, ImportError), match=re.escape(bad.message)):
        apply([bad.entry], trainer_config(2))


_ROPE_FIELDS = st.fixed_dictionaries({
    "dim": st.sampled_from([16, 64, 128]),
    "max_seq_len": st.integers(1, 8192),
    "theta": st.floats(1.0, 1e7),
    "scaling": st.sampled_from(["none", "yarn"]),
    "rope_factor": st.floats(1.0, 8.0),
    "beta_fast": st.floats(1.0, 64.0),
    "original_seq_len": st.integers(1, 8192),
    "truncate": st.booleans(),
})


@given(fields=_ROPE_FIELDS)
def test_derive_copies_every_shared_field(fields):
    """``derive(source, Target)`` copies every field the two configs share; an unknown delta
    raises."""
    import dataclasses

    from torchtitan.config import derive
    from torchtitan.models.common.rope import CosSinRoPE

    from fixtures.rank.titan.rope_override import KernelRoPE  # torchtitan: see conformance/conftest.py

    source = by_feature.build(CosSinRoPE.Config, **fields)
    derived = derive(source, KernelRoPE.Config, lnc=1)
    for f in dataclasses.fields(CosSinRoPE.Config):
        if f.init:
            expect_equal(f"derive copies {f.name}", getattr(source, f.name), getattr(derived, f.name))
    expect_equal("derive applies the delta", 1, derived.lnc)
    with pytest.raises(ValueError, match="fields not on"):
        derive(source, KernelRoPE.Config, not_a_field=1)


# ----------------------------------------------------------------------------- in a real run


@pytest.mark.slow
def test_cli_override_log_contract(titan_runs):
    """A real run with ``--override.imports`` naming the per-layer override (with
    ``='{json kwargs}'`` where the API takes keyword arguments): each replaced node gets
    exactly one ``[Override] name: fqn Old -> New`` line, the kwargs from the command line
    reach the factory, and the total matches the selected layers (10 and 11 of the cpu
    tier's 12-layer model)."""
    api = detect()
    run = require_trained(titan_runs.get(layers_10_to_19()))
    n_layers = len(run.resolved_config()["model_spec"]["model"]["layers"])
    selected = writeup_layers(n_layers)
    expect(bool(selected), "the run's model has layers in 10..19", "> 10 layers", n_layers, run)
    name = api.logged_name(*LAYER_OVERRIDE, LAYER_OVERRIDE[1])
    kwargs_note = api.logged_kwargs(LAYER_OVERRIDE_KWARGS)
    lines = [l[l.index(run_files.OVERRIDE_PREFIX):] for l in run.override_lines(name + ":")]
    expected = [f"{run_files.OVERRIDE_PREFIX}{name}: model_spec.model.layers.{i}.attention.rope "
                f"CosSinRoPE.Config -> KernelRoPE.Config{kwargs_note}" for i in selected]
    expect_equal("one line per replaced node, kwargs from the CLI included where the API takes them", expected, lines, run)
    expect_equal("the total matches the selected layers", len(selected),
                 run_files.applied_count(run.log_text(0)), run)
