"""NCCL's calls in words: what each call does, the thread NCCL ran it on, and what the application
reported about it. Worded once here; the answer (:mod:`nsysaudit.reports.answer`) and the comparison
(:mod:`nsysaudit.reports.compare`) use these sentences."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nsysaudit import words
from nsysaudit.core.codes import display_name
from nsysaudit.core.text import size_word
from nsysaudit.reports.documents import ArmLibraryCall, Child, Enclosing, Finding, HelperThread, LibraryFailure

# What an NCCL API call does, as a user reads it (NCCL's API, src/nccl.h.in).
OPERATIONS = {
    **dict.fromkeys(("ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitRankScalable", "ncclCommInitAll"),
                    "NCCL communicator initialization"),
    "ncclCommSplit": "NCCL communicator split",
    "ncclCommShrink": "NCCL communicator shrink",
    "ncclCommGrow": "NCCL communicator grow",
    "ncclCommFinalize": "NCCL communicator finalization",
    "ncclCommDestroy": "NCCL communicator destruction",
    "ncclCommAbort": "NCCL communicator abort",
    "ncclAllReduce": "NCCL all-reduce collective",
    "ncclAllGather": "NCCL all-gather collective",
    "ncclReduceScatter": "NCCL reduce-scatter collective",
    "ncclBroadcast": "NCCL broadcast collective",
    "ncclReduce": "NCCL reduce collective",
    "ncclAlltoAll": "NCCL all-to-all collective",
    "ncclGather": "NCCL gather collective",
    "ncclScatter": "NCCL scatter collective",
    "ncclSend": "NCCL point-to-point send",
    "ncclRecv": "NCCL point-to-point receive",
    "ncclGroupStart": "NCCL group start",
    "ncclGroupEnd": "NCCL group launch",
    "ncclMemAlloc": "NCCL memory allocation",
    "ncclCommRegister": "NCCL buffer registration",
}


def operation(api: str | None, library: str | None) -> str | None:
    """What the NCCL call ``api`` does ("NCCL communicator initialization"); None for another library's
    call or an NCCL call not listed."""
    return OPERATIONS.get(api or "") if library == "NCCL" else None


def call_words(enc: Enclosing) -> str:
    """The enclosing call as a user reads it: ``ncclCommInitRankConfig (NCCL communicator
    initialization)``, or its name alone."""
    what = operation(enc["api"], enc["library"])
    return f"{enc['api']} ({what})" if what else enc["api"]


def helper_words(helper: HelperThread) -> str:
    """Why a call on another thread is inside the NCCL call: "the call ran on tid 812, and all 18 CUDA
    API calls of tid 830 lie inside it (NCCL runs a communicator's initialization on a thread it starts)"."""
    return words.nccl_helper_thread(helper["calling_tid"], helper["calls"], helper["tid"])


def mapped_words(enc: Enclosing) -> str | None:
    """The mappings nested before the failure: "2 mapping(s) of 2,097,152 + 2,097,152 B (cuMemSetAccess's
    memory events)"; None where there is none."""
    mapped = enc.get("mapped_before")
    if mapped is None or not mapped["count"]:
        return None
    each = " + ".join(f"{b:,}" for b in mapped["bytes_each"] if b is not None)
    return words.nccl_mapped(mapped["count"], each)


def reported_words(failure: LibraryFailure, finding: Finding) -> str:
    """What the application's telemetry recorded of NCCL's error, tied to the failed call, and
    whether the trace confirms an out-of-memory."""
    said = ", ".join(f'"{s}"' if " " in s else s for s in failure["statuses"])
    gap = None
    if failure["trace_ns"] is not None and finding["start_ns"] is not None:
        gap = (failure["trace_ns"] - finding["start_ns"]) / 1e6
    text = words.nccl_error_line(failure["line"], failure["event"], gap if gap is not None and gap >= 0 else None, said)
    if failure.get("trace_confirms_out_of_memory"):
        code = finding["return_name"] or "unknown code"
        return text + words.nccl_out_of_memory_confirmed(finding["display_api"] or finding["api"],
                                                         finding["return_code"], code)
    return text + words.NCCL_OUT_OF_MEMORY_NOT_SHOWN


def reported(failures: Sequence[LibraryFailure], findings: Sequence[Finding]) -> Mapping[int, str]:
    """Per finding index, what NCCL error line of the telemetry is tied to it (:func:`reported_words`)."""
    out: dict[int, str] = {}
    for failure in failures:
        i = failure.get("finding")
        if failure.get("library") == "NCCL" and i is not None and i < len(findings) and i not in out:
            out[i] = reported_words(failure, findings[i])
    return out


ALLOCATED = words.NCCL_ALLOCATED  # marks :func:`allocations_words`' sentence


def allocations_words(arm: str, lc: ArmLibraryCall) -> str | None:
    """An NCCL call's allocations in one arm: "release: ncclCommInitRankConfig (NCCL communicator
    initialization) allocated 406,847,488 B of device memory (388.0 MiB, from the memory events of the
    calls inside it) in 195 cuMemCreate call(s), all succeeded; and 1,179,652 B of pinned host memory in
    4 cudaHostAlloc call(s)"; None for another library's call or one with no allocation."""
    what = operation(lc["api"], lc["library"])
    allocs = lc["allocation_calls"]
    if what is None or not allocs:
        return None
    device = [c for c in allocs if not _host(c["api"])]
    host = [c for c in allocs if _host(c["api"])]
    # Device bytes: every memory event of a call inside it but host allocations' (a cuMemCreate's
    # memory has its event at the cuMemSetAccess that maps it).
    device_bytes = sum(n["bytes"] or 0 for n in lc["nested_by_api"] if n["bytes"] is not None and not _host(n["api"]))
    failed = [c for c in allocs if c["return_code"] != 0]
    returned = ", ".join(f"{c['display_api'] or c['api']} returned {c['return_code']}" for c in failed)
    outcome = f"{len(failed)} failed ({returned})" if failed else "all succeeded"
    text = words.nccl_allocated(arm, lc["api"], what, device_bytes, size_word(device_bytes), len(device),
                                _apis(device), outcome)
    if host:
        host_bytes = sum(c["bytes"] or 0 for c in host if c["bytes"] is not None)
        text += words.nccl_pinned(host_bytes, len(host), _apis(host))
    return text


def _host(api: str | None) -> bool:
    """Whether ``api`` allocates pinned host memory (cudaHostAlloc, cudaMallocHost, cuMemHostAlloc ...)."""
    name = display_name(api) if api is not None else ""
    return name.startswith(("cudaHostAlloc", "cudaMallocHost", "cuMemHostAlloc", "cuMemAllocHost"))


def _apis(calls: Sequence[Child]) -> str:
    return "/".join(sorted({c["display_api"] or c["api"] or "unknown" for c in calls}))
