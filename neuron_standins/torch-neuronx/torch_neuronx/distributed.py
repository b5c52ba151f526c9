"""The ``neuron`` process-group backend (REHEARSAL STAND-IN): gloo underneath.

``init_process_group(backend="neuron")`` builds a :class:`NeuronProcessGroup`, a Python
``torch.distributed.ProcessGroup`` that owns a gloo backend on the same store. Neuron tensors
are handed to gloo as CPU tensors sharing their (host) memory, so collectives run in place; a
non-contiguous one goes through a contiguous copy that is written back. CPU tensors go to gloo
as they are, so the group serves ``cpu`` and ``neuron`` alike. Collectives complete before
they return (the returned Work is already done).

Reductions: SUM/AVG/MIN/MAX/PRODUCT... go to gloo; PREMUL_SUM (which gloo lacks, and FSDP2
uses for a gradient divide factor other than the world size) is done here as a multiply by
its factor followed by SUM.

As the Neuron backend does at ``init_process_group(backend="neuron")``: one device per
process, ``NEURON_RT_VISIBLE_CORES`` set to ``LOCAL_RANK`` when unset; the device is
initialised (its cores reserved) when the group is created.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

_host = torch.ops.neuron_rt.host_alias


class _Staging:
    """CPU tensors for gloo standing for (possibly neuron) tensors; copies written back at the end."""

    def __init__(self):
        self._writeback: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "neuron":
            return t
        if t.is_contiguous():
            return _host(t)
        c = t.contiguous()
        self._writeback.append((t, c))
        return _host(c)

    def list(self, ts):
        return [self(t) for t in ts]

    def finish(self) -> None:
        for t, c in self._writeback:
            t.copy_(c)


def _done(result) -> dist.Work:
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def _split_op(op):
    """(op for gloo, premultiply factor or None)."""
    kind, factor = op.__getstate__() if isinstance(op, dist.ReduceOp) else (op, None)
    if kind == dist.ReduceOp.RedOpType.PREMUL_SUM:
        return dist.ReduceOp.SUM, factor
    return op, None


def _with_op(opts, cls, op):
    new = cls()
    new.reduceOp = op
    new.timeout = opts.timeout
    for name in ("rootRank", "rootTensor", "asyncOp"):
        if hasattr(opts, name):
            setattr(new, name, getattr(opts, name))
    return new


def _premultiplied(ts, factor, in_place):
    if factor is None:
        return ts
    if in_place:
        for t in ts:
            t.mul_(factor)
        return ts
    return [t * factor for t in ts]


class NeuronProcessGroup(dist.ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout):
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        # Registered as the group's cpu backend: c10d keeps the group name in its backends, and
        # anything not overridden below falls back to it (for CPU tensors).
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)

    def getBackendName(self) -> str:
        return "neuron"

    def _run(self, staging: _Staging, call, result):
        call().wait()
        staging.finish()
        return _done(result)

    # -- trampolined collectives (reachable from C++: functional collectives, FSDP2, DTensor) --

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        op, factor = _split_op(opts.reduceOp)
        s = _Staging()
        hosts = _premultiplied(s.list(tensors), factor, in_place=True)
        o = _with_op(opts, dist.AllreduceOptions, op)
        return self._run(s, lambda: self._gloo.allreduce(hosts, o), tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        op, factor = _split_op(opts.reduceOp)
        s = _Staging()
        hosts = _premultiplied(s.list(tensors), factor, in_place=True)
        o = _with_op(opts, dist.AllreduceCoalescedOptions, op)
        return self._run(s, lambda: self._gloo.allreduce_coalesced(hosts, o), tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        s = _Staging()
        outs = [s.list(ts) for ts in output_tensors]
        ins = s.list(input_tensors)
        return self._run(s, lambda: self._gloo.allgather(outs, ins, opts), output_tensors)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        opts = opts or dist.AllgatherOptions()
        s = _Staging()
        outs = [s.list(ts) for ts in output_lists]
        ins = s.list(input_list)
        return self._run(s, lambda: self._gloo.allgather_coalesced(outs, ins, opts), output_lists)

    def all_gather_single(self, output, input, opts=None):
        opts = opts or dist.AllgatherOptions()
        s = _Staging()
        o, i = s(output), s(input)
        return self._run(s, lambda: self._gloo.all_gather_single(o, i, opts), [output])

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.AllgatherOptions()
        s = _Staging()
        outs, ins = s.list(outputs), s.list(inputs)
        return self._run(s, lambda: self._gloo.all_gather_single_coalesced(outs, ins, opts), outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op, factor = _split_op(opts.reduceOp)
        s = _Staging()
        outs = s.list(output_tensors)
        ins = [_premultiplied(s.list(ts), factor, in_place=False) for ts in input_lists]
        o = _with_op(opts, dist.ReduceScatterOptions, op)
        return self._run(s, lambda: self._gloo.reduce_scatter(outs, ins, o), output_tensors)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op, factor = _split_op(opts.reduceOp)
        s = _Staging()
        out = s(output)
        (inp,) = _premultiplied([s(input)], factor, in_place=False)
        o = _with_op(opts, dist.ReduceScatterOptions, op)
        return self._run(s, lambda: self._gloo.reduce_scatter_single(out, inp, o), [output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op, factor = _split_op(opts.reduceOp)
        s = _Staging()
        outs = s.list(outputs)
        ins = _premultiplied(s.list(inputs), factor, in_place=False)
        o = _with_op(opts, dist.ReduceScatterOptions, op)
        return self._run(s, lambda: self._gloo.reduce_scatter_single_coalesced(outs, ins, o), outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        s = _Staging()
        hosts = s.list(tensors)
        return self._run(s, lambda: self._gloo.broadcast(hosts, opts), tensors)

    def barrier(self, opts=None):
        return self._run(_Staging(), lambda: self._gloo.barrier(opts or dist.BarrierOptions()), None)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        s = _Staging()
        o, i = s(output), s(input)
        return self._run(
            s, lambda: self._gloo.all_to_all_single(o, i, output_split_sizes, input_split_sizes, opts), [output]
        )

    alltoall_base = all_to_all_single

    def send(self, tensors, dst: int, tag: int):
        s = _Staging()
        hosts = s.list(tensors)
        return self._run(s, lambda: self._gloo.send(hosts, dst, tag), tensors)

    def recv(self, tensors, src: int, tag: int):
        s = _Staging()
        hosts = s.list(tensors)
        return self._run(s, lambda: self._gloo.recv(hosts, src, tag), tensors)

    # -- called from Python only (torch.distributed's gather/scatter/reduce/all_to_all) --

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllToAllOptions()
        s = _Staging()
        outs, ins = s.list(output_tensors), s.list(input_tensors)
        return self._run(s, lambda: self._gloo.alltoall(outs, ins, opts), output_tensors)

    def gather(self, output_lists, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        s = _Staging()
        outs = [s.list(ts) for ts in output_lists]
        ins = s.list(input_tensors)
        return self._run(s, lambda: self._gloo.gather(outs, ins, opts), output_lists)

    def scatter(self, output_tensors, input_lists, opts=None):
        opts = opts or dist.ScatterOptions()
        s = _Staging()
        outs = s.list(output_tensors)
        ins = [s.list(ts) for ts in input_lists]
        return self._run(s, lambda: self._gloo.scatter(outs, ins, opts), output_tensors)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        op, factor = _split_op(opts.reduceOp)
        s = _Staging()
        hosts = _premultiplied(s.list(tensors), factor, in_place=True)
        o = _with_op(opts, dist.ReduceOptions, op)
        return self._run(s, lambda: self._gloo.reduce(hosts, o), tensors)


def _create(store, rank, world_size, timeout):
    if "NEURON_RT_VISIBLE_CORES" not in os.environ and "LOCAL_RANK" in os.environ:
        os.environ["NEURON_RT_VISIBLE_CORES"] = os.environ["LOCAL_RANK"]
    torch.neuron.init()  # the group needs the device: reserve this rank's cores now
    return NeuronProcessGroup(store, rank, world_size, timeout)


def register() -> None:
    if "neuron" not in dist.Backend.backend_list:
        dist.Backend.register_backend("neuron", _create, devices=["neuron", "cpu"])
