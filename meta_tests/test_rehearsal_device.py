"""The rehearsal's ``neuron`` device and its NeuronCore limits, each broken on purpose.

Every check runs in a subprocess of the rehearsal environment (``meta_tests.rehearsal_env``),
where the stand-in torch-neuronx is installed; this session's own process never loads it.
The limits and their sources are the stand-in's (``neuron_standins/torch-neuronx``): no
float64 (NeuronCore-v3 has no FP64 engine), a memory cap per logical core, cores reserved by
the first process that uses them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from meta_tests import rehearsal_env
from fixtures.tiers import rehearsal

pytestmark = pytest.mark.meta


def _run(code: str, tmp: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = rehearsal_env.clean_env(NEURON_REHEARSAL_LOCK_DIR=str(tmp / "locks"), **env)
    full_env.pop("NEURON_RT_VISIBLE_CORES", None)
    full_env.update(env)
    return subprocess.run([str(rehearsal_env.require()), "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=300, cwd=str(tmp))


def test_import_torch_alone_gives_the_neuron_device_and_autoload_off_does_not(tmp_path):
    """torch's device-backend entry point loads the stand-in on ``import torch``, as TorchNeuron
    autoloads; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off."""
    code = """
    import torch
    print(torch._C._get_privateuse1_backend_name(), hasattr(torch, "neuron"))
    """
    on = _run(code, tmp_path)
    assert on.returncode == 0 and on.stdout.split() == ["neuron", "True"], on.stdout + on.stderr
    off = _run(code, tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert off.returncode == 0 and off.stdout.split() == ["privateuseone", "False"], off.stdout + off.stderr


# How a script that ran autograd on ``neuron`` ends: its result printed and flushed, then
# ``os._exit(0)`` before the interpreter finalizes. torch runs a device's backward nodes on an
# autograd device thread, and every ``backward()`` stashes ``contextvars.copy_context()`` in the
# graph task's thread-local state (torch/autograd/graph.py, ``_engine_run_backward``). When that
# thread drops the last reference to the graph task after the main thread has reached
# finalization, the decref takes the GIL, CPython ends the thread with ``pthread_exit``, and the
# forced unwind through torch's noexcept frames aborts the process ("terminate called without an
# active exception"): pytorch/pytorch#117762, open. Measured here with a SIGABRT backtrace
# handler: 3 aborts in 300 runs of the script below with two running at once, each in
# ``Engine::thread_main`` -> ``~GraphTask`` -> ``~ThreadLocalState`` -> ``SafePyObject`` ->
# ``PyEval_AcquireThread`` -> ``pthread_exit``; once in CI (20261204). It is torch's, it happens
# on any device with an autograd device thread (the real one too), and the contract on a run's
# exit (conformance/test_runs.py) is where it is judged; this test judges the arithmetic.
_EXIT_BEFORE_FINALIZATION = """
import os as _os, sys as _sys
_sys.stdout.flush(); _sys.stderr.flush()
_os._exit(0)
"""


def test_tensors_train_on_the_neuron_device(tmp_path):
    """Model, gradients, optimizer state and data on ``neuron``: three AdamW steps equal the
    same steps on CPU bit for bit (the device computes with the CPU kernels, in host memory).
    The script leaves before interpreter finalization (``_EXIT_BEFORE_FINALIZATION``: torch's
    exit race on autograd device threads is not this contract)."""
    code = """
    import json, torch
    def train(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        x, y = torch.randn(32, 8).to(device), torch.randint(0, 4, (32,)).to(device)
        losses = []
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward(); opt.step(); opt.zero_grad()
            losses.append(loss.item())
        state = opt.state[next(iter(model.parameters()))]["exp_avg"]
        return losses, [p.device.type for p in model.parameters()], state.device.type
    cpu, neuron = train("cpu"), train("neuron")
    print(json.dumps({"cpu": cpu[0], "neuron": neuron[0], "devices": sorted(set(neuron[1])), "state": neuron[2]}))
    """
    proc = _run(textwrap.dedent(code) + _EXIT_BEFORE_FINALIZATION, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout.splitlines()[-1])
    assert res["neuron"] == res["cpu"] and res["devices"] == ["neuron"] and res["state"] == "neuron", res


def test_float64_on_the_device_is_refused_naming_the_limit(tmp_path):
    code = """
    import torch
    x = torch.ones(4, device="neuron")
    assert x.cpu().double().sum().item() == 4.0  # float64 on the host is fine
    x.double()
    """
    proc = _run(code, tmp_path)
    assert proc.returncode != 0
    assert "float64 tensors are not supported on the neuron device" in proc.stderr, proc.stderr
    assert "the dress rehearsal's limit, standing for the hardware's" in proc.stderr
    assert "no FP64" in proc.stderr and "neuron-core-v3.rst" in proc.stderr


def test_an_allocation_past_the_cap_is_an_out_of_memory_naming_the_core(tmp_path):
    code = """
    import torch
    keep = torch.empty(3 << 20, dtype=torch.uint8, device="neuron")  # 3 MiB of a 4 MiB cap
    torch.empty(2 << 20, dtype=torch.uint8, device="neuron")
    """
    proc = _run(code, tmp_path, NEURON_REHEARSAL_CORE_MEMORY_BYTES=str(4 << 20), NEURON_RT_VISIBLE_CORES="3")
    assert proc.returncode != 0
    assert "OutOfMemoryError" in proc.stderr and "out of memory on logical NeuronCore 3" in proc.stderr, proc.stderr
    assert "the cap is 4194304 bytes" in proc.stderr


def test_a_second_process_on_a_held_core_fails_with_the_runtimes_message(tmp_path):
    """Importing torch (autoload) reserves the process's visible cores until it exits; a second
    process asking for one of them fails as the runtime does, and the stand-in neuron-ls
    shows which pid holds the device."""
    holder = subprocess.Popen(
        [str(rehearsal_env.require()), "-c", textwrap.dedent("""
        import sys, time, torch
        torch.ones(1, device="neuron")
        print("holding", flush=True)
        time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True, cwd=str(tmp_path),
        env=rehearsal_env.clean_env(NEURON_REHEARSAL_LOCK_DIR=str(tmp_path / "locks"), NEURON_RT_VISIBLE_CORES="1"))
    try:
        assert holder.stdout.readline().strip() == "holding"
        second = _run("import torch; torch.ones(1, device='neuron')", tmp_path, NEURON_RT_VISIBLE_CORES="0-1")
        assert second.returncode != 0
        assert "NRT:nrt_allocate_neuron_cores" in second.stderr and "not available" in second.stderr, second.stderr
        assert f"held by pid {holder.pid}" in second.stderr
        other = _run("import torch; torch.ones(1, device='neuron'); print('ok')", tmp_path, NEURON_RT_VISIBLE_CORES="2")
        assert other.returncode == 0 and other.stdout.strip() == "ok", other.stderr
        listing = subprocess.run([str(rehearsal_env.NEURON_LS), "-j"], capture_output=True, text=True, timeout=60,
                                 env=rehearsal_env.clean_env(NEURON_REHEARSAL_LOCK_DIR=str(tmp_path / "locks")))
        procs = json.loads(listing.stdout)[0]["neuron_processes"]
        assert [p["pid"] for p in procs] == [holder.pid], listing.stdout
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.2)
    again = _run("import torch; torch.ones(1, device='neuron'); print('ok')", tmp_path, NEURON_RT_VISIBLE_CORES="1")
    assert again.returncode == 0, "a core is free again once its holder exited: " + again.stderr


def test_import_torch_reserves_the_cores_and_holds_their_device_nodes(tmp_path):
    """ASSUMED eager reservation (neuron_standins/README.md, "when cores are reserved"): ``import
    torch`` alone, no device use, reserves NEURON_RT_VISIBLE_CORES (else LOCAL_RANK), and the
    reservation holds the stand-in node of each reserved core's device open (the evidence the
    pytest-process contract reads); a core whose device has no node is refused at import."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "neuron4").touch()
    code = """
    import json, os, torch
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    print(json.dumps({"initialized": torch.neuron.is_initialized(), "cores": torch.ops.neuron_rt.visible_cores(),
                      "nodes": sorted(p for p in links if "/dev/neuron" in p)}))
    """
    pod = {"NEURON_REHEARSAL_DEV_DIR": str(dev), rehearsal.NUM_CORES_ENV: "64"}
    pinned = _run(code, tmp_path, NEURON_RT_VISIBLE_CORES="17", **pod)
    assert pinned.returncode == 0, pinned.stderr
    assert json.loads(pinned.stdout) == {"initialized": True, "cores": "17", "nodes": [str(dev / "neuron4")]}
    by_rank = _run(code, tmp_path, LOCAL_RANK="18", **pod)
    assert by_rank.returncode == 0 and json.loads(by_rank.stdout)["cores"] == "18", by_rank.stderr
    again = _run("import torch", tmp_path, NEURON_RT_VISIBLE_CORES="16-17", **pod)
    assert again.returncode == 0, "cores are free again once their holders exited: " + again.stderr
    elsewhere = _run("import torch", tmp_path, NEURON_RT_VISIBLE_CORES="20", **pod)
    assert elsewhere.returncode != 0 and "no device node for NEURON_RT_VISIBLE_CORES=20" in elsewhere.stderr
    assert str(dev / "neuron5") in elsewhere.stderr, elsewhere.stderr


def test_a_host_that_reserves_at_the_first_device_use(tmp_path):
    """The host matrix's other side (``reserve_at: first_use``, the older-tools host): import
    alone reserves nothing; the first allocation does. An unknown value is refused at import."""
    code = """
    import torch
    print(torch.neuron.is_initialized())
    torch.ones(1, device="neuron")
    print(torch.neuron.is_initialized())
    """
    lazy = _run(code, tmp_path, NEURON_RT_VISIBLE_CORES="1",
                NEURON_REHEARSAL_HOST=str(rehearsal.HOSTS_DIR / "older-tools.json"))
    assert lazy.returncode == 0 and lazy.stdout.split() == ["False", "True"], lazy.stdout + lazy.stderr
    eager = _run(code, tmp_path, NEURON_RT_VISIBLE_CORES="1")
    assert eager.returncode == 0 and eager.stdout.split() == ["True", "True"], eager.stdout + eager.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"reserve_at": "later"}')
    refused = _run(code, tmp_path, NEURON_RT_VISIBLE_CORES="1", NEURON_REHEARSAL_HOST=str(bad))
    assert refused.returncode != 0 and "reserve_at 'later' is not one of 'import', 'first_use'" in refused.stderr


def test_the_standins_are_in_no_other_environment():
    """The cpu venvs (and this session's interpreter) have no stand-in distribution, and
    ``import torch`` there gives no ``neuron`` device."""

    repo = Path(__file__).resolve().parent.parent
    pythons = [Path(sys.executable)] + [p for p in (repo / ".venv" / "bin" / "python",
                                                    repo / ".venv-titan-5059f32" / "bin" / "python",
                                                    repo / ".venv-py312" / "bin" / "python") if p.exists()]
    code = ("import json, torch; from importlib import metadata\n"
            "def v(d):\n    try: return metadata.version(d)\n    except metadata.PackageNotFoundError: return None\n"
            f"print(json.dumps({{'dists': [v(d) for d in {list(rehearsal.STANDIN_DISTRIBUTIONS)!r}], "
            "'backend': torch._C._get_privateuse1_backend_name()}))")
    for python in pythons:
        proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120,
                              env=rehearsal_env.clean_env())
        assert proc.returncode == 0, proc.stderr
        res = json.loads(proc.stdout.splitlines()[-1])
        assert res == {"dists": [None] * 4, "backend": "privateuseone"}, (python, res)


def test_the_neuron_compile_backend_keeps_a_cache_and_a_killed_compile_does_not_poison_it(tmp_path):
    """torch.compile(backend="neuron") in the documented cache layout with the documented
    lines: a first compile misses, the same graph then hits; a compile left marked failed
    (as a killed one is) is skipped and fails, unless --retry_failed_compilation is in
    NEURON_CC_FLAGS, as documented (the suite never sets it for the user: fixtures.tiers.tier_profile)."""
    code = """
    import glob, os, sys, torch
    f = torch.compile(lambda x: (x * 3 + 1).sum(), backend="neuron")
    print(f(torch.ones(4, device="neuron")).item())
    if len(sys.argv) > 1:  # leave the graph's entry as a killed compile leaves it
        neff = glob.glob(os.path.join(os.environ["NEURON_COMPILE_CACHE_URL"], "*", "*", "model.neff"))[0]
        os.replace(neff, neff + ".failed")
    """
    cache = str(tmp_path / "neff-cache")
    first = _run(code, tmp_path, NEURON_COMPILE_CACHE_URL=cache)
    second = _run(code, tmp_path, NEURON_COMPILE_CACHE_URL=cache)
    assert first.returncode == 0 and "||NCC_WRAPPER||: Compile cache path:" in first.stderr, first.stderr
    assert second.returncode == 0 and "||NCC_WRAPPER||: Using a cached neff at" in second.stderr, second.stderr
    proc = subprocess.run([str(rehearsal_env.require()), "-c", textwrap.dedent(code), "kill"], capture_output=True,
                          text=True, timeout=300, cwd=str(tmp_path),
                          env=rehearsal_env.clean_env(NEURON_COMPILE_CACHE_URL=cache,
                                                      NEURON_REHEARSAL_LOCK_DIR=str(tmp_path / "locks")))
    assert proc.returncode == 0, proc.stderr
    poisoned = _run(code, tmp_path, NEURON_COMPILE_CACHE_URL=cache, NEURON_CC_FLAGS="")
    assert poisoned.returncode != 0 and "Got a cached failed neff" in poisoned.stderr, poisoned.stderr
    retried = _run(code, tmp_path, NEURON_COMPILE_CACHE_URL=cache, NEURON_CC_FLAGS="--retry_failed_compilation")
    assert retried.returncode == 0 and "Compile cache path:" in retried.stderr, retried.stderr


def test_the_device_index_is_the_visible_cores_or_the_core_torchneuron_took(tmp_path):
    """A process given NEURON_RT_VISIBLE_CORES sees that many devices and its first core is index
    0 ("The first NeuronCore owned by the application will always have the index 0",
    nrt-developer-guide.rst): neuron:LOCAL_RANK is refused for LOCAL_RANK > 0, saying why (the
    fork's vintage trainer met this). With the variable unset under a launcher, TorchNeuron takes
    core LOCAL_RANK (CONTRACTS.md "Topology"), which is device index LOCAL_RANK of the instance's
    cores: the write-up's own line, with the fork's neuron:LOCAL_RANK, trains there."""
    code = """
    import json, os, torch
    out = {"count": torch.neuron.device_count(), "current": torch.neuron.current_device()}
    rank = int(os.environ["LOCAL_RANK"])
    try:
        torch.neuron.set_device(torch.device(f"neuron:{rank}"))
        out["tensor"] = str((torch.ones(2, device="neuron") * 2).device)
    except RuntimeError as exc:
        out["refused"] = str(exc)
    print(json.dumps(out))
    """
    cores = {rehearsal.NUM_CORES_ENV: "8"}
    pinned = _run(code, tmp_path, NEURON_RT_VISIBLE_CORES="1", LOCAL_RANK="1", **cores)
    seen = json.loads(pinned.stdout)
    assert (seen["count"], seen["current"]) == (1, 0), seen
    assert "invalid device index 1: this process's device is neuron:0" in seen["refused"]
    assert "The first NeuronCore owned by the application will always have the index 0" in seen["refused"]
    first = _run(code, tmp_path, NEURON_RT_VISIBLE_CORES="1", LOCAL_RANK="0", **cores)
    assert json.loads(first.stdout) == {"count": 1, "current": 0, "tensor": "neuron:0"}, first.stdout + first.stderr
    by_rank = _run(code, tmp_path, LOCAL_RANK="3", **cores)
    assert json.loads(by_rank.stdout) == {"count": 8, "current": 3, "tensor": "neuron:3"}, by_rank.stdout + by_rank.stderr
