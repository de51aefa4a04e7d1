"""The device-memory ledger (the documents' ``memory`` key, docs/ledger.md) outlined once: its lead,
each device with its processes, the mechanisms, pools and the ledger's notes, a table per device of
the ledger at each moment it is read at, what the table cannot say, the holders, what is not counted.
The terminal and report.md lay the same section out (:mod:`nsysaudit.render.outline`)."""

from __future__ import annotations

from nsysaudit import words
from nsysaudit.analysis.ledger import DeviceProcess, Pool
from nsysaudit.core.codes import display_name
from nsysaudit.core.text import byte_size
from nsysaudit.render.outline import Cell, Column, Entry, Phrase, Section, TableOutline
from nsysaudit.reports.documents import Memory
from nsysaudit.reports.statements import (
    CALL_WORDS,
    MECHANISM_WORDS,
    free_calls_without_event_words,
    freed_never_allocated_words,
    virtual_memory_words,
)

COLUMNS = (Column(words.MEMORY_AT_COLUMN), Column(("pid",), numeric=True),
           *(Column(heading, numeric=True) for heading in words.MEMORY_BYTES_COLUMNS))


def _bytes(value: int | None) -> str:
    return "unknown" if value is None else byte_size(value)


def _lead(memory: Memory) -> Phrase:
    if memory["ledger"] and "allocation_events" in memory and "deallocation_events" in memory:
        return Phrase(words.MEMORY_LEDGER_FROM.format(allocations=f"{memory['allocation_events']:,}",
                                                      deallocations=f"{memory['deallocation_events']:,}"))
    return Phrase(words.MEMORY_NO_LEDGER.format(why=memory["why_no_ledger"] or "unknown"))


def _devices(memory: Memory) -> list[Entry]:
    """Each device's ledger, and each process's allocations by call under it."""
    if "devices" not in memory:
        return []
    entries = []
    for dev in memory["devices"]:
        text = words.MEMORY_DEVICE.format(device=dev["device_id"], name=dev["name"] or "unknown",
                                          total=_bytes(dev["total_bytes"]), allocated=f"{dev['allocated_bytes']:,}",
                                          events=f"{dev['allocation_events']:,}")
        if "freed_bytes" in dev and "peak_device_resident_live_bytes" in dev and "peak_at_ns" in dev:
            text += words.MEMORY_DEVICE_FREED.format(freed=f"{dev['freed_bytes']:,}",
                                                     peak=f"{dev['peak_device_resident_live_bytes']:,}",
                                                     at=f"{dev['peak_at_ns']:,}")
        under = tuple(_process(proc) for proc in dev["processes"]) if "processes" in dev else ()
        entries.append(Entry((Phrase(text),), under=under))
    return entries


def _process(proc: DeviceProcess) -> Entry:
    """A process's allocations on a device, by the call that made them."""
    calls = "; ".join(f"{display_name(c['api']) if c['api'] else CALL_WORDS[c['call']]} "
                      f"{c['events']:,} x {c['kind']} "
                      f"{c['bytes']:,} B" for c in proc["allocations_by_call"])
    return Entry((Phrase(words.MEMORY_PROCESS.format(pid=proc["pid"], live=f"{proc['live_bytes_at_end']:,}",
                                                     calls=calls)),))


def _pools(memory: Memory) -> list[Pool]:
    """The CUDA memory pools the ledger lists (none where it lists no pool key)."""
    if "pools" not in memory:
        return []
    return memory["pools"]


def _notes(memory: Memory) -> list[Entry]:
    """The ledger by mechanism, the CUDA memory pools, and the ledger's notes (the last two warnings)."""
    entries = []
    if "mechanisms" in memory and (mechanisms := memory["mechanisms"]):
        said = "; ".join(words.MEMORY_MECHANISM.format(
            mechanism=MECHANISM_WORDS[m], allocations=f"{v['allocation_events']:,}",
            allocated=f"{v['allocated_bytes']:,}", deallocations=f"{v['deallocation_events']:,}")
            for m, v in mechanisms.items())
        entries.append(Entry((Phrase(said),), label=words.MEMORY_BY_MECHANISM))
    for pool in _pools(memory):
        address = "unknown" if pool["address"] is None else f"{pool['address']:#x}"
        entries.append(Entry((Phrase(words.MEMORY_POOL.format(
            pid=pool["pid"], address=address, device=pool["device_id"], size=f"{pool['size_at_end_bytes']:,}",
            peak=f"{pool['peak_size_bytes']:,}", used=f"{pool['utilized_at_end_bytes']:,}", trims=pool["trims"],
            destroyed=words.MEMORY_POOL_DESTROYED if pool["destroyed"] else "")),)))
    vmm = virtual_memory_words(memory["virtual_memory"]) if "virtual_memory" in memory else None
    gaps = free_calls_without_event_words(memory["free_calls_without_event"]) \
        if "free_calls_without_event" in memory else None
    unseen = freed_never_allocated_words(memory["freed_never_allocated"]) \
        if "freed_never_allocated" in memory else None
    entries += [Entry((Phrase(vmm),))] if vmm is not None else []
    entries += [Entry((Phrase(s),), severity="warning") for s in (gaps, unseen) if s is not None]
    return entries


def _tables(memory: Memory) -> list[TableOutline]:
    """A table per device: the ledger at each finding, library call of interest, censored call and
    telemetry line (the moment, its process, what it and every process held, the bound on what was free)."""
    tables = []
    for dev_id in dict.fromkeys(d["device_id"] for p in memory["at"] for d in p["devices"]):
        rows = [(p, d) for p in memory["at"] for d in p["devices"] if d["device_id"] == dev_id]
        total = rows[0][1]["total_bytes"]
        title = Phrase(words.MEMORY_TABLE.format(device=dev_id, total=_bytes(total)))
        cells = tuple(
            (Cell(p["label"], "unknown" if p["t_ns"] is None else f"{p['t_ns']:,}", data=True),
             Cell("unknown" if p["pid"] is None else str(p["pid"])),
             *(_bytes_cell(v) for v in (d["process_live_bytes"], d["device_resident_live_bytes"])),
             _bytes_cell(d["free_at_most_bytes"], strong=True))
            for p, d in rows)
        tables.append(TableOutline(title, COLUMNS, cells))
    return tables


def _bytes_cell(value: int | None, *, strong: bool = False) -> Cell:
    """Exact bytes, and the binary unit as a note (the column's heading says B)."""
    if value is None:
        return Cell("unknown", strong=strong)
    exact, _, unit = byte_size(value).partition(" B (")
    return Cell(exact, f"({unit}" if unit else None, strong=strong)


def _after(memory: Memory) -> list[Entry]:
    """What the tables cannot say (a moment without a traced device, a process without events), and who
    held the memory at each moment other than a finding (a finding's holder is said at the finding)."""
    entries = []
    for p in memory["at"]:
        if not p["devices"]:
            why = words.MEMORY_NO_DEVICE
            if "unknown" in p:
                why = p["unknown"]
            entries.append(Entry((Phrase(words.MEMORY_AT.format(label=p["label"], what=why)),)))
        elif not any(d["process_has_events"] for d in p["devices"]):
            entries.append(Entry((Phrase(words.MEMORY_AT.format(
                label=p["label"], what=words.MEMORY_NO_EVENTS.format(pid=p["pid"]))),)))
    entries += [Entry((Phrase(words.MEMORY_AT.format(label="unknown" if p["t_ns"] is None else f"{p['t_ns']:,}",
                                                     what=p["holder"])),))
                for p in memory["at"] if p["holder"] and p["point"] not in ("finding", "telemetry")]
    return entries


def memory_section(memory: Memory) -> Section:
    """The ``memory`` key outlined (see the module docstring)."""
    if not memory["ledger"] and ("devices" not in memory or not memory["devices"]):
        return Section(words.MEMORY_TITLE, lead=_lead(memory), quiet=True)
    not_counted = (Phrase(words.MEMORY_NOT_COUNTED.format(what="; ".join(memory["not_counted"]))),) \
        if memory["at"] else ()
    return Section(words.MEMORY_TITLE, tuple(_devices(memory) + _notes(memory)), lead=_lead(memory),
                   tables=tuple(_tables(memory)), after=tuple(_after(memory)), notes=not_counted)
