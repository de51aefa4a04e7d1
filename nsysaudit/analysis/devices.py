"""Device and rank truth: which GPU each traced process used, each device's totals, and each
process's rank where a row of the evidence states it.

**Devices.** A process used a device when the export ties it to one: its memory events
(``CUDA_GPU_MEMORY_USAGE_EVENTS.deviceId``) or a CUDA context it created
(``TARGET_INFO_CUDA_CONTEXT_INFO``). Both ids are ``TARGET_INFO_GPU.id`` (see
:mod:`nsysaudit.read.devices`), so a device's name, bus location and total memory are joined on
``(vm, id)``; ``cuda_device`` is the process's own CUDA ordinal for it (``TARGET_INFO_CUDA_DEVICE``,
nsys 2025.x), unknown without that table.

**Ranks.** Never guessed, and never taken from a report's file name. A process's rank is known only
where a row states it:

1. the environment nsys recorded for the command it launched (``META_DATA_CAPTURE``
   ``PROCESS_0:ENVIRONMENT_VARIABLE``): ``RANK`` (torch.distributed, torchrun), ``OMPI_COMM_WORLD_RANK``
   (Open MPI), ``PMI_RANK`` (MPICH, Intel MPI, Cray MPICH), ``PMIX_RANK``, ``SLURM_PROCID`` (srun),
   ``MV2_COMM_WORLD_RANK`` (MVAPICH2); or its recorded command line (``PROCESS_0:ARGUMENT_n``):
   ``--rank N`` / ``--rank=N``, or ``env RANK=N ...``. These describe the launched command only,
   so they are the rank of the one traced process that is that command: the process whose pid
   ``PROCESS_0:PID`` names, or else the only process of the report whose name is the command's
   (basename). A report of several processes with that name (or none) has no rank for any of them.
2. the application's own telemetry (``--telemetry``): a line with an integer ``rank`` field and the
   ``pid`` of a traced process (the application's claim, and said so).

Sources that disagree leave the rank unknown, with both claims named. nsys records no environment
and no command line for the processes the launched command starts (``torchrun``'s workers, a
``bash -c`` job's children): their rank is unknown unless their telemetry states it. ``local_rank``
(``LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_RANK``, ``MPI_LOCALRANKID``, ``SLURM_LOCALID``,
``--local_rank``) and ``world_size`` (``WORLD_SIZE``, ``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``,
``SLURM_NTASKS``) follow the same rules.
"""

# No `from __future__ import annotations` here: typing would compile each TypedDict's string
# annotations into ForwardRefs at import, a small export's start-up (docs/performance.md).
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from nsysaudit.analysis.ledger import Device
from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.ids import pid_bits, vm_of
from nsysaudit.core.reasons import Reason
from nsysaudit.read.devices import DeviceTables, Launch
from nsysaudit.read.telemetry import TelemetryLog
from nsysaudit.words import say, warned

RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK")
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                        "MV2_COMM_WORLD_LOCAL_RANK")
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "MV2_COMM_WORLD_SIZE")
RANK_OPTIONS = ("--rank",)
LOCAL_RANK_OPTIONS = ("--local_rank", "--local-rank")
TELEMETRY_FIELDS = {"rank": "rank", "local_rank": "local_rank", "world_size": "world_size"}
_ASSIGNMENT = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*=")
_INT = re.compile(r"\A(0|[1-9][0-9]{0,8})\Z")


# --- the devices, processes and launched commands, as the documents hold them -------------------
# (named in nsysaudit.reports.documents)


class DeviceEvidence(TypedDict):
    """Why a process is said to have used a device: the tables that tie it there (docs/multigpu.md)."""

    vm: int | None
    device_id: int | None
    cuda_device: int | None
    sources: list[str]
    memory_events: int


class TargetDevice(TypedDict):
    """A GPU of the target (TARGET_INFO_GPU, or a device id the events name without a row there):
    its identity, total, who used it, and the ledger's totals on it."""

    vm: int | None
    device_id: int | None
    cuda_device: int | None
    name: str | None
    bus_location: str | None
    uuid: str | None
    total_bytes: int | None
    in_target_info: bool
    processes: list[int]
    global_pids: list[int]
    ranks: list[int]
    allocated_bytes: int | None
    peak_device_resident_live_bytes: int | None
    device_resident_live_bytes_at_end: int | None


class RankClaim(TypedDict):
    value: int
    source: str


class LaunchedCommand(TypedDict):
    """A command nsys launched (META_DATA_CAPTURE ``PROCESS_<index>``), as recorded, and which traced
    process it is (``process_rule`` says how that was decided, or why not)."""

    index: int
    command: str | None
    arguments: list[str]
    environment_recorded: bool
    environment_variables: int
    rank_claims: list[RankClaim]
    cuda_visible_devices: str | None
    pid: int | None
    global_pid: int | None
    process_rule: str


class TracedProcess(TypedDict):
    """A traced process as the analysis lists it (PROCESSES: ``pid, globalPid, name``)."""

    pid: int | None
    global_pid: int | None
    name: str | None


class Placement(TypedDict):
    """The keys a traced process's ``processes[]`` entry (:class:`Process`) gains here: the devices
    it used, whether it is the command nsys launched, its rank."""

    devices: list[int | None]
    device_evidence: list[DeviceEvidence]
    launched: bool | None
    rank: int | None
    rank_source: str | None
    rank_unknown: str | None
    local_rank: int | None
    world_size: int | None
    cuda_visible_devices: str | None


class Process(TracedProcess, Placement):
    """A traced process, the devices it used and its rank where a row of the evidence states it
    (``rank_unknown`` says why not; docs/multigpu.md)."""


@dataclass(frozen=True)
class Claim:
    """One row's statement of a value (a rank, a local rank, a world size) and where it is."""

    value: int | None  # None: a value stated beside others that is not a number (they disagree)
    source: str


@dataclass(frozen=True)
class DeviceTruth:
    """Devices and ranks of one export (see the module docstring).

    ``devices``: the JSON ``devices`` entries; ``processes``: per global pid the keys each
    ``processes[]`` entry gains; ``launches``: the JSON ``launches`` entries."""

    devices: Sequence[TargetDevice]
    processes: Mapping[int, Placement]
    launches: Sequence[LaunchedCommand]
    several_devices: bool = False
    ranks_known: bool = False
    _by_pid: dict[int, int] = field(default_factory=dict)

    def of(self, gpid: int | None) -> Placement:
        """The device and rank keys of process ``gpid`` (every value unknown for an unknown process)."""
        return self.processes.get(gpid, _UNKNOWN) if gpid is not None else _UNKNOWN

    def of_pid(self, pid: int | None) -> Placement:
        return self.of(self._by_pid.get(pid)) if pid is not None else _UNKNOWN

    def device(self, vm: int | None, device_id: int | None) -> TargetDevice | None:
        return next((d for d in self.devices if d["vm"] == vm and d["device_id"] == device_id), None)

    @property
    def names_devices(self) -> bool:
        """Whether reports for people name devices and ranks: the export has several devices or a
        process's rank is known (a single-device export without ranks reads as it always did)."""
        return self.several_devices or self.ranks_known


_UNKNOWN: Placement = {
    "devices": [],
    "device_evidence": [],
    "launched": None,
    "rank": None,
    "rank_source": None,
    "rank_unknown": say(Reason.of("process_not_in_processes")),
    "local_rank": None,
    "world_size": None,
    "cuda_visible_devices": None,
}


def program(launch: Launch) -> tuple[str | None, tuple[str, ...], dict[str, str]]:
    """The program a launched command ran (basename), its arguments, and the environment
    assignments given before it by ``env NAME=value ...``."""
    if launch.command is None:
        return None, (), {}
    name = posixpath.basename(launch.command)
    args = launch.arguments
    assigned: dict[str, str] = {}
    if name == "env":
        rest = list(args)
        while rest and _ASSIGNMENT.match(rest[0]):
            key, _, value = rest.pop(0).partition("=")
            assigned[key] = value
        if not rest or rest[0].startswith("-"):
            return None, (), assigned
        return posixpath.basename(rest[0]), tuple(rest[1:]), assigned
    return name, args, assigned


def _options(args: Sequence[str], options: Sequence[str]) -> list[tuple[str, str]]:
    """Every ``--opt N`` / ``--opt=N`` of ``args`` among ``options``: (as written, value)."""
    found = []
    for i, arg in enumerate(args):
        for opt in options:
            if arg == opt and i + 1 < len(args):
                found.append((f"{opt} {args[i + 1]}", args[i + 1]))
            elif arg.startswith(opt + "="):
                found.append((arg, arg[len(opt) + 1:]))
    return found


def _launch_claims(launch: Launch) -> dict[str, list[Claim]]:
    """What the launched command's recorded environment and command line state about its rank."""
    name, args, assigned = program(launch)
    out: dict[str, list[Claim]] = {"rank": [], "local_rank": [], "world_size": []}
    where = f"META_DATA_CAPTURE PROCESS_{launch.index}"
    for key, names in (("rank", RANK_VARIABLES), ("local_rank", LOCAL_RANK_VARIABLES),
                       ("world_size", WORLD_SIZE_VARIABLES)):
        for variable in names:
            value = assigned.get(variable)
            if value is not None and _INT.match(value):
                out[key].append(Claim(int(value), f"{where}:COMMAND env {variable}={value}"))
                continue
            # Every row naming the variable states its value: rows that disagree (RANK="1" and RANK="0",
            # or a value that is no rank) leave it unknown, never the last row's.
            out[key] += _claims(
                [(v, f'{where}:ENVIRONMENT_VARIABLE {variable}="{v}"') for v in launch.values(variable)])
    for key, options in (("rank", RANK_OPTIONS), ("local_rank", LOCAL_RANK_OPTIONS)):
        out[key] += _claims([(value, f"{where} command line: {name} ... {written}")
                             for written, value in _options(args, options)])
    return out


def _claims(stated: Sequence[tuple[str, str]]) -> list[Claim]:
    """The claims of values as written (value, where): one per integer; a value that is not one is
    no claim, unless others are stated beside it (then it is a claim of an unknown value: they
    disagree)."""
    if len({value for value, _ in stated}) == 1:
        return [Claim(int(v), source) for v, source in stated if _INT.match(v)][:1]
    return [Claim(int(v) if _INT.match(v) else None, source) for v, source in stated]


def _telemetry_claims(telemetry: TelemetryLog | None, pids: set[int]) -> dict[int, dict[str, list[Claim]]]:
    """Per traced pid, what its telemetry lines state (the first line per distinct value)."""
    out: dict[int, dict[str, list[Claim]]] = {}
    if telemetry is None:
        return out
    for line, event, pid, fields in telemetry.with_fields(list(TELEMETRY_FIELDS.values())):
        if pid is None or pid not in pids:
            continue
        for key, name in TELEMETRY_FIELDS.items():
            value = fields.get(name)
            if type(value) is not int or value < 0:
                continue
            claims = out.setdefault(pid, {}).setdefault(key, [])
            if all(c.value != value for c in claims):
                claims.append(Claim(value, say(Reason.of("telemetry_rank_claim", line=line, event=event,
                                                         name=name, value=value))))
    return out


def _decide(claims: Sequence[Claim]) -> tuple[int | None, str | None, str | None]:
    """(value, sources, why unknown) from the claims of one value."""
    if not claims:
        return None, None, None
    values = {c.value for c in claims}
    if len(values) > 1 or None in values:
        return None, None, "the evidence disagrees: " + "; ".join(c.source for c in claims)
    return values.pop(), "; ".join(c.source for c in claims), None


def _launched(launch: Launch, processes: Sequence[TracedProcess]) -> tuple[int | None, str]:
    """The global pid of the traced process that is ``launch``, or None, and how it was decided."""
    if launch.pid is not None:
        hits = [p["global_pid"] for p in processes if p["pid"] == launch.pid]
        if len(hits) == 1:
            return hits[0], f"PROCESS_{launch.index}:PID is {launch.pid}"
    name, _, _ = program(launch)
    if name is None:
        return None, say(Reason.of("launched_program_unknown", index=launch.index, command=launch.command))
    same = [p["global_pid"] for p in processes if p["name"] is not None and posixpath.basename(p["name"]) == name]
    if len(same) == 1:
        return same[0], say(Reason.of("launched_by_name", name=name))
    return None, say(Reason.of("launched_name_ambiguous", processes=len(same), name=name, index=launch.index,
                               pid_recorded=launch.pid is not None))


def launch_warnings(evidence: DeviceTables | None, processes: Iterable[TracedProcess]) -> list[ReportWarning]:
    """A ``conflicting_rows`` warning where several launched commands are each the same traced process
    (by its pid or its name): which one it is, is unknown, so none is given to it."""
    traced = list(processes)
    matched = [(launch.index, _launched(launch, traced)[0]) for launch in (evidence or DeviceTables()).launches]
    shared: dict[int, list[int]] = {}
    for index, gpid in matched:
        if gpid is not None:
            shared.setdefault(gpid, []).append(index)
    both = {g: indexes for g, indexes in shared.items() if len(indexes) > 1}
    if not both:
        return []
    shown = "; ".join(f"pid {pid_bits(g)}: " + ", ".join(f"PROCESS_{i}" for i in ix) for g, ix in sorted(both.items()))
    return [warned(Reason.of("launched_command_ambiguous", shown=shown), len(both), kind="conflicting_rows")]


def device_truth(
    evidence: DeviceTables | None,
    processes: Iterable[TracedProcess],
    ledger_devices: Iterable[Device] = (),
    telemetry: TelemetryLog | None = None,
) -> DeviceTruth:
    """Devices and ranks of one export (see the module docstring). ``processes``: the analysis'
    ``processes`` entries (``pid, global_pid, name``); ``ledger_devices``: the ledger summary's
    ``devices`` (per-device allocated bytes, peak, what was held at the end)."""
    evidence = evidence or DeviceTables()
    traced = list(processes)
    # A pid of several traced processes (on several VMs) names none of them: a context or a telemetry
    # line of that pid is given to no process, never to the last one listed.
    gpids_of: dict[int, set[int]] = {}
    for p in traced:
        if p["pid"] is not None and p["global_pid"] is not None:
            gpids_of.setdefault(p["pid"], set()).add(p["global_pid"])
    by_pid = {pid: next(iter(gpids)) for pid, gpids in gpids_of.items() if len(gpids) == 1}
    uses = _device_uses(evidence, traced, by_pid)
    launched, launch_entries = _launches(evidence, traced)
    told = _telemetry_claims(telemetry, set(by_pid))
    out = _process_entries(evidence, traced, uses, launched, launch_entries, told, telemetry is not None)
    devices = _device_entries(evidence, uses, out, ledger_devices)
    return DeviceTruth(
        devices=devices,
        processes=out,
        launches=launch_entries,
        several_devices=len(devices) > 1,
        ranks_known=any(v["rank"] is not None for v in out.values()),
        _by_pid=by_pid,
    )


@dataclass
class _Use:
    """A process's use of one device: the tables that say so, and its memory events there."""

    sources: list[str] = field(default_factory=list)
    events: int = 0


# Per global pid, the devices (vm, device id) it used.
_Uses = dict[int, dict[tuple[int | None, int | None], _Use]]


def _device_uses(evidence: DeviceTables, processes: Sequence[TracedProcess], by_pid: dict[int, int]) -> _Uses:
    """Which device each process used: by its memory events, and by the CUDA contexts it created."""
    uses: _Uses = {p["global_pid"]: {} for p in processes if p["global_pid"] is not None}
    for gpid, device, events in evidence.memory_use.iter_rows():
        if gpid is None:
            continue
        entry = uses.setdefault(gpid, {}).setdefault((vm_of(gpid), device), _Use())
        entry.sources.append("CUDA_GPU_MEMORY_USAGE_EVENTS")
        entry.events += events
    for vm, pid, device, _ in evidence.contexts.iter_rows():
        gpid = by_pid.get(pid) if pid is not None else None
        if gpid is None:
            continue
        vm = vm if vm is not None else vm_of(gpid)
        entry = uses.setdefault(gpid, {}).setdefault((vm, device), _Use())
        if "TARGET_INFO_CUDA_CONTEXT_INFO" not in entry.sources:
            entry.sources.append("TARGET_INFO_CUDA_CONTEXT_INFO")
    return uses


def _launches(
    evidence: DeviceTables, processes: Sequence[TracedProcess]
) -> tuple[dict[int, Launch], list[LaunchedCommand]]:
    """Each command nsys launched, by the global pid of the traced process that is it (where one
    is), and the JSON ``launches`` entries."""
    launched: dict[int, Launch] = {}
    entries: list[LaunchedCommand] = []
    matched = [_launched(launch, processes) for launch in evidence.launches]
    # Two launched commands matched to one traced process: which one it is, is unknown (never the last).
    shared = {g: [ln.index for ln, (g2, _) in zip(evidence.launches, matched, strict=True) if g2 == g]
              for g, _ in matched if g is not None}
    for launch, (gpid, how) in zip(evidence.launches, matched, strict=True):
        if gpid is not None and len(shared[gpid]) > 1:
            how = say(Reason.of("launched_shared", how=how, indexes=shared[gpid], pid=pid_bits(gpid)))
            gpid = None
        claims = _launch_claims(launch)
        if gpid is not None:
            launched[gpid] = launch
        visible = launch.variable("CUDA_VISIBLE_DEVICES")
        entries.append({
            "index": launch.index,
            "command": launch.command,
            "arguments": list(launch.arguments),
            "environment_recorded": launch.environment_rows > 0,
            "environment_variables": launch.environment_rows,
            "rank_claims": [{"value": c.value, "source": c.source} for c in claims["rank"] if c.value is not None],
            "cuda_visible_devices": visible,
            "pid": None if gpid is None else pid_bits(gpid),
            "global_pid": gpid,
            "process_rule": how,
        })
    return launched, entries


def _process_entries(
    evidence: DeviceTables,
    processes: Sequence[TracedProcess],
    uses: _Uses,
    launched: dict[int, Launch],
    launch_entries: Sequence[LaunchedCommand],
    told: dict[int, dict[str, list[Claim]]],
    has_telemetry: bool,
) -> dict[int, Placement]:
    """Per global pid, the keys its ``processes[]`` entry gains: its devices, rank and launch."""
    ordinals: dict[tuple[int | None, int | None], int | None] = {
        (pid, device): cuda for pid, device, cuda in evidence.cuda_devices.iter_rows()}
    out: dict[int, Placement] = {}
    for p in processes:
        gpid, pid = p["global_pid"], p["pid"]
        if gpid is None:
            continue
        own: Launch | None = launched.get(gpid)
        mine = _launch_claims(own) if own is not None else {"rank": [], "local_rank": [], "world_size": []}
        said = told.get(pid, {}) if pid is not None else {}
        values = {key: _decide([*mine[key], *said.get(key, [])]) for key in ("rank", "local_rank", "world_size")}
        rank, source, why = values["rank"]
        if rank is None and why is None:
            why = _why_no_rank(own, evidence.launches, launch_entries, has_telemetry)
        identified = all(e["global_pid"] is not None for e in launch_entries)
        used = sorted(uses.get(gpid, {}).items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0,
                                                                   kv[0][1] is None, kv[0][1] or 0))
        out[gpid] = {
            "devices": [device for (_, device), _ in used],
            "device_evidence": [
                {"vm": vm, "device_id": device, "cuda_device": ordinals.get((pid, device)),
                 "sources": entry.sources, "memory_events": entry.events}
                for (vm, device), entry in used
            ],
            # Whether it is the command nsys launched: unknown where a launched command's process is not known.
            "launched": True if own is not None else (False if launch_entries and identified else None),
            "rank": rank,
            "rank_source": source,
            "rank_unknown": why,
            "local_rank": values["local_rank"][0],
            "world_size": values["world_size"][0],
            "cuda_visible_devices": own.variable("CUDA_VISIBLE_DEVICES") if own is not None else None,
        }
    return out


def _device_entries(
    evidence: DeviceTables,
    uses: _Uses,
    processes: Mapping[int, Placement],
    ledger_devices: Iterable[Device],
) -> list[TargetDevice]:
    """The JSON ``devices`` entries: every device the export names or a process used, in (vm, id)
    order, with who used it, their ranks, and what the ledger says it held."""
    gpus = evidence.gpus.to_dicts()
    ledger = {(d["vm"], d["device_id"]): d for d in ledger_devices}
    seen = {(vm, device) for per in uses.values() for vm, device in per}
    known: set[tuple[int | None, int | None]] = {(g["vm"], g["device_id"]) for g in gpus}
    devices: list[TargetDevice] = []
    for vm, device in sorted(known | seen, key=lambda k: (k[0] is None, k[0] or 0, k[1] is None, k[1] or 0)):
        g = next((g for g in gpus if g["vm"] == vm and g["device_id"] == device), None)
        users = sorted(gp for gp, per in uses.items() if (vm, device) in per)
        held = ledger.get((vm, device))
        peak = held.get("peak_device_resident_live_bytes") if held is not None else None
        at_end = held.get("device_resident_live_bytes_at_end") if held is not None else None
        devices.append({
            "vm": vm,
            "device_id": device,
            "cuda_device": g["cuda_device"] if g else None,
            "name": g["name"] if g else None,
            "bus_location": g["bus_location"] if g else None,
            "uuid": g["uuid"] if g else None,
            "total_bytes": g["total_bytes"] if g else None,
            "in_target_info": g is not None,
            "processes": [pid_bits(gp) for gp in users],
            "global_pids": users,
            "ranks": sorted({rank for gp in users if gp in processes and (rank := processes[gp]["rank"]) is not None}),
            "allocated_bytes": held["allocated_bytes"] if held is not None else None,
            "peak_device_resident_live_bytes": peak,
            "device_resident_live_bytes_at_end": at_end,
        })
    return devices


def _why_no_rank(
    launch: Launch | None, launches: Sequence[Launch], entries: Sequence[LaunchedCommand], telemetry: bool,
) -> str:
    """Why a process's rank is unknown: what the launched command's rows say, and which of them it is."""
    if launch is not None:
        return say(Reason.of("rank_not_stated", index=launch.index, environment_rows=launch.environment_rows,
                             rank_variables=RANK_VARIABLES, telemetry=telemetry))
    if not launches:
        return say(Reason.of("no_launched_command", telemetry=telemetry))
    unknown = [(one, e) for one, e in zip(launches, entries, strict=True) if e["global_pid"] is None]
    if not unknown:
        return say(Reason.of("not_the_launched_command", pids=[e["pid"] for e in entries], telemetry=telemetry))
    one, e = unknown[0]
    if e["rank_claims"]:
        return say(Reason.of("launched_rank_not_placed", sources=[c["source"] for c in e["rank_claims"]],
                             process_rule=e["process_rule"], telemetry=telemetry))
    return say(Reason.of("launched_process_unknown", index=one.index, environment_rows=one.environment_rows,
                         rank_variables=RANK_VARIABLES, process_rule=e["process_rule"], telemetry=telemetry))
