"""summary.md, the page a reviewer reads in a pull request, and the loss-curve plots."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from fixtures.oracles import performance
from fixtures.oracles.performance_record import CompileCacheEvents
from fixtures.runs.result import RunResult
from reports.inventory_record import Inventory
from reports.run_record import RunRecord
from reports.session_report import ContractRecord, SessionReport

OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped")


def plot_losses(run: RunResult, path: Path) -> None:
    """One PNG per training run: loss (and grad norm) per step."""
    steps = run.steps
    if not steps:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    xs = [s.step for s in steps]
    ax.plot(xs, [s.loss for s in steps], marker="o", label="loss (global avg)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax2 = ax.twinx()
    ax2.plot(xs, [s.grad_norm for s in steps], color="tab:orange", linestyle="--",
             label="grad norm")
    ax2.set_ylabel("grad norm")
    overrides = run.spec.overrides
    extra = f" +{','.join(o.rsplit('.', 1)[-1] for o in overrides)}" if overrides else ""
    ax.set_title(f"{run.spec.config}{extra} ({run.key[:8]})", fontsize=10)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _stack_rows(inv: Inventory) -> list[list[str]]:
    """The stack table: every package's version, the builds, the active nkilib, the API."""
    rows = [[name, version or "not installed"] for name, version in inv.packages.items()]
    rows.append(["python", inv.python])
    rows.append(["torch build", inv.torch_build])
    if inv.torchtitan_build:
        rows.append(["torchtitan build", inv.torchtitan_build])
    if inv.nkilib:
        nk = inv.nkilib
        rows.append(["nkilib active", f"{nk.active} {nk.active_version or ''}".strip()
                     + (f" (MISMATCH: {nk.mismatch})" if nk.mismatch else "")])
    if inv.torchtitan_api:
        rows.append(["torchtitan API", inv.torchtitan_api.override_api])
    return rows


def _runs_section(report: SessionReport) -> list[str]:
    """Every training run the session used: steps, losses, wall time, status, compile cache, curve."""
    lines: list[str] = []
    if report.runs:
        lines += ["## Training runs", ""]
        rows = []
        for r in report.runs:
            steps = r.steps
            rows.append([
                f"`{r.description}`",
                len(steps),
                f"{steps[0].loss:.5f}" if steps else "-",
                f"{steps[-1].loss:.5f}" if steps else "-",
                f"{r.launch.wall_s:.1f}",
                _run_status(r),
                _compile_cache_cell(r.compile_cache),
                f"[plot](runs/{r.key}.png)" if steps else "",
            ])
        lines += _table(["run", "steps", "first loss", "last loss", "wall s", "status", "compile cache", "curve"], rows)
        lines.append("")
    lines += _nodes_section(report)
    return lines


def _nodes_section(report: SessionReport) -> list[str]:
    """The runs launched over several nodes or through a scheduler: back end, job, and per node
    its host and global ranks (a failure's culprit names its node too). These are the launch's
    words as written (``LaunchRecord.rest``: ``LaunchOutcome.to_dict``'s hosts, launcher, job)."""
    rows = []
    for r in report.runs:
        launch = r.launch.rest
        hosts = launch.get("hosts") or []
        if len(hosts) < 2 and launch.get("launcher", "local") == "local":
            continue
        ranks = launch.get("node_ranks") or {}
        rows.append([f"`{r.description}`", launch.get("launcher", "local"), launch.get("job_id") or "-",
                     "; ".join(f"node {i}: {h} ranks {ranks.get(str(i), '?')}" for i, h in enumerate(hosts)),
                     launch.get("scheduler_end") or _run_status(r)])
    if not rows:
        return []
    return ["## Runs over several nodes", ""] + _table(["run", "launcher", "job", "nodes", "end"], rows) + [""]


def _run_status(run: RunRecord) -> str:
    launch = run.launch
    if run.ok:
        return "ok"
    if launch.stopped:  # only known deviations asked for it: not re-measured
        return "stopped at the expected-failure cap (not re-measured)"
    return "timed out" if launch.timed_out else f"exit {launch.returncode}"


def render(report: SessionReport, gate_result=None) -> str:
    contracts = report.contracts
    lines = [f"# Conformance summary: session {report.session}", ""]
    if report.rehearsal:
        lines += ["**NEURON DRESS REHEARSAL: the trn2 tier ran on CPU against stand-ins of the Neuron "
                  "layer (torch_neuronx, nkilib, torchtitan_neuron, neuron-ls, /dev/neuron*). This is "
                  "CPU evidence only, never trn2 evidence.**", ""]
    for tier, source in sorted(report.inherited_expectations.items()):
        lines += [f"**Expectations inherited ({tier}): stack `{source.stack}` has no expectations file of "
                  f"its own; `{source.file_stack}`'s were applied. Its own deviations are not reviewed "
                  "yet, so it is not a trusted stack: `python -m reports.write_expectations REPORT_DIR` "
                  "writes its file from this session, for review.**", ""]
    if not report.complete:
        lines += ["**INCOMPLETE: the session was interrupted; only finished contracts are listed.**", ""]
    for found in report.stack_preflight:
        if not found.ok:
            runs = ", ".join(f"`{r}`" for r in found.runs)
            lines += [f"**STACK PREFLIGHT FAILED: these runs were not launched: {runs}.**", "", "```",
                      found.message, "```", ""]
    totals = Counter(c.outcome for c in contracts)
    lines += [
        f"Tiers: {', '.join(report.platforms) or 'none'}; selection `-m {report.markexpr}`; "
        + ", ".join(f"{totals[o]} {o}" for o in OUTCOMES if totals[o]),
        "",
        "## Stack",
        "",
    ]
    lines += _table(["package", "version"], _stack_rows(report.inventory)) + [""]

    by_area = defaultdict(Counter)  # area -> outcome -> contracts
    for c in contracts:
        by_area[c.area or ("meta" if c.nodeid.startswith("meta_tests/") else "other")][c.outcome] += 1
    lines += ["## Contracts by area", ""]
    lines += _table(["area", *OUTCOMES],
                    [[area, *[counts[o] or "" for o in OUTCOMES]] for area, counts in sorted(by_area.items())])
    lines.append("")

    failed = [c for c in contracts if c.outcome in ("failed", "error", "xpassed")]
    if failed:
        lines += ["## Failures", ""]
        for c in failed:
            first = next((l for l in (c.message or "").splitlines() if "contract:" in l), "")
            lines.append(f"- `{c.nodeid}` {first.strip()}"
                         + (f" (repro bundle: `{c.repro_bundle}`)" if c.repro_bundle else ""))
        lines.append("")
    lines += _listed("Known upstream deviations (strict xfail)",
                     [f"- `{c.nodeid}`: {(c.message or '').strip()[:300]}" for c in contracts if c.outcome == "xfailed"])
    lines += _listed("Skipped (not passing)",
                     [f"- `{c.nodeid}`: {(c.message or '').strip()[:200]}" for c in contracts if c.outcome == "skipped"])
    lines += _listed("Not launched (--session-budget-s spent)",
                     [f"- `{n.run}` on {n.tier}" for n in report.not_launched])
    lines += _listed("Not covered on this tier",
                     [f"- `{n.test}` on {n.tier}{' (rehearsal)' if n.rehearsal else ''}: {n.reason}"
                      for n in report.not_covered])
    lines += _runs_section(report)
    lines += performance_section(report)
    if gate_result is not None:
        lines += ["## Against the baseline", "", "```", gate_result.text(), "```", ""]
    return "\n".join(lines)


def _listed(title: str, items: list[str]) -> list[str]:
    """A section of the summary listing ``items``; nothing where there are none."""
    return [f"## {title}", "", *items, ""] if items else []


def performance_section(report: SessionReport) -> list[str]:
    """The performance contracts' figures per rank, with their spread (fixtures.oracles.performance)."""
    lines = []
    for c in report.contracts:
        if c.performance is None:
            continue
        lines += _performance_of(c, report.machine.name if report.machine and report.machine.name else "not recorded")
    return lines


def _performance_of(c: ContractRecord, machine: str) -> list[str]:
    fig = c.performance
    missing = performance.unmeasured(fig.ranks)
    verdict = ": NOT MEASURED" if missing or c.outcome != "passed" else ""
    lines = [f"## Performance ({c.nodeid.rsplit('[', 1)[-1].rstrip(']')}){verdict}", ""]
    if verdict:  # the same rule as the upgrade check's and the gate's
        lines += [f"- the performance contract {c.outcome}"] * (c.outcome != "passed")
        lines += [f"- {line}" for line in missing] + [""]
    lines += [f"Run `{fig.run}`; warm-up rule: {fig.warmup_rule}; compile cache: "
              f"{_compile_cache_cell(fig.compile_cache)}; machine: {machine}.",
              "Absolute figures belong to this machine: compare them only with a session of the same machine.", ""]
    rows = [[rank, "-" if r.warmup_steps is None else r.warmup_steps, _cell(r.first_step_s, ".3f"),
             f"{_cell(r.step_time_s, '.4f')} ({_cell(r.step_time_p10_s, '.4f')}-{_cell(r.step_time_p90_s, '.4f')})",
             _cell(r.tokens_per_s, ".0f"), _cell(r.peak_memory_gib, ".4f")
             + (f" ({r.peak_of_core_capacity:.0%} of the core)" if r.peak_of_core_capacity is not None else ""),
             _cell(r.memory_growth_mib_per_step, ".3f")] for rank, r in sorted(fig.ranks.items())]
    return lines + _table(["rank", "warm-up steps", "first step s", "steady step s: median (p10-p90)", "tokens/s",
                           "peak memory GiB", "growth MiB/step"], rows) + [""]


def _cell(value, spec: str) -> str:
    """A figure as the table shows it; a missing one as 'missing', never a crash."""
    return "missing" if not isinstance(value, (int, float)) else format(value, spec)


def _compile_cache_cell(events: CompileCacheEvents | None) -> str:
    """Graphs the run compiled / found in the compile cache / skipped as cached failures."""
    if not events:
        return "-"
    return ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in events.to_json().items() if n)
