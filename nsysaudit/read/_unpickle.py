"""A PyTorch memory snapshot pickle decoded into columns, in a child process of its own (stdlib only).

:mod:`nsysaudit.read.snapshot` runs this file as a script, ``python -I -S _unpickle.py PATH
MAX_BYTES MAX_MEMORY``, never imports it: a pickle is hostile input, and CPython's unpickler can be
made to use memory out of all proportion to the file (a 9-byte pickle whose ``LONG_BINPUT`` names
memo slot 2^27 makes the C unpickler allocate and zero 2 GiB; slot 2^31, 32 GiB). So the unpickling
runs here, under an address-space limit (``RLIMIT_AS``, ``MAX_MEMORY`` bytes) set before the file is
opened, and what comes back is plain columns written with :mod:`marshal` on stdout. A pickle that
asks for more is one line: exit :data:`EXIT_UNUSABLE`, the problem on stderr.

What is refused, and how:

- **code**: the unpickler's ``find_class`` refuses every global (``GLOBAL``, ``STACK_GLOBAL``,
  ``INST``, ``OBJ`` and the extension registry all go through it) and ``persistent_load`` every
  persistent id, so no callable is ever on the stack: ``REDUCE``, ``NEWOBJ`` and ``BUILD`` can then
  only fail (a list is not callable; a list has no ``__dict__``). Out-of-band buffers are not given.
- **size**: a file over ``MAX_BYTES`` is not read; a length the data does not hold is "truncated".
- **shape**: the snapshot is a dict of lists of dicts (``torch.cuda.memory._snapshot``): every value
  this reader uses is checked for its type and range where it is read (integers within 64 bits,
  texts at most :data:`MAX_TEXT` characters), and everything else is walked once, iteratively, to
  check that it is only dicts, lists, tuples, strings, numbers, booleans and None, nested at most
  :data:`MAX_DEPTH` deep (a pickle can build lists a million deep without a single global).
  Shared objects (a pickle's memo) are walked once.

The columns: ``segments``, ``blocks`` and ``entries`` (the history, ``device_traces``), each a dict
of equal-length lists, and the stacks their rows point to (``stacks``: each a tuple of
(file, line, name) string-table indices, the first :data:`MAX_FRAMES` frames, innermost first;
``strings``: the table). ``sha256`` is the digest of the bytes decoded.
"""

from __future__ import annotations

import hashlib
import io
import marshal
import os
import pickle
import stat
import sys

EXIT_UNUSABLE = 3
MAX_DEPTH = 32  # a snapshot nests 7 deep (snapshot, segments, segment, blocks, block, frames, frame)
MAX_FRAMES = 64  # frames kept per stack (innermost first); the count of all of them is kept too
MAX_TEXT = 65536  # characters of one file name, function name or other text
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
SCALARS = (str, int, float, bool, type(None))


class Refused(Exception):
    """The snapshot is not one this reader can use: the message says why, in one line."""


class NoGlobals(pickle.Unpickler):
    """An unpickler that makes only builtin containers and scalars: every global is refused."""

    def find_class(self, module: str, name: str) -> object:
        raise Refused(
            f"it names a Python global ({_short(module)}.{_short(name)}): a memory snapshot holds only dicts, lists, "
            "tuples, strings, numbers, booleans and None, and nsysaudit never loads code from a pickle"
        )

    def persistent_load(self, pid: object) -> object:
        raise Refused("it holds a persistent id, which a memory snapshot never does (nothing is loaded for it)")


def _short(text: str) -> str:
    return text if len(text) <= 60 else f"{text[:60]}... ({len(text):,} characters)"


def _kind(value: object) -> str:
    return {dict: "a dict", list: "a list", tuple: "a tuple", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "None"}.get(type(value), f"a {type(value).__name__}")


class Decoder:
    """The walk over a loaded snapshot: columns out, a :class:`Refused` at the first wrong shape."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self.stacks: dict[tuple[int, ...], int] = {}
        self.stack_of_list: dict[int, int] = {}  # id() of a frames list already read -> its stack
        self.stack_rows: list[tuple[int, ...]] = []
        self.stack_totals: list[int] = []
        self.walked: set[int] = set()  # id() of containers already checked by free_shape
        # id() of texts already checked, and of those in the table: a pickle shares one string object
        # among many frames (the whole snapshot stays alive while it is decoded, so no id is reused)
        self.checked: set[int] = set()
        self.string_of: dict[int, int] = {}

    # --- scalars ------------------------------------------------------------------------------
    def integer(self, value: object, where: str, *, minimum: int = INT64_MIN) -> int:
        if type(value) is not int:
            raise Refused(f"{where} is {_kind(value)}, not an integer")
        if not minimum <= value <= INT64_MAX:
            raise Refused(f"{where} is {value if abs(value) < 10**30 else 'an integer of many digits'}, "
                          f"outside {'0' if minimum == 0 else '-2^63'} .. 2^63-1")
        return value

    def optional_integer(
        self, d: dict[object, object], key: str, where: str, *, minimum: int = INT64_MIN
    ) -> int | None:
        value = d.get(key)
        if value is None:
            return None
        if type(value) is int and minimum <= value <= INT64_MAX:
            return value
        return self.integer(value, f"{where}.{key}", minimum=minimum)  # raises

    def text(self, value: object, where: str) -> str:
        if type(value) is not str:
            raise Refused(f"{where} is {_kind(value)}, not a string")
        if id(value) in self.checked:
            return value
        if len(value) > MAX_TEXT:
            raise Refused(f"{where} is a text of {len(value):,} characters (at most {MAX_TEXT:,} are read)")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Refused(f"{where} holds a lone surrogate (not text any report can write)") from None
        self.checked.add(id(value))
        return value

    def string_id(self, value: object, where: str) -> int:
        found = self.string_of.get(id(value))
        if found is not None:
            return found
        text = self.text(value, where)
        found = self.strings.get(text)
        if found is None:
            found = self.strings[text] = len(self.strings)
        self.string_of[id(value)] = found
        return found

    # --- containers ---------------------------------------------------------------------------
    def mapping(self, value: object, where: str) -> dict[object, object]:
        if type(value) is not dict:
            raise Refused(f"{where} is {_kind(value)}, not a dict")
        return value

    def sequence(self, value: object, where: str) -> list[object] | tuple[object, ...]:
        if isinstance(value, list | tuple) and type(value) in (list, tuple):  # no subclass: plain data only
            return value
        raise Refused(f"{where} is {_kind(value)}, not a list")

    def free_shape(self, value: object, where: str, depth: int) -> None:
        """Check a value this reader does not use: plain data only, at most MAX_DEPTH deep (from the
        snapshot's top), every container walked once, without recursion."""
        todo: list[tuple[object, str, int]] = [(value, where, depth)]
        while todo:
            item, at, level = todo.pop()
            kind = type(item)
            if kind in SCALARS:
                if kind is str:
                    self.text(item, at)
                continue
            if kind not in (dict, list, tuple):
                raise Refused(f"{at} is {_kind(item)}: a memory snapshot holds only dicts, lists, tuples, strings, "
                              "numbers, booleans and None")
            if id(item) in self.walked:
                continue
            if level >= MAX_DEPTH:
                raise Refused(f"{at} is nested more than {MAX_DEPTH} levels deep (a snapshot nests 7)")
            self.walked.add(id(item))
            if isinstance(item, dict):
                for k, v in item.items():
                    if type(k) is not str:
                        raise Refused(f"{at} has a key that is {_kind(k)}, not a string")
                    todo.append((v, f"{at}.{_short(k)}", level + 1))
            elif isinstance(item, list | tuple):
                todo.extend((v, f"{at}[{i}]", level + 1) for i, v in enumerate(item))

    def rest(self, d: dict[object, object], used: tuple[str, ...], where: str, depth: int) -> None:
        """The keys of ``d`` this reader does not use, checked by :meth:`free_shape`."""
        for k, v in d.items():
            if type(k) is not str:
                raise Refused(f"{where} has a key that is {_kind(k)}, not a string")
            if k in used:
                continue
            kind = type(v)
            if kind is str:
                if id(v) not in self.checked:
                    self.text(v, f"{where}.{_short(k)}")
            elif kind not in SCALARS:
                self.free_shape(v, f"{where}.{_short(k)}", depth + 1)

    # --- stacks -------------------------------------------------------------------------------
    def stack(self, value: object, where: str, depth: int) -> int:
        """The stack id of a ``frames`` list (-1: none recorded), read once per list object."""
        if value is None:
            return -1
        frames = self.sequence(value, where)
        known = self.stack_of_list.get(id(frames))
        if known is not None:
            return known
        if depth + 2 > MAX_DEPTH:
            raise Refused(f"{where} is nested more than {MAX_DEPTH} levels deep")
        row: list[int] = []
        ids = self.string_of
        for i, frame in enumerate(frames):
            # the usual frame, {filename, line, name} of texts already read: no text checked twice
            if type(frame) is dict and len(frame) == 3:
                filename, line, name = frame.get("filename"), frame.get("line"), frame.get("name")
                file_id, name_id = ids.get(id(filename)), ids.get(id(name))
                if file_id is not None and name_id is not None and type(line) is int and 0 <= line <= INT64_MAX:
                    if i < MAX_FRAMES:
                        row += (file_id, line, name_id)
                    continue
            at = f"{where}[{i}]"
            f = self.mapping(frame, at)
            name, filename = f.get("name"), f.get("filename")
            line = self.integer(f.get("line"), f"{at}.line") if "line" in f else -1
            file_id = self.string_id(filename if filename is not None else "", f"{at}.filename")
            name_id = self.string_id(name if name is not None else "", f"{at}.name")
            self.rest(f, ("name", "filename", "line"), at, depth + 2)
            if i < MAX_FRAMES:
                row += (file_id, line, name_id)
        key = tuple(row)
        found = self.stacks.get(key)
        if found is None or self.stack_totals[found] != len(frames):
            found = len(self.stack_rows)
            self.stacks[key] = found
            self.stack_rows.append(key)
            self.stack_totals.append(len(frames))
        self.stack_of_list[id(frames)] = found
        return found


def _segments(dec: Decoder, value: object) -> tuple[dict[str, list[object]], dict[str, list[object]]]:
    seg_cols: dict[str, list[object]] = {k: [] for k in (
        "device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
        "segment_type", "pool_0", "pool_1", "is_expandable", "stack")}
    block_cols: dict[str, list[object]] = {k: [] for k in (
        "segment", "address", "size", "requested_size", "state", "stack")}
    for i, raw in enumerate(dec.sequence(value, "segments")):
        where = f"segments[{i}]"
        seg = dec.mapping(raw, where)
        for key in ("address", "total_size"):
            if key not in seg:
                raise Refused(f"{where} has no {key!r}")
        seg_cols["device"].append(dec.optional_integer(seg, "device", where))
        seg_cols["address"].append(dec.integer(seg["address"], f"{where}.address", minimum=0))
        seg_cols["total_size"].append(dec.integer(seg["total_size"], f"{where}.total_size", minimum=0))
        for key in ("allocated_size", "active_size", "requested_size", "stream"):
            seg_cols[key].append(dec.optional_integer(seg, key, where, minimum=0 if key != "stream" else INT64_MIN))
        kind = seg.get("segment_type")
        seg_cols["segment_type"].append(None if kind is None else dec.text(kind, f"{where}.segment_type"))
        pool = seg.get("segment_pool_id")
        if pool is None:
            seg_cols["pool_0"].append(None)
            seg_cols["pool_1"].append(None)
        else:
            ids = dec.sequence(pool, f"{where}.segment_pool_id")
            if len(ids) != 2:
                raise Refused(f"{where}.segment_pool_id has {len(ids)} items, not 2")
            seg_cols["pool_0"].append(dec.integer(ids[0], f"{where}.segment_pool_id[0]"))
            seg_cols["pool_1"].append(dec.integer(ids[1], f"{where}.segment_pool_id[1]"))
        expandable = seg.get("is_expandable")
        if expandable is not None and type(expandable) is not bool:
            raise Refused(f"{where}.is_expandable is {_kind(expandable)}, not a boolean")
        seg_cols["is_expandable"].append(expandable)
        seg_cols["stack"].append(dec.stack(seg.get("frames"), f"{where}.frames", 2))
        for j, braw in enumerate(dec.sequence(seg.get("blocks", []), f"{where}.blocks")):
            at = f"{where}.blocks[{j}]"
            block = dec.mapping(braw, at)
            if "size" not in block or "state" not in block:
                raise Refused(f"{at} has no 'size' or no 'state'")
            block_cols["segment"].append(i)
            block_cols["address"].append(dec.optional_integer(block, "address", at, minimum=0))
            block_cols["size"].append(dec.integer(block["size"], f"{at}.size", minimum=0))
            block_cols["requested_size"].append(dec.optional_integer(block, "requested_size", at, minimum=0))
            block_cols["state"].append(dec.text(block["state"], f"{at}.state"))
            block_cols["stack"].append(dec.stack(block.get("frames"), f"{at}.frames", 4))
            dec.rest(block, ("address", "size", "requested_size", "state", "frames"), at, 4)
        dec.rest(seg, (*seg_cols, "segment_pool_id", "frames", "blocks"), where, 2)
    return seg_cols, block_cols


ENTRY_KEYS = ("action", "addr", "size", "stream", "time_us", "device_free", "frames")


def _entries(dec: Decoder, value: object) -> tuple[dict[str, list[object]], int]:
    cols: dict[str, list[object]] = {k: [] for k in (
        "device", "seq", "action", "addr", "size", "stream", "time_us", "device_free", "stack")}
    traces = dec.sequence(value, "device_traces")
    for d, trace in enumerate(traces):
        for i, raw in enumerate(dec.sequence(trace, f"device_traces[{d}]")):
            where = f"device_traces[{d}][{i}]"
            entry = dec.mapping(raw, where)
            if "action" not in entry:
                raise Refused(f"{where} has no 'action'")
            cols["device"].append(d)
            cols["seq"].append(i)
            cols["action"].append(dec.text(entry["action"], f"{where}.action"))
            cols["addr"].append(dec.optional_integer(entry, "addr", where))
            cols["size"].append(dec.optional_integer(entry, "size", where, minimum=0))
            cols["stream"].append(dec.optional_integer(entry, "stream", where))
            cols["time_us"].append(dec.optional_integer(entry, "time_us", where))
            cols["device_free"].append(dec.optional_integer(entry, "device_free", where))
            cols["stack"].append(dec.stack(entry.get("frames"), f"{where}.frames", 3))
            dec.rest(entry, ENTRY_KEYS, where, 3)
    return cols, len(traces)


def _settings(dec: Decoder, value: object) -> dict[str, object]:
    """The allocator's settings: each scalar as recorded, each container only checked."""
    if value is None:
        return {}
    settings = dec.mapping(value, "allocator_settings")
    out: dict[str, object] = {}
    for k, v in settings.items():
        key = dec.text(k, "allocator_settings key")
        if type(v) in SCALARS:
            out[key] = dec.text(v, f"allocator_settings.{_short(key)}") if type(v) is str else v
        else:
            dec.free_shape(v, f"allocator_settings.{_short(key)}", 2)
    return out


def decode(top: object) -> dict[str, object]:
    """The columns of a loaded snapshot (see the module's docstring)."""
    dec = Decoder()
    if type(top) is not dict:
        raise Refused(f"not a PyTorch memory snapshot: the pickle holds {_kind(top)}, not a dict with 'segments'")
    if "segments" not in top:
        keys = ", ".join(repr(_short(k)) if type(k) is str else _kind(k) for k in list(top)[:5]) or "no key"
        raise Refused(f"not a PyTorch memory snapshot: no 'segments' (its keys: {keys})")
    segments, blocks = _segments(dec, top["segments"])
    entries, devices = _entries(dec, top.get("device_traces", []))
    settings = _settings(dec, top.get("allocator_settings"))
    dec.rest(top, ("segments", "device_traces", "allocator_settings"), "snapshot", 0)
    return {
        "keys": [k for k in top if type(k) is str],
        "segments": segments,
        "blocks": blocks,
        "entries": entries,
        "devices": devices,
        "settings": settings,
        "strings": list(dec.strings),
        "stacks": dec.stack_rows,
        "stack_totals": dec.stack_totals,
    }


def read(path: str, max_bytes: int) -> bytes:
    """The file's bytes: a regular file of at most ``max_bytes``, read once."""
    with open(path, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        if info.st_size > max_bytes:
            raise Refused(f"{info.st_size:,} bytes, more than the {max_bytes:,} a snapshot may have here")
        data = handle.read(info.st_size)  # read(n) allocates n bytes first: the size found, not the bound
        grew = handle.read(1)
    if grew or len(data) != info.st_size:
        raise Refused(f"it changed size while it was read ({info.st_size:,} bytes when opened)")
    return data


def load(data: bytes) -> object:
    """The pickle's object, built by :class:`NoGlobals`; every failure a :class:`Refused`."""
    if not data:
        raise Refused("empty file, not a pickle")
    try:
        return NoGlobals(io.BytesIO(data)).load()
    except Refused:
        raise
    except MemoryError:
        raise Refused("unpickling it needs more memory than the snapshot's size allows (a memory bomb, or damage)") \
            from None
    except RecursionError:
        raise Refused("it is nested too deeply to unpickle") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError, IndexError,
            OverflowError, UnicodeDecodeError) as exc:
        said = str(exc).replace("\n", " ")
        raise Refused(f"not a pickle this reader can load ({type(exc).__name__}: {_short(said)})") from None


def main(argv: list[str]) -> int:
    path, max_bytes, max_memory = argv[1], int(argv[2]), int(argv[3])
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))
    except (ImportError, ValueError, OSError):  # no such limit here (not Linux): the size bound still holds
        pass
    try:
        data = read(path, max_bytes)
        digest = hashlib.sha256(data).hexdigest()
        columns = decode(load(data))
        del data
        out = marshal.dumps({"sha256": digest, **columns})
    except Refused as exc:
        sys.stderr.write(str(exc).replace("\n", " ") + "\n")
        return EXIT_UNUSABLE
    except MemoryError:
        sys.stderr.write("reading it needs more memory than the snapshot's size allows (a memory bomb, or damage)\n")
        return EXIT_UNUSABLE
    except OSError as exc:
        sys.stderr.write(f"cannot read: {exc.strerror or exc}\n")
        return EXIT_UNUSABLE
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
