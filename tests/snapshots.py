"""Build PyTorch memory snapshots and the traces of the same runs from code, and a brute-force reference.

A :class:`Toy` run is a list of allocator actions in time order (``segment``, ``alloc``, ``free``,
``release``: a segment given back); :meth:`Toy.snapshot` is the snapshot PyTorch would dump at the
end (``torch.cuda.memory._snapshot``'s shape: segments with their blocks, the history in
``device_traces``), :meth:`Toy.export` the nsys export of the same run (a ``cudaMalloc``/``cudaFree``
call and its memory event per segment, on the UTC clock ``time_us * 1000 - session_start``), and
:func:`reference` the allocator at a moment computed the slow way: every action up to the moment
replayed forward, memory painted 512 B at a time.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder import Call, Diagnostic, Export, MemoryEvent, build_export

SESSION_START = 1_796_000_000_000_000_000  # ns since the epoch (the export's utcEpochNs)
EPOCH_US = SESSION_START // 1000  # a toy's times are µs after the session start
GRAIN = 512


def frames(*sites: tuple[str, int, str]) -> list[dict[str, Any]]:
    return [{"filename": f, "line": line, "name": n} for f, line, n in sites]


@dataclass
class Action:
    kind: str  # segment | alloc | free | release
    t_us: int
    addr: int
    size: int = 0
    stack: int = 0  # an index into Toy.stacks


@dataclass
class Toy:
    """One process's allocator over time (``pid``), its stacks (``stacks[i]``: frames, innermost first)."""

    pid: int = 100
    actions: list[Action] = field(default_factory=list)
    stacks: list[list[dict[str, Any]]] = field(default_factory=lambda: [[], frames(("train.py", 10, "<module>"))])
    expandable: bool = False

    # --- the run --------------------------------------------------------------------------------
    def segment(self, t_us: int, addr: int, size: int, stack: int = 1) -> Toy:
        self.actions.append(Action("segment", t_us, addr, size, stack))
        return self

    def alloc(self, t_us: int, addr: int, size: int, stack: int = 1) -> Toy:
        self.actions.append(Action("alloc", t_us, addr, size, stack))
        return self

    def free(self, t_us: int, addr: int, stack: int = 1) -> Toy:
        self.actions.append(Action("free", t_us, addr, 0, stack))
        return self

    def release(self, t_us: int, addr: int, stack: int = 1) -> Toy:
        self.actions.append(Action("release", t_us, addr, 0, stack))
        return self

    # --- what PyTorch would dump ------------------------------------------------------------------
    def entries(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        sizes: dict[int, int] = {}
        for a in self.actions:
            base = {"stream": 0, "time_us": EPOCH_US + a.t_us, "compile_context": "NA", "user_metadata": "",
                    "frames": self.stacks[a.stack]}
            if a.kind == "segment":
                sizes[a.addr] = a.size
                out.append({**base, "action": "segment_map" if self.expandable else "segment_alloc",
                            "addr": a.addr, "size": a.size})
            elif a.kind == "release":
                out.append({**base, "action": "segment_unmap" if self.expandable else "segment_free",
                            "addr": a.addr, "size": sizes.pop(a.addr)})
            elif a.kind == "alloc":
                sizes[a.addr] = a.size
                out.append({**base, "action": "alloc", "addr": a.addr, "size": a.size})
            else:
                size = sizes.pop(a.addr)
                out.append({**base, "action": "free_requested", "addr": a.addr, "size": size})
                out.append({**base, "action": "free_completed", "addr": a.addr, "size": size})
        return out

    def snapshot(self, *, drop_first: int = 0) -> dict[str, Any]:
        """The snapshot at the end (``drop_first``: history entries a full ring buffer lost)."""
        segs, allocs = live(self.actions, None)
        segments = []
        for addr, (size, stack) in sorted(segs.items()):
            blocks, cursor = [], addr
            inside = sorted((a, s, st) for a, (s, st, _) in allocs.items() if addr <= a < addr + size)
            for a, s, st in inside:
                if a > cursor:
                    blocks.append({"address": cursor, "size": a - cursor, "requested_size": 0, "state": "inactive",
                                   "frames": []})
                rounded = rounded_up(s)
                blocks.append({"address": a, "size": rounded, "requested_size": s, "state": "active_allocated",
                               "frames": self.stacks[st]})
                cursor = a + rounded
            if cursor < addr + size:
                blocks.append({"address": cursor, "size": addr + size - cursor, "requested_size": 0,
                               "state": "inactive", "frames": []})
            active = sum(b["size"] for b in blocks if b["state"] != "inactive")
            segments.append({
                "device": 0, "address": addr, "total_size": size, "allocated_size": active, "active_size": active,
                "requested_size": sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
                "stream": 0, "segment_type": "small" if size == 2 << 20 else "large", "segment_pool_id": (0, 0),
                "is_expandable": self.expandable, "frames": self.stacks[stack], "blocks": blocks,
            })
        settings = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if self.expandable else "",
                    "expandable_segments": self.expandable, "roundup_power2_divisions": {"1": 0}}
        return {"segments": segments, "device_traces": [self.entries()[drop_first:]],
                "allocator_settings": settings, "external_annotations": []}

    def write(self, path: Path, **kwargs: Any) -> Path:
        path.write_bytes(pickle.dumps(self.snapshot(**kwargs), protocol=4))
        return path

    # --- what nsys would record ---------------------------------------------------------------------
    def trace_ns(self, t_us: int) -> int:
        """A toy time (µs after the session start) on the trace clock."""
        return t_us * 1000

    def calls(self, corr: int = 1000) -> tuple[list[Call], list[MemoryEvent]]:
        """A cudaMalloc (its memory event at the segment's address) 2 µs before each segment entry, a
        cudaFree (its deallocation event) 2 µs after each release."""
        calls, events = [], []
        sizes: dict[int, int] = {}
        for a in self.actions:
            if a.kind not in ("segment", "release"):
                continue
            corr += 1
            if a.kind == "segment":
                sizes[a.addr] = a.size
                t = self.trace_ns(a.t_us) - 2_000
                calls.append(Call("cudaMalloc_v3020", t - 1_000, t + 1_000, pid=self.pid, tid=self.pid, corr=corr))
                events.append(MemoryEvent(t, self.pid, a.size, corr=corr, mem_kind=2, op=0, address=a.addr))
            else:
                t = self.trace_ns(a.t_us) + 2_000
                calls.append(Call("cudaFree_v3020", t - 1_000, t + 1_000, pid=self.pid, tid=self.pid, corr=corr))
                events.append(MemoryEvent(t, self.pid, sizes.pop(a.addr), corr=corr, mem_kind=2, op=1,
                                          address=a.addr))
        return calls, events

    def export(self, path: Path, *, session_start: int | None = SESSION_START, others: list[Toy] = (),
               memory: bool = True) -> Path:
        calls: list[Call] = []
        events: list[MemoryEvent] = []
        for i, toy in enumerate([self, *others]):
            c, e = toy.calls(1000 + 10_000 * i)
            calls += c
            events += e if memory else []
        first, last = min(c.start for c in calls), max(c.end for c in calls)
        spec = Export(calls=calls, memory_events=events, session_start_utc_ns=session_start,
                      processes={t.pid: "python3" for t in [self, *others]},
                      diagnostics=[Diagnostic(max(0, first - 1_000_000), "Profiling has started."),
                                   Diagnostic(last + 1_000_000, "Profiling has stopped.")],
                      capture_meta={} if memory else {"COLLECT_GPU_MEMORY_USAGE": "false"})
        return build_export(spec, path)


def rounded_up(size: int) -> int:
    return max(GRAIN, -(-size // GRAIN) * GRAIN)


def live(actions: list[Action], t_us: int | None) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int, int]]]:
    """The segments (addr -> size, stack) and allocations (addr -> size, stack, t) alive after every
    action at or before ``t_us`` (None: all of them)."""
    segs: dict[int, tuple[int, int]] = {}
    allocs: dict[int, tuple[int, int, int]] = {}
    for a in actions:
        if t_us is not None and a.t_us > t_us:
            break
        if a.kind == "segment":
            segs[a.addr] = (a.size, a.stack)
        elif a.kind == "release":
            del segs[a.addr]
        elif a.kind == "alloc":
            allocs[a.addr] = (a.size, a.stack, a.t_us)
        else:
            del allocs[a.addr]
    return segs, allocs


def reference(toy: Toy, t_us: int) -> dict[str, Any]:
    """The allocator after every action at or before ``t_us``, the slow way: reserved, requested,
    inactive; each 512 B grain free in a live segment painted by the last allocation that covered it."""
    segs, allocs = live(toy.actions, t_us)
    owner: dict[int, tuple[int, int]] = {}  # grain -> (stack, alloc time) of the last allocation over it
    for a in toy.actions:
        if a.t_us > t_us:
            break
        if a.kind == "alloc":
            for g in range(a.addr, a.addr + rounded_up(a.size), GRAIN):
                owner[g] = (a.stack, a.t_us)
    busy = {g for addr, (size, _, _) in allocs.items() for g in range(addr, addr + rounded_up(size), GRAIN)}
    free_grains = sorted(g for addr, (size, _) in segs.items() for g in range(addr, addr + size, GRAIN)
                         if g not in busy)
    ranges = 0
    previous = None
    for g in free_grains:
        if previous is None or g != previous + GRAIN:
            ranges += 1
        previous = g
    by_stack: dict[int | None, int] = {}
    for g in free_grains:
        stack = owner[g][0] if g in owner else None
        by_stack[stack] = by_stack.get(stack, 0) + GRAIN
    reserved = sum(size for size, _ in segs.values())
    requested = sum(size for size, _, _ in allocs.values())
    return {"reserved": reserved, "requested": requested, "inactive": reserved - requested,
            "ranges": ranges, "ranges_bytes": len(free_grains) * GRAIN,
            "holders": {k: v for k, v in by_stack.items() if k is not None}, "unattributed": by_stack.get(None, 0)}
