"""Every sentence nsysaudit shows a user, keyed by the fact or reason code it words (issue 35).

The analysis returns facts and reason codes with their values; the documents keep the code and the
one statement made here from it; the outline (render/outline.py) arranges those statements, and the
terminal, Markdown and HTML back-ends only lay them out. Error messages may stay with their errors.

A new finding's words go into the section of its kind below; nowhere else writes a sentence of five or
more words for a user (tests/test_words.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nsysaudit.core.codes import names
from nsysaudit.core.errors import ReportWarning, warning
from nsysaudit.core.reasons import Reason

# --- reasons, warnings and statements of the analysis and the documents (read/, analysis/, reports/) ---
#
# Each template is a function of the values its reason carries (``Reason.values``), named after its
# code; ``TEMPLATES`` keys them by code, and :func:`say` makes the one statement a document keeps.


def say(reason: Reason) -> str:
    """The one statement of ``reason``: its code's template applied to its values."""
    return TEMPLATES[reason.code](**reason.values)


def warned(reason: Reason, count: int, kind: str | None = None) -> ReportWarning:
    """A report's warning of ``count`` rows, worded from ``reason``; its ``kind`` is the reason's code
    unless several reasons share one kind."""
    return warning(kind or reason.code, count, say(reason))


# Thread: a thread whose name the export does not hold (no ThreadNames row) is "name unknown", never
# guessed. ``bracketed``: where the name stands in parentheses after its ids.
def thread_name(name: str | None, *, bracketed: bool = False) -> str:
    """The thread's name as the export holds it, or the words that say it holds none."""
    if name is not None:
        return name
    return "(name unknown)" if bracketed else "name unknown"


def _call(api: str | None, return_code: int) -> str:
    """``cudaMalloc returned 2 (cudaErrorMemoryAllocation)``: a failed call and its code's name."""
    said = names(api, return_code)
    return f"{said['display_api'] or 'an unknown API'} returned {return_code} ({said['return_name'] or 'unknown code'})"


# Verdict reasons (nsysaudit.analysis.verdict): failure_found's findings per kind.
FOUND_WORDS = {
    "nested_alloc_failure": "failed allocation call(s) wholly inside a library call on the same thread",
    "nested_call_failure": "other failed CUDA API call(s) wholly inside a library call on the same thread",
    "captured_event_wait_failure": "failed stream wait(s) on an event, after events were recorded inside "
    "a stream capture of the same process",
}
HELPER_FOUND_WORDS = {
    "nested_alloc_failure": "failed allocation call(s) inside an NCCL call, on a thread NCCL started for it (every "
    "CUDA API call of that thread lies inside the call)",
    "nested_call_failure": "other failed CUDA API call(s) inside an NCCL call, on a thread NCCL started for it (every "
    "CUDA API call of that thread lies inside the call)",
}


def found(kind: str, calls: int) -> str:
    return f"{calls} {FOUND_WORDS[kind]}"


def found_on_helper_thread(kind: str, calls: int) -> str:
    return f"{calls} {HELPER_FOUND_WORDS[kind]}"


# Why a library's status is not ``traced`` (a library source's ``reason``).
def library_refused(said: str) -> str:
    return f"nsys: {said}"


def library_not_requested() -> str:
    return "the capture's CAPTURE_EVENT_TYPE does not request it"


def library_unknown() -> str:
    return "no capture settings say whether it was traced"


def library_domain_unused(library: str) -> str:
    return f"NVTX domain {library}: no range recorded, so whether it was used is unknown"


# What every verdict says besides.
def library_not_traced(library: str, status: str, reason: str | None) -> str:
    return f"{library} was not traced ({status}): {reason}"


def failed_group(group: Mapping[str, Any]) -> str:
    """One group of failed calls outside library calls (a row of ``failed_calls``: api, return_code,
    pid, tid, thread_name, nvtx_range, library_call_unexamined, calls)."""
    where = f" inside NVTX range {group['nvtx_range']}" if group["nvtx_range"] is not None else ""
    if group["library_call_unexamined"]:
        where += " (overlapping a library call the pair limit left unexamined)"
    return (
        f"{group['calls']} {_call(group['api'], group['return_code'])} on pid {group['pid']} tid {group['tid']} "
        f"({thread_name(group['thread_name'])}){where}"
    )


def failed_outside_library_calls(calls: int, groups: int, first: Sequence[Mapping[str, Any]]) -> str:
    more = f"; and {groups - len(first)} more group(s)" if groups > len(first) else ""
    return (
        f"{calls} failed CUDA API call(s) outside library calls, in {groups} group(s) (see failed_calls): "
        + "; ".join(failed_group(g) for g in first)
        + more
    )


def shadowed_tables_read(tables: Sequence[str]) -> str:
    return (
        f"the export holds several versions of {', '.join(tables)} (see warnings): the highest was read, "
        "and which one nsys wrote is unknown"
    )


def nsys_warned(text: str) -> str:
    return f"nsys warned: {text}"


# Gaps that make the verdict inconclusive.
def no_cuda_api_trace() -> str:
    return "the export has no CUDA API trace (no CUPTI_ACTIVITY_KIND_RUNTIME table)"


def empty_cuda_api_table() -> str:
    return "the export's CUDA API table is empty"


def censored_library_calls(censored: int, calls: int, by_reason: Sequence[tuple[str, int]]) -> str:
    detail = ", ".join(f"{n} {reason}" for reason, n in by_reason)
    return (
        f"{censored} of {calls} library call(s) are censored ({detail}): "
        "the trace does not cover them, so a failure inside them cannot be ruled out"
    )


def shadowed_tables_unread(tables: Sequence[str]) -> str:
    return (
        f"several versions of {', '.join(tables)} exist and only one was read: a failure in another cannot "
        "be ruled out"
    )


def failures_where_no_library_traced(failures: int) -> str:
    return (
        f"{failures} allocation or out-of-memory failure(s), and no library API (cuBLAS/cuDNN/NCCL) was traced: "
        "whether any happened inside a library call cannot be told"
    )


def unrecovered_out_of_memory(failures: int, first: Sequence[Mapping[str, Any]]) -> str:
    """Out-of-memory failures outside library calls that nothing after them shows the process survived."""
    shown = [
        f"{_call(f['api'], f['return_code'])} on pid {f['pid']} tid {f['tid']} ({thread_name(f['thread_name'])}) "
        f"at {f['start_ns']:,} ns, correlation {f['correlation_id']}"
        for f in first
    ]
    more = f"; and {failures - len(first)} more" if failures > len(first) else ""
    return (
        f"{failures} out-of-memory allocation failure(s) outside library calls after which their process "
        f"made no successful allocation in the trace: {'; '.join(shown)}{more}. Nothing shows the process recovered "
        "from them, and no traced library call encloses them to name what made them (a caching allocator's handled "
        "failure is followed by a successful allocation of its process)"
    )


def telemetry_failure_unexplained(
    line: int, event: str, statuses: Sequence[str], after: Mapping[str, Any] | None, skipped: Sequence[str],
    failed_call: Mapping[str, Any] | None,
) -> str:
    """A library failure the application's telemetry recorded and no traced call explains."""
    where = ""
    if after is not None:
        gap = after["ns_before_line"]  # known: the call ended at or before the placed line
        ago = "" if gap is None else f"{gap / 1e6:.3f} ms "
        where = f", {ago}after {after['api']} (tid {after['tid']}) ended"
        if after["coverage"] == "censored":
            where += f" (that call is censored, {after['censored_reason']}: the trace does not cover all of it)"
    skip = (
        f"; nsys skipped some CUDA API calls (META_DATA_CAPTURE {', '.join(skipped)}=true): "
        "--cuda-trace-all-apis=true would record them"
        if skipped
        else ""
    )
    if failed_call is not None:  # NCCL's error after an out-of-memory that no library call encloses
        said = names(failed_call["api"], failed_call["return_code"])
        return (
            f"telemetry line {line} ({event}) records {', '.join(statuses)}{where}; the trace shows "
            f"an out-of-memory before it, {said['display_api']} returned {failed_call['return_code']} "
            f"({said['return_name'] or 'unknown code'}) on tid {failed_call['tid']} (correlation "
            f"{failed_call['correlation_id']}), but no traced library call encloses it{skip}"
        )
    return (
        f"telemetry line {line} ({event}) records {', '.join(statuses)}{where}, but no traced "
        f"CUDA API call shows its cause{skip}"
    )


# no_failure's first reason: what was looked at and found clean.
def library_calls_clean(calls: int) -> str:
    return f"{calls} library call(s), all covered by the trace; none has a failed CUDA API call wholly inside it"


def tracing_recorded_no_library_call(libraries: Sequence[str]) -> str:
    return f"library API tracing was on ({', '.join(libraries)}) and recorded no library call"


def no_allocation_failure_untraced() -> str:
    return "no library API was traced; none of the failed calls is an allocation or out-of-memory failure"


def no_call_failed(calls: int) -> str:
    return f"none of the {calls:,} traced CUDA API calls failed"


# What damaged rows and the pair limit leave undecided (nsysaudit.analysis.integrity).
def undecided_rows(calls: int) -> str:
    return (
        f"{calls} CUDA API row(s) could be a failed allocation inside a library call but the export does "
        "not say (damaged name, return code, time or thread; see warnings), so a nested failure cannot be "
        "ruled out"
    )


def undecided_waits(waits: int) -> str:
    return (
        f"{waits} failed stream wait(s) with damaged times could follow a stream capture, so a "
        "captured_event_wait_failure cannot be ruled out"
    )


def unexamined_library_calls(calls: int, max_pairs: int) -> str:
    return (
        f"{calls:,} library call(s) hold failed calls that were not examined (the pair limit "
        f"--max-pairs {max_pairs:,} was reached), so a nested failure in them cannot be ruled out"
    )


TEMPLATES: Mapping[str, Callable[..., str]] = {
    f.__name__: f
    for f in (
        found, found_on_helper_thread,
        library_refused, library_not_requested, library_unknown, library_domain_unused,
        library_not_traced, failed_outside_library_calls, shadowed_tables_read, nsys_warned,
        no_cuda_api_trace, empty_cuda_api_table, censored_library_calls, shadowed_tables_unread,
        failures_where_no_library_traced, unrecovered_out_of_memory, telemetry_failure_unexplained,
        library_calls_clean, tracing_recorded_no_library_call, no_allocation_failure_untraced, no_call_failed,
        undecided_rows, undecided_waits, unexamined_library_calls,
    )
}


# --- the outline's sentences: answers, sections, tables' captions (render/) ---
