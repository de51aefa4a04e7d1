"""Reading a PyTorch memory snapshot (``torch.cuda.memory._dump_snapshot``): the allocator's own view.

A snapshot is a pickle of plain data (``torch.cuda.memory._snapshot``): ``segments`` (each memory
segment the caching allocator holds, with its ``blocks``: ``active_allocated``,
``active_awaiting_free`` or ``inactive``, and the Python stack that allocated each), ``device_traces``
(per device, the allocator's history when ``_record_memory_history`` was on: ``alloc``,
``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``, under expandable segments
``segment_map``/``segment_unmap``, ``oom``, ``snapshot``, each with ``time_us``) and
``allocator_settings``.

A pickle is hostile input: it is decoded by ``_unpickle.py`` in a child process of its own, under a
memory limit, with an unpickler that refuses every global (see that file), and only columns come
back. :func:`load_snapshot` turns them into polars frames (:class:`Snapshot`); nothing here knows
about traces (:mod:`nsysaudit.analysis.allocator` joins a snapshot to one).
"""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import polars as pl

from nsysaudit.core.errors import UnusableInput
from nsysaudit.core.paths import refuse_undecodable_name
from nsysaudit.core.shapes import Schema
from nsysaudit.words import snapshot_repr

# A snapshot of 200,000 history entries with Python stacks is ~30 MB; the PyTorch docs warn of
# snapshots "in the GB range" for long histories. Past this, the file is refused unread.
MAX_SNAPSHOT_BYTES = 2 << 30
# The child may use this much address space, plus MEMORY_PER_BYTE per byte of the file (its Python
# objects take ~12x the pickle's size; a pickle that asks for more is refused, not obeyed).
BASE_MEMORY = 512 << 20
MEMORY_PER_BYTE = 40
EXIT_UNUSABLE = 3  # _unpickle.EXIT_UNUSABLE (that file is run, never imported)
READER = Path(__file__).with_name("_unpickle.py")

SEGMENT_SCHEMA: Schema = {
    "segment": pl.Int64,
    "device": pl.Int64,
    "address": pl.Int64,
    "total_size": pl.Int64,
    "allocated_size": pl.Int64,
    "active_size": pl.Int64,
    "requested_size": pl.Int64,
    "stream": pl.Int64,
    "segment_type": pl.String,
    "pool_0": pl.Int64,
    "pool_1": pl.Int64,
    "is_expandable": pl.Boolean,
    "stack": pl.Int64,
}
BLOCK_SCHEMA: Schema = {
    "segment": pl.Int64,
    "address": pl.Int64,
    "size": pl.Int64,
    "requested_size": pl.Int64,
    "state": pl.String,
    "stack": pl.Int64,
}
ENTRY_SCHEMA: Schema = {
    "device": pl.Int64,
    "seq": pl.Int64,
    "action": pl.String,
    "addr": pl.Int64,
    "size": pl.Int64,
    "stream": pl.Int64,
    "time_us": pl.Int64,
    "device_free": pl.Int64,
    "stack": pl.Int64,
}
FRAME_SCHEMA: Schema = {"stack": pl.Int64, "depth": pl.Int64, "filename": pl.String, "line": pl.Int64,
                        "name": pl.String}


@dataclass(frozen=True, eq=False)
class Snapshot:
    """One snapshot file, decoded.

    - ``segments``: :data:`SEGMENT_SCHEMA`, one row per segment (``segment`` its index, ``stack`` the
      stack that allocated it, -1 none recorded);
    - ``blocks``: :data:`BLOCK_SCHEMA`, each segment's blocks in order;
    - ``entries``: :data:`ENTRY_SCHEMA`, the history of each device (``device`` the index into
      ``device_traces``, ``seq`` the entry's position there);
    - ``frames``: :data:`FRAME_SCHEMA`, the stacks' frames, innermost first (``depth`` 0), at most
      64 per stack; ``stack_frames``: how many frames each stack has in all (by stack id);
    - ``settings``: ``allocator_settings``' scalar values as recorded (``PYTORCH_CUDA_ALLOC_CONF``,
      ``expandable_segments``, ...); ``keys``: the snapshot's top-level keys; ``devices``: how many
      device traces it has.
    """

    path: str
    sha256: str
    size_bytes: int
    segments: pl.DataFrame
    blocks: pl.DataFrame
    entries: pl.DataFrame
    frames: pl.DataFrame
    stack_frames: tuple[int, ...] = ()
    settings: dict[str, str | int | float | bool | None] = field(default_factory=dict)
    keys: tuple[str, ...] = ()
    devices: int = 0

    @property
    def has_history(self) -> bool:
        """Whether the allocator's history was recorded (``_record_memory_history``)."""
        return self.entries.height > 0

    def __repr__(self) -> str:
        return snapshot_repr(self.path, self.segments.height, self.blocks.height, self.entries.height)


def load_snapshot(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_SNAPSHOT_BYTES, timeout_s: float | None = None
) -> Snapshot:
    """Read a memory snapshot pickle (see the module's docstring).

    Raises :class:`~nsysaudit.core.errors.UnusableInput` (one line: the file and the problem) for a
    missing or irregular file, one over ``max_bytes``, a pickle that is damaged, holds a global or
    anything but plain data, needs more memory than its size allows, or is not a memory snapshot.

    >>> snap = load_snapshot("tests/fixtures/h200-cuda13-nsys2025.3/snap/observe-end.pickle")
    >>> snap.segments.height, snap.entries.height, snap.settings["expandable_segments"]
    (26, 136, False)
    """
    given = Path(path)
    refuse_undecodable_name(given)
    if not given.exists():
        raise UnusableInput(given, "no such file")
    if not given.is_file():
        raise UnusableInput(given, "not a regular file")
    size = given.stat().st_size
    if size > max_bytes:
        raise UnusableInput(given, f"{size:,} bytes, more than the {max_bytes:,} a snapshot may have here")
    columns = _decoded(given, max_bytes, BASE_MEMORY + MEMORY_PER_BYTE * max(size, 1), timeout_s)
    return _snapshot(os.fspath(path), size, columns)


def _decoded(path: Path, max_bytes: int, max_memory: int, timeout_s: float | None) -> dict[str, object]:
    """The columns ``_unpickle.py`` decodes from ``path``, in a child process (``-I -S``: no site,
    no environment, the standard library only)."""
    command = [sys.executable, "-I", "-S", str(READER), os.fspath(path), str(max_bytes), str(max_memory)]
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UnusableInput(path, f"reading the snapshot took more than {timeout_s} s") from None
    except OSError as exc:
        raise UnusableInput(path, f"cannot start the snapshot reader ({exc.strerror or exc})") from None
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    if done.returncode == EXIT_UNUSABLE and said:
        raise UnusableInput(path, said[-1])
    if done.returncode != 0:
        why = f"signal {-done.returncode}" if done.returncode < 0 else f"exit code {done.returncode}"
        last = f": {said[-1][:200]}" if said else ""
        raise UnusableInput(path, f"the snapshot reader stopped ({why}{last}): a memory bomb or a damaged pickle")
    try:
        columns = marshal.loads(done.stdout)
    except (ValueError, EOFError, TypeError):
        raise UnusableInput(path, "the snapshot reader's output is incomplete") from None
    if not isinstance(columns, dict):
        raise UnusableInput(path, "the snapshot reader's output is incomplete")
    return cast(dict[str, object], columns)


def _frame(columns: object, schema: Schema) -> pl.DataFrame:
    data = cast(dict[str, list[object]], columns)
    return pl.DataFrame({k: data[k] for k in schema if k in data}, schema={k: schema[k] for k in schema if k in data},
                        strict=False)


def _snapshot(path: str, size: int, columns: dict[str, object]) -> Snapshot:
    segments = _frame(columns["segments"], SEGMENT_SCHEMA)
    segments = segments.with_row_index("segment").with_columns(pl.col("segment").cast(pl.Int64)).select(
        list(SEGMENT_SCHEMA))
    strings = cast(list[str], columns["strings"])
    stacks = cast(list[tuple[int, ...]], columns["stacks"])
    rows = [(s, d // 3, strings[row[d]], row[d + 1], strings[row[d + 2]])
            for s, row in enumerate(stacks) for d in range(0, len(row), 3)]
    frames = pl.DataFrame(rows, schema=FRAME_SCHEMA, orient="row")
    settings = cast(dict[str, str | int | float | bool | None], columns["settings"])
    return Snapshot(
        path=path,
        sha256=str(columns["sha256"]),
        size_bytes=size,
        segments=segments,
        blocks=_frame(columns["blocks"], BLOCK_SCHEMA),
        entries=_frame(columns["entries"], ENTRY_SCHEMA),
        frames=frames,
        stack_frames=tuple(cast(list[int], columns["stack_totals"])),
        settings=settings,
        keys=tuple(cast(list[str], columns["keys"])),
        devices=int(cast(int, columns["devices"])),
    )
