"""What says the pytest process holds no NeuronCore, in any PID namespace
(``fixtures.launch.device_isolation``): its own open device nodes, and which of neuron-ls's
pids this namespace lacks; and the user's autoload setting the rank wrapper gives back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures.launch import device_isolation

pytestmark = pytest.mark.meta


def test_open_device_nodes_are_read_from_the_process_own_fds(tmp_path):
    """Only ``neuron<N>`` nodes of the given folders count; other files, other folders and
    names like ``neuron-ls`` do not; a fd closed while listing is skipped."""
    dev, other, fds = tmp_path / "dev", tmp_path / "other", tmp_path / "fd"
    for d in (dev, other, fds):
        d.mkdir()
    targets = [dev / "neuron4", dev / "neuron-ls", dev / "null", other / "neuron5", dev / "neuron12"]
    for i, target in enumerate(targets):
        target.touch()
        os.symlink(target, fds / str(i))
    os.symlink(dev / "gone", fds / "99")  # a dangling link reads as a link: not a node name
    assert device_isolation.open_device_nodes([str(dev)], fd_dir=str(fds)) == [str(dev / "neuron12"),
                                                                              str(dev / "neuron4")]
    assert device_isolation.open_device_nodes([str(tmp_path / "none")], fd_dir=str(fds)) == []


def test_this_process_holds_no_node_of_a_folder_it_never_opened(tmp_path):
    (tmp_path / "neuron0").touch()
    assert device_isolation.open_device_nodes([str(tmp_path)]) == []
    with open(tmp_path / "neuron0"):
        assert device_isolation.open_device_nodes([str(tmp_path)]) == [str(tmp_path / "neuron0")]


def test_pids_this_namespace_lacks_are_named(tmp_path):
    proc = tmp_path / "proc"
    (proc / "12").mkdir(parents=True)
    assert device_isolation.foreign_pids([12, 400012, 7], proc_dir=str(proc)) == [7, 400012]
    assert device_isolation.foreign_pids([os.getpid()]) == []


@pytest.mark.parametrize(("env", "expected"), [
    ({}, None),
    ({device_isolation.AUTOLOAD_ENV: "1"}, "1"),
    ({device_isolation.AUTOLOAD_ENV: "0", device_isolation.SAVED_ENV: device_isolation.UNSET}, None),
    ({device_isolation.AUTOLOAD_ENV: "0", device_isolation.SAVED_ENV: "0"}, "0"),
])
def test_the_users_autoload_is_the_one_saved_before_the_suite_turned_it_off(env, expected):
    assert device_isolation.user_autoload(env) == expected


def test_the_rank_wrapper_is_executable():
    from fixtures.runs.plan import RANK_WRAPPER

    assert Path(RANK_WRAPPER).is_file() and os.access(RANK_WRAPPER, os.X_OK)
