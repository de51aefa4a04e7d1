"""Every sentence nsysaudit shows a user, keyed by the fact or reason code it words (issue 35).

The analysis returns facts and reason codes with their values; the documents keep the code and the
one statement made here from it; the outline (render/outline.py) arranges those statements, and the
terminal, Markdown and HTML back-ends only lay them out. Error messages may stay with their errors.

A new finding's words go into the section of its kind below; nowhere else writes a sentence of five or
more words for a user (tests/test_words.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from nsysaudit.core.codes import display_name, names
from nsysaudit.core.errors import ReportWarning, warning
from nsysaudit.core.reasons import Reason
from nsysaudit.core.text import byte_size, size_word

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


# Warnings of the read and the analysis (a report's ``warnings``), keyed by their code.
def snapshot_replay_below_zero(path: object, quantity: object, bytes: object) -> str:
    return (
        f"{path}: replaying its history back from its segments gives less than nothing "
        f"({quantity} {bytes:,} B before the first entry): the history "
        "and the segments disagree (a damaged or edited snapshot); its figures at moments are not exact"
    )


def snapshot_segment_events_unmatched(path: object) -> str:
    return (
        f"{path}: segment events of its history inside the capture with no memory event of the "
        "trace at their address (nsys lost events, or the snapshot was edited)"
    )


def launched_command_ambiguous(shown: object) -> str:
    return (
        f"META_DATA_CAPTURE: several launched commands are each the one traced process ({shown}): which one it "
        "is, is unknown, so none of them (their rank, environment) is given to it"
    )


def undecided_wait_times() -> str:
    return (
        "failed stream waits on an event whose times are damaged (outside the capture, or a duration past 64 "
        "bits), in a process that began a stream capture: whether they follow a capture region is unknown"
    )


# Why a CUDA API row could be a failed allocation inside a library call the export does not show
# (nsysaudit.analysis.integrity.undecided_calls' reasons).
UNDECIDED_WORDS = {
    "no_thread": "no globalTid, so it cannot be placed on a thread",
    "time_unknown": "its start or end is NULL or its end is before its start, so its nesting is unknown",
    "time_damaged": "its start or end lies outside the capture or its end minus start does not fit in 64 bits, "
    "so its times cannot be true and its nesting is unknown",
    "name_unknown": "nested in a library call with a non-zero return, but its API name is unknown",
    "return_unknown": "an allocation call (or unknown API) nested in a library call, with a NULL return code",
    "unknown_nvtx_domain": "on a thread with NVTX ranges in a domain whose name is unknown (they may be "
    "library calls)",
}


def undecided_call_rows(by_reason: Sequence[tuple[str, int]]) -> str:
    detail = "; ".join(f"{n} {UNDECIDED_WORDS[reason]} [{reason}]" for reason, n in by_reason)
    return (
        f"CUDA API rows that could be a failed allocation inside a library call, but the export does not "
        f"say: {detail}"
    )


def damaged_time_range(start_ns: int | None, stop_ns: int | None, bounded: bool) -> str:
    if not bounded:
        return (
            "CUDA API rows whose end minus start does not fit in 64 bits, among the failed calls and the calls "
            "overlapping library calls (the rows the analysis reads): their times cannot be true; counted in the "
            "census, never nested or straddling (the export records no capture bounds to check them against)"
        )
    sides = [f"before the capture began ({start_ns:,} ns)"] if start_ns is not None else []
    sides += [f"after it stopped ({stop_ns:,} ns)"] if stop_ns is not None else []
    return (
        f"CUDA API rows whose start or end is {' or '.join(sides)}, or whose end minus start does not fit in 64 "
        "bits, among the failed calls and the calls overlapping library calls (the rows the analysis reads): their "
        "times cannot be true; counted in the census, never nested or straddling"
    )


def pair_limit(pairs: int, max_pairs: int | None, unexamined: int) -> str:
    message = (
        f"{pairs:,} (library call, CUDA API call) pairs overlap, more than the limit of "
        f"{max_pairs:,} (--max-pairs): successful calls are not listed as library call children "
        "and allocated_bytes is unknown (null); failed calls and calls with an unknown return are listed"
    )
    if unexamined:
        message += f", except in {unexamined:,} library call(s) past the limit whose failed calls were not examined"
    return message


def duplicate_correlation_id(height: object) -> str:
    return (
        f"CUDA API rows sharing a correlation id with another row of the same process "
        f"({height} id(s), among the failed calls and the calls overlapping library calls, "
        "the rows the analysis reads): allocation bytes joined by correlation id are not shown for them"
    )


def allocation_correlation_shared() -> str:
    return (
        "allocation events whose correlation id several CUDA API rows of the process carry (including "
        "rows the analysis does not otherwise read): their bytes are unknown (null) for every such call"
    )


def library_call_without_start() -> str:
    return (
        "library calls with no start timestamp (a NULL in a NOT NULL column): nesting cannot be checked, "
        "they are censored"
    )


def unknown_nvtx_domain() -> str:
    return (
        "NVTX ranges in a domain whose name is unknown (no NvtxDomainCreate row, or its name is not in "
        "StringIds): they are not recognised as library calls"
    )


def allocation_event_for_failed_call() -> str:
    return (
        "failed allocation calls whose correlation id has an allocation event (a failed allocation "
        "allocates nothing, so the event is another call's): their bytes are unknown (null)"
    )


def memory_address_live_twice(table: object, shown: object) -> str:
    return (
        f"{table}: allocation events at an address already live in the same process and device, where nsys "
        f"writes one allocation per live address ({shown}): one of them is damaged or a free is missing, so what "
        "was held there is unknown and no bound on free memory is claimed while they overlap (never their sum)"
    )


def memory_negative_size(table: object) -> str:
    return f"memory events with a negative size in {table} (a damaged export): their size is unknown (null)"


def deallocation_size_differs() -> str:
    return (
        "deallocation events whose size differs from the allocation they free (same process, device and "
        "address): the allocation's size is subtracted"
    )


def memory_pool_overfull(table: object, why: object) -> str:
    return (
        f"{table}: events after which a CUDA memory pool has more in use than its size "
        f"({why}): its use is unknown, and no bound on free memory is claimed while it lasts"
    )


def telemetry_bad_lines(path: object, detail: object, more: object) -> str:
    return f"{path}: skipped (--lenient): {detail}{more}"


# A telemetry line that is no event, and why (read/telemetry's BadLine): a telemetry.warnings entry's
# problem with --lenient, the one-line error without it.
def line_not_utf8() -> str:
    return "not UTF-8 text"


def line_invalid_json(message: str, column: int) -> str:
    return f"invalid JSON ({message} at column {column})"


def line_unusable_value(problem: str) -> str:
    return f"unusable JSON value: {problem}"


def line_nested_too_deep(levels: int) -> str:
    return line_unusable_value(f"nested deeper than {levels} levels")


def line_not_object(json_type: str) -> str:
    return f"not a JSON object (a JSON {json_type})"


def line_without_event(key: str) -> str:
    return f"no {key!r} field"


def line_event_not_text(key: str) -> str:
    return f"{key!r} is not a non-empty string"


def line_clock_not_integer(field: str, got: str) -> str:
    return f"clock field {field!r} is not an integer (got {got})"


def line_without_clock(fields: Sequence[str]) -> str:
    return f"no clock field (expected at least one of {', '.join(repr(f) for f in fields)})"


def line_id_not_integer(field: str, got: str) -> str:
    return f"{field!r} is not an integer (got {got})"


def duration_overflow() -> str:
    return (
        "library calls whose end minus start does not fit in 64 bits (a range spanning the int64 range): "
        "their duration is unknown (null)"
    )


def nvtx_attribution_skipped(max_pairs: object) -> str:
    return (
        f"more (failed call, NVTX range) overlaps than --max-pairs {max_pairs:,}: the innermost NVTX range "
        "of each failed call is unknown (null)"
    )


def no_memory_events() -> str:
    return (
        "successful allocation calls inside library calls, but the export has no usable "
        "CUDA_GPU_MEMORY_USAGE_EVENTS (captured without --cuda-memory-usage=true): their sizes are unknown"
    )


def memory_events_outside_capture(table: object, where: object, rule: object) -> str:
    return f"{table}: events whose start lies {where}: {rule}"


def pool_events_outside_capture(pool_table: object, where: object, rule: object) -> str:
    return f"{pool_table}: pool events whose start lies {where}: {rule}"


def cuda_api_rows_outside_capture(name: object, where: object) -> str:
    return (
        f"{name}: rows whose start or end lies {where}, which nsys never records: their times are "
        "damage; each process's first and last CUDA API record (coverage) is read from the other rows"
    )


def nvtx_ranges_outside_capture(nvtx_table: object, where: object) -> str:
    return (
        f"{nvtx_table}: push/pop and start/end ranges whose start or end lies {where}: their times are "
        "damage (a library call among them is censored, library_call_outside_capture, and never joined)"
    )


def damaged_index(table: object, found: object) -> str:
    return (
        f"an index of {table} is damaged (SQLite's quick_check: {found}); the table's "
        "own b-tree is sound and its rows are read from it"
    )


def damaged_free_list(found: object) -> str:
    return (
        f"the file's free list is damaged (SQLite's quick_check: {found}); it holds pages "
        "no table uses, so no evidence row is in it"
    )


def capture_duration_disagrees(name: object, rows: object, durations: Sequence[int]) -> str:
    return (
        f"{name}: {rows} rows that disagree about the capture's duration "
        f"({', '.join(f'{d:,}' for d in durations)} ns): where the capture stopped is unknown, and "
        "no timestamp is checked against it"
    )


def gpu_work_outside_capture(calls: object, rows: object, bounds_words: object) -> str:
    return (
        f"{calls:,} CUDA API row(s) of a blocking call and {rows:,} GPU activity row(s) have a start or end outside "
        f"the capture ({bounds_words} on the trace clock), which nsys never records, or a duration past "
        "2^63 - 1 ns: their times are damage, left out of the host stalls (a blocking call among them is not "
        "counted, nor its time)"
    )


def gpu_work_union_unknown(kernels_read: bool, max_intervals: int) -> str:
    why = (f"more than {max_intervals:,} separate intervals of GPU work inside the stalls" if kernels_read
           else "the export has no usable CUPTI_ACTIVITY_KIND_KERNEL table")
    return (
        f"{why}: how much of each stall no GPU work covered is unknown (null); the time behind each stream "
        "is still counted, of the rows read"
    )


def gpu_work_unreadable(name: object, columns: object) -> str:
    return (
        f"{name} lacks a column of {columns}: its rows are not read, so the work behind each "
        "blocking call leaves that kind of work out"
    )


def unknown_schema_version(table: object) -> str:
    return f"{table} has no EXPORT_SCHEMA_VERSION; tables are read by probing"


def inconsistent_schema_version(table: object, version: object, major_text: object) -> str:
    return (
        f"{table}: EXPORT_SCHEMA_VERSION {version} and EXPORT_SCHEMA_VERSION_MAJOR {major_text} disagree; "
        "tables are read by probing"
    )


def unknown_schema_major(majors: object, version: object) -> str:
    return (
        f"export schema major version {majors} ({version}) is newer or older than the "
        "ones nsysaudit was checked against (2.x, 3.x); tables are read by probing"
    )


def ambiguous_table(found: object, base: object, tables: object, name: object) -> str:
    return (
        f"the export has {found} tables for {base} ({tables}): read {name}, "
        "the highest version; the others are not read"
    )


def schema_version_not_a_version(table: object, version: object) -> str:
    return (
        f"{table}: EXPORT_SCHEMA_VERSION {version!r} is not a version number (MAJOR.MINOR.MICRO); "
        "tables are read by probing"
    )


def schema_major_not_a_number(table: object, major_text: object) -> str:
    return f"{table}: EXPORT_SCHEMA_VERSION_MAJOR {major_text!r} is not a number; tables are read by probing"


def type_mismatch(table_name: object) -> str:
    return (
        f"{table_name}: values whose type contradicts their column (text in an integer column, an integer "
        "over 64 bits, a blob where text belongs): read as unknown (NULL), never converted"
    )


def allocation_size_unknown(table: object) -> str:
    return (
        f"{table}: allocation events whose bytes are NULL or not an "
        "integer (a NOT NULL integer column): the sizes of their calls are unknown (null), never a partial sum"
    )


def invalid_utf8_text() -> str:
    return (
        "text values (names, NVTX strings, metadata) that are not valid UTF-8: shown with U+FFFD "
        "replacement characters where the bytes could not be decoded"
    )


def dangling_library_name() -> str:
    return "library calls whose name is not in StringIds"


def library_call_without_end() -> str:
    return "library calls with no end timestamp (NVTX end is NULL): nesting cannot be checked"


def reversed_library_range() -> str:
    return "library calls whose end is before their start"


def duplicate_allocation_correlation() -> str:
    return "correlation ids with more than one allocation event: their bytes are summed"


def integer_column_mismatch(table: object) -> str:
    return f"{table}: rows with a non-integer value in an integer column: those values are read as unknown (NULL)"


def rows_disagree_on_value(table: object, what: object, shown: object, more: object) -> str:
    return (
        f"{table}: {what} given by several rows that disagree ({shown}{more}): unknown, never the first or the "
        "last row's"
    )


def rows_of_one_key_disagree(table: object, examples: object, more: object) -> str:
    return (
        f"{table}: rows of one key that disagree, where nsys writes one: {examples}{more}: "
        "each value they disagree on is unknown (null), never the first or the last row's"
    )



# Telemetry on the trace clock (nsysaudit.analysis.alignment): why a mapping is not computed, its
# checks, the notes and the anchors skipped.
def _ms(ns: int) -> str:
    return f"{ns / 1_000_000:.3f} ms"


def _pids(pids: Sequence[int]) -> str:
    return ", ".join(map(str, pids))


def utc_clock_not_read() -> str:
    return "UTC not computed: the realtime clock is not read (--telemetry-clock leaves it out)"


def utc_no_stamp(field_name: str) -> str:
    return f"UTC not computed: no telemetry line has a {field_name!r} stamp"


def utc_no_session_start() -> str:
    return "UTC not computed: the export has no TARGET_INFO_SESSION_START_TIME.utcEpochNs (session start in UTC)"


def utc_mapping(clock_field: str | None, session_start_utc_ns: int | None) -> str:
    return f"UTC mapping: trace_ns = {clock_field} - {session_start_utc_ns} (TARGET_INFO_SESSION_START_TIME.utcEpochNs)"


def anchors_no_clock() -> str:
    return "anchors not computed: no clock stamp to pair"


def anchors_on_realtime(field_name: str) -> str:
    return f"anchors use the realtime clock ({field_name!r}): no monotonic stamp is read"


def telemetry_without_pid() -> str:
    return "some telemetry lines have no pid: their anchors are matched by name in any traced process"


def telemetry_pids_not_traced(pids: Sequence[int], trace_pids: Sequence[int]) -> str:
    return (
        f"telemetry pid(s) {_pids(pids)} are not processes of this trace "
        f"(trace pid(s): {_pids(trace_pids) or 'none'}): their lines anchor nothing"
    )


def anchor_range_missing(nvtx: str) -> str:
    return f"no NVTX range named {nvtx!r} in the trace"


def anchor_range_in_other_process(nvtx: str, pids: Sequence[int], pid: int | None) -> str:
    return f"NVTX range {nvtx!r} exists only in other process(es) (pid {_pids(pids)}), not in the line's pid {pid}"


def anchor_range_on_other_thread(nvtx: str, pid: int | None, tids: Sequence[int], tid: int) -> str:
    return (
        f"NVTX range {nvtx!r} is on other thread(s) of pid {pid} (tid {_pids(tids)}), not on the "
        f"line's tid {tid}: not the same moment (configure it with --anchor to use it)"
    )


def anchor_lines_without_stamp(lines: int, field_name: str) -> str:
    return f"{lines} line(s) have no {field_name!r} stamp"


def anchor_pairing_ambiguous(lines: int, ranges: int, nvtx: str, edge: str) -> str:
    return (
        f"{lines} telemetry line(s) but {ranges} NVTX range(s) {nvtx!r} with a "
        f"{edge} on that thread/process: pairing is ambiguous"
    )


def anchors_no_traced_process(pids: Sequence[int], trace_pids: Sequence[int]) -> str:
    return (
        f"anchors not computed: no telemetry line comes from a process of this trace "
        f"(telemetry pid(s) {_pids(pids)}; trace pid(s) {_pids(trace_pids) or 'none'})"
    )


def anchors_all_skipped(skipped: int) -> str:
    return f"anchors not computed: no usable pair ({skipped} candidate(s) skipped, see 'skipped')"


def anchors_no_range_named() -> str:
    return (
        "anchors not computed: no telemetry event names an NVTX range of the trace "
        "(default rule: X_start/X_begin -> start of range X, X_end -> end of X, X -> end of X; "
        "use --anchor EVENT=NVTX_NAME[:start|end])"
    )


def anchors_none_matched() -> str:
    return "anchors not computed: no configured anchor matched"


def anchor_mapping(clock_field: str | None, offset_ns: int | None, pairs: int) -> str:
    return f"anchor mapping: trace_ns = {clock_field} + ({offset_ns}), median over {pairs} pair(s)"


def mappings_not_compared(utc: bool, anchors: bool) -> str:
    why = "only one method computed" if utc != anchors else "neither method computed"
    if utc and anchors:
        why = "no telemetry line has both clocks"
    return f"the two mappings cannot be compared: {why}"


def mappings_compared(
    agree: bool, tolerance_ns: int, events: int, max_abs_diff_ns: int, worst_event: str, worst_line: int
) -> str:
    return (
        f"UTC and anchor mappings {'agree' if agree else 'disagree'}: they differ by up to {_ms(max_abs_diff_ns)} "
        f"over {events} line(s) (worst: {worst_event!r}, line {worst_line}; tolerance {_ms(tolerance_ns)})"
    )


def no_anchor_pair() -> str:
    return "no anchor pair, so no residual to check"


def anchor_residuals(
    within: bool, residual_ns: int, event: str, line: int, nvtx: str, edge: str, tolerance_ns: int
) -> str:
    return (
        f"anchor residuals {'within' if within else 'exceed'} tolerance: largest {_ms(residual_ns)} "
        f"({event!r} line {line} vs NVTX {nvtx!r} {edge}; tolerance {_ms(tolerance_ns)})"
    )


def telemetry_placed_outside_clock(lines: int) -> str:
    return (
        f"{lines} telemetry line(s) would be placed outside the trace's 64-bit clock (a damaged "
        "stamp): not placed"
    )


def no_mapping() -> str:
    return "no mapping computed: telemetry lines cannot be placed on the trace clock"



# The CUDA API table's rows the streaming scan counts as broken (read/trace's CUDA_API_PROBLEMS).
CUDA_API_PROBLEM_WORDS = {
    "null_start": "CUDA API rows with NULL start (a NOT NULL column): counted in the census, excluded from coverage "
    "and joins",
    "null_end": "CUDA API rows with NULL end (a NOT NULL column): counted in the census, excluded from joins",
    "null_return": "CUDA API rows with NULL returnValue (a NOT NULL column): counted in "
    "cuda_api_calls, not in by_return (their return is unknown)",
    "null_name_id": "CUDA API rows with NULL nameId (a NOT NULL column): their API name is unknown",
    "null_gtid": "CUDA API rows without globalTid: counted in the census, never joined to a thread",
    "reversed": "CUDA API rows whose end is before their start: counted in the census, "
    "never nested (no interval contains them)",
    "dangling_name_id": "CUDA API rows whose nameId has no StringIds row: their API name is unknown",
}


def cuda_api_problem(problem: str, table: str | None, column: str | None) -> str:
    return f"{table}: {CUDA_API_PROBLEM_WORDS[problem]}" + (f" [column {column}]" if column else "")


def threads_with_several_names(table: str, examples: str, more: str) -> str:
    return (
        f"{table}: threads with several ThreadNames rows that disagree, where nsys writes one: {examples}{more}: "
        "each value they disagree on is unknown (null), never the first or the last row's"
    )


def dangling_thread_name(table: str) -> str:
    return f"{table} rows whose nameId has no StringIds row: those threads' names are unknown"



# The device-memory ledger (nsysaudit.analysis.ledger): what it leaves out, why it is not summed, why
# no bound on free memory is claimed at a moment, its notes.
NOT_COUNTED = (
    "CUDA contexts and the driver's own reservations (they have no memory event)",
    "processes the capture did not trace",
    "memory allocated before the capture began and not freed during it",
    "managed memory, which may reside on the host (shown, not subtracted)",
    "memory of a pool imported from another process, except in that process (counted once, in its owner)",
)
# A polars format (pl.format) of pid, address and correlation ids: an allocation at a live address.
ADDRESS_LIVE_TWICE_FORMAT = (
    "allocation events at an address already live lie on this device (pid {}, address {}, "
    "correlation {}): one of them is damaged or a free is missing, so what was held is unknown"
)


def bound_unknown_conflict(why: str) -> str:
    return f"{why}, and no bound on free memory is claimed"


def bound_unknown_total_disagrees() -> str:
    return (
        "TARGET_INFO_GPU rows of this device disagree about its total memory, so the total is unknown and "
        "no bound on free memory is claimed"
    )


def bound_unknown_exceeded(resident: int, total: int, ended: Sequence[tuple[int | None, int]]) -> str:
    if not ended:
        why = "the sizes or the total are damaged"
    else:
        said = ", ".join(f"pid {pid} (last at {end:,} ns)" for pid, end in ended)
        why = (f"the CUDA API trace of {said} ended before this moment, and a process's memory goes back to the "
               "device at its exit without deallocation events, so some of it may no longer have been held")
    return (
        f"the traced device-resident bytes ({resident:,} B) exceed the device's total ({total:,} B), "
        "so no bound on free memory is claimed: " + why
    )


def memory_size_overflow(total: int) -> str:
    return (f"the memory events' sizes add up to {total:,} B, past any device (2^62 B): damaged sizes, so live "
            "bytes are not summed")


def pool_events_without_pool(events: int) -> str:
    return (
        f"{events} memory event(s) of CUDA memory pool calls (cudaMallocAsync, cudaFreeAsync) carry no pool "
        "address or size: what the pool held on the device is unknown"
    )


def memory_events_without_size(events: int) -> str:
    return f"{events} memory event(s) have no size: live bytes cannot be summed"


def pools_without_size(pools: int) -> str:
    return (f"{pools} CUDA memory pool(s) with no size information in the export: what they held on the device "
            "is unknown")


def memory_collection_off() -> str:
    return "memory-usage collection was off (--cuda-memory-usage=true turns it on)"


def no_memory_table() -> str:
    return "the export has no CUDA_GPU_MEMORY_USAGE_EVENTS table"


def memory_table_empty(table: str) -> str:
    return (f"{table} is empty and the capture settings do not say memory-usage collection was on "
            "(--cuda-memory-usage=true turns it on)")


def pool_over_its_size(pid: int | None, address: str, utilized: int, size: int) -> str:
    return (f"the CUDA memory pool of pid {pid} at {address} has more in "
            f"use ({utilized:,} B) than its size ({size:,} B) in the events, which cannot be: "
            "one of the two is damaged, so what the pool held is unknown")


def virtual_memory_note() -> str:
    return (
        "handles (cuMemCreate, cuMemRelease) and reserved address ranges (cuMemAddressReserve) are "
        "not memory held on the device: mapped memory is, from cuMemSetAccess to cuMemUnmap; the sizes of "
        "reserved ranges are not in the trace"
    )


def free_calls_without_event_note() -> str:
    return (
        "successful calls that give device memory back with no deallocation event of their own "
        "correlation id: cudaFree(NULL), which frees nothing, is the usual one; if any of them freed "
        "memory, more could have been free than the bound after them says"
    )


def moment_unknown(start_known: bool) -> str:
    missing = "process (globalTid)" if start_known else "start time"
    return f"the call's {missing} is unknown, so the ledger cannot be read at it"



# The devices, processes and ranks (nsysaudit.analysis.devices): the rule, each claim's source, why a
# rank is unknown, how a launched command was matched to a traced process.
RANK_RULE = (
    "a process's rank is what a row of the evidence states: the environment (RANK, OMPI_COMM_WORLD_RANK, "
    "PMI_RANK, PMIX_RANK, SLURM_PROCID, MV2_COMM_WORLD_RANK) or command line (--rank N, env RANK=N) nsys "
    "recorded for the command it launched, given to the one traced process that is that command, or the "
    "application's telemetry lines with an integer rank field and the process's pid; otherwise unknown (never "
    "the report's file name)"
)


def process_not_in_processes() -> str:
    return "the process is not in the export's PROCESSES table"


def telemetry_rank_claim(line: int, event: str, name: str, value: int) -> str:
    return f"telemetry line {line} ({event}): {name}={value}, the application's own claim"


def launched_program_unknown(index: int, command: str | None) -> str:
    if command is None:
        return f"nsys recorded no command for PROCESS_{index}"
    return f"the program that {command!r} ran is not in its recorded command line"


def launched_by_name(name: str) -> str:
    return f"the only traced process named {name!r}, the launched command's name"


def launched_name_ambiguous(processes: int, name: str, index: int, pid_recorded: bool) -> str:
    if not processes:
        return f"no traced process is named {name!r}, the launched command's name"
    pid_note = "" if pid_recorded else f" and PROCESS_{index}:PID is not recorded"
    return (f"{processes} traced processes are named {name!r}{pid_note}: the export does not say which is "
            "the launched command")


def launched_shared(how: str, indexes: Sequence[int], pid: int) -> str:
    others = ", ".join(f"PROCESS_{i}" for i in indexes)
    return (f"{how}, but so is the process of another launched command ({others} all match pid {pid}): which one "
            "it is, is unknown")


def _no_rank_tail(telemetry: bool) -> str:
    return "; no telemetry line of it has a rank field" if telemetry else "; no telemetry was given"


def _launch_states_no_rank(index: int, environment_rows: int, rank_variables: Sequence[str]) -> str:
    if not environment_rows:
        return (f"nsys recorded no environment for the command it launched (no PROCESS_{index}:"
                "ENVIRONMENT_VARIABLE row: not recorded, or scrubbed) and its command line names no rank")
    return (f"the environment nsys recorded for the command it launched ({environment_rows} variables) has "
            f"none of {', '.join(rank_variables)}, and its command line names no rank")


def rank_not_stated(index: int, environment_rows: int, rank_variables: Sequence[str], telemetry: bool) -> str:
    return _launch_states_no_rank(index, environment_rows, rank_variables) + _no_rank_tail(telemetry)


def no_launched_command(telemetry: bool) -> str:
    return ("the export records no launched command (META_DATA_CAPTURE has no PROCESS_0 rows)"
            + _no_rank_tail(telemetry))


def not_the_launched_command(pids: Sequence[int | None], telemetry: bool) -> str:
    return (f"it is not the command nsys launched (pid {', '.join(map(str, pids))}), and nsys records the environment "
            f"and command line only of that command, not of the processes it started{_no_rank_tail(telemetry)}")


def launched_rank_not_placed(sources: Sequence[str], process_rule: str, telemetry: bool) -> str:
    return (f"the launched command's rank is recorded ({'; '.join(sources)}), but not which traced process it is: "
            f"{process_rule}{_no_rank_tail(telemetry)}")


def launched_process_unknown(
    index: int, environment_rows: int, rank_variables: Sequence[str], process_rule: str, telemetry: bool
) -> str:
    return (f"{_launch_states_no_rank(index, environment_rows, rank_variables)}; which traced process that command "
            f"is, is not known either ({process_rule}), and nsys records nothing of the processes it started"
            f"{_no_rank_tail(telemetry)}")



# The documents' statements (nsysaudit.reports.statements picks their values from the documents).
# Why a library call is censored, in words (the reasons of nsysaudit.analysis.coverage); worded once.
CENSORED_WORDS = {
    "capture_ended_inside": "the capture ended inside it: its true end and duration are unknown",
    "capture_began_inside": "it began before the capture started",
    "cuda_trace_degraded": "nsys warned that CUDA tracing was degraded",
    "nsys_warned_cuda_events_missing": "nsys warned that not all CUDA events might have been collected",
    "cuda_api_trace_ended_before_call": "the process's CUDA API trace ended before it began",
    "cuda_api_trace_ends_inside": "the process's CUDA API trace ends inside it, and no nsys diagnostics confirm "
    "the capture went on without losing events",
    "no_cuda_api_trace": "the export has no CUDA API trace",
    "no_cuda_api_trace_for_process": "its process has no CUDA API records",
    "library_call_has_no_end": "the range has no end",
    "library_call_has_no_start": "the range has no start",
    "library_call_reversed": "the range ends before it starts",
    "library_call_has_no_thread": "the range has no thread",
    "library_call_outside_capture": "the range ends after the capture stopped, which nsys never records: its times "
    "are damaged",
}


# What a non-zero return says about its call (nsysaudit.core.codes.return_class), in words.
CLASSIFICATION_WORDS = {
    "failure": "failure",
    "reports_earlier_error": "reports an earlier error",
    "not_ready_poll": "not ready (a poll)",
}

# How memory is held (nsysaudit.analysis.ledger.MECHANISMS), in words.
MECHANISM_WORDS = {
    "segments": "plain allocations (cudaMalloc, cuMemAlloc)",
    "mapped": "mapped (virtual memory: cuMemSetAccess to cuMemUnmap)",
    "pool": "CUDA memory pool allocations (cudaMallocAsync)",
    "imported_pool": "allocations from an imported pool",
    "static": "driver module memory (correlation id 0)",
    "managed": "managed memory",
    "host": "host or unknown kinds",
}

# Allocations no single named API call made (``memory.devices[].processes[].allocations_by_call[].call``).
CALL_WORDS = {"driver": "driver-allocated (correlation id 0)", "no_single_call": "no single API call"}


def role_words(role: str) -> str:
    return "main thread" if role == "main" else "non-main thread"


def censored_call(reason: str | None, last_ns: int | None, end_ns: int | None) -> str:
    """Why a library call of interest is censored, in words, with its numbers (its last CUDA API record
    and its end)."""
    if reason == "capture_ended_inside":
        return (
            "the capture ended while it ran (its recorded end is the capture's stop), so what happened in it "
            "after that moment is not in the trace"
        )
    if reason in ("nsys_warned_cuda_events_missing", "cuda_trace_degraded"):
        return "nsys warned that CUDA events may be missing, and no CUDA API record after it shows the trace went on"
    if reason == "cuda_api_trace_ends_inside":
        where = "" if last_ns is None or end_ns is None else f" {end_ns - last_ns:,} ns before the call ends"
        return f"the CUDA API trace stops{where}, so allocations after that moment are not in the trace"
    return f"the trace does not cover it ({reason})"


def censored_reasons_words(reasons: Sequence[str]) -> str:
    """Why a library call is censored: each reason in words, most telling first."""
    return "; ".join(CENSORED_WORDS.get(r, r) for r in reasons)


def virtual_memory(mapped: int, unmapped: int, created: int, released: int, reservations: int) -> str:
    return (f"virtual memory: {mapped:,} mapping(s), {unmapped:,} unmapping(s); "
            f"{created:,} handle(s) created, {released:,} released; "
            f"{reservations:,} address range(s) reserved (not memory; sizes not in the trace)")


def free_calls_without_event(count: int, by_api: Mapping[str, int], examples: Sequence[int]) -> str:
    return (f"{count:,} successful free call(s) without a deallocation event ("
            + ", ".join(f"{n:,} x {display_name(api)}" for api, n in by_api.items())
            + "; e.g. correlation " + ", ".join(str(c) for c in examples)
            + "): cudaFree(NULL) frees nothing; the bounds after them assume none freed memory")


def freed_never_allocated(events: int, bytes_: int) -> str:
    return (f"{events:,} deallocation(s) ({bytes_:,} B) of memory allocated before the "
            "capture began: live bytes are a lower bound")


def telemetry_position(ms: float, event: str, line: int, verified: bool) -> str:
    """ ", 55.672 ms after backward_start (telemetry line 5)": a call's place on the application's clock."""
    checked = "" if verified else ", clock alignment NOT checked"
    return f", {ms:.3f} ms after {event} (telemetry line {line}{checked})"


def moment(kind: str, label: str, line: int | None) -> str:
    """A ledger point's moment in words: "the failure", "cublasCreate_v2's start", "telemetry line 4 (handoff)"."""
    if kind == "finding":
        return "the failure"
    if kind == "library_call":
        return f"{label}'s start"
    if kind == "censored_library_call":
        return f"{label}'s start (a censored call)"
    if kind == "telemetry":
        return f"telemetry line {line} ({label})"
    return f"{kind} {label}"


def allocator_figures(line: int, event: str, reserved: int, allocated: int) -> str:
    return (f"Telemetry line {line} ({event}), the allocator's own figures: reserved but "
            f"unused {size_word(reserved - allocated)} (reserved {reserved:,} B, allocated {allocated:,} B).")



def _bytes_each(values: Sequence[int | None]) -> str:
    shown = " + ".join("unknown" if v is None else f"{v:,}" for v in values)
    known = [v for v in values if v is not None]
    if len(values) > 1:
        total = f"{sum(known):,}" + (" known" if len(known) < len(values) else "")
        return f"{shown} = {total} bytes"
    return f"{shown} bytes"


def library_call_allocations(
    arm: str, api: str, role: str, pid: int | None, tid: int | None, thread_name: str | None,
    failed: Sequence[tuple[str | None, int | None, str | None, int | None]], succeeded_before_first_failure: int | None,
    succeeded: int, bytes_each: Sequence[int | None], censored: tuple[str | None, str] | None,
) -> str:
    """What one library call allocated in one arm: its failed allocations (api, return code and name,
    bytes), its successful ones, and why it is censored (reason, in words) if it is."""
    name = "name unknown" if thread_name is None else f"thread name {thread_name}"
    head = f"{arm}: {api} ({role_words(role)}, pid {pid} tid {tid}, {name})"
    parts: list[str] = []
    if failed:
        for call, code, code_name, requested in failed:
            parts.append(
                f"{display_name(call) if call else 'unknown'} returned {code} ({code_name or 'unknown code'}), "
                "requested bytes "
                f"{'unknown' if requested is None else format(requested, ',')}, "
                f"after {succeeded_before_first_failure} successful nested allocation(s)"
            )
        if succeeded:
            parts.append(f"{succeeded} successful nested allocation(s) in all: {_bytes_each(bytes_each)}")
        else:
            parts.append("no successful nested allocation")
    elif succeeded:
        parts.append(f"{succeeded} successful nested allocation(s) ({_bytes_each(bytes_each)}), none failed")
    else:
        parts.append("no nested allocation call in the trace")
    if censored is not None:
        parts.append(f"censored ({censored[0]}): {censored[1]}")
    else:
        parts.append("coverage complete")
    return head + ": " + "; ".join(parts)


def _values(values: Mapping[str, int | float]) -> str:
    return ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in values.items())


def telemetry_span(
    arm: str, api: str, after: tuple[float, str, int] | None, before: tuple[float, str, int] | None,
    in_force: tuple[str, int, Mapping[str, int | float]] | None, verified: bool,
) -> str:
    """Where a library call falls among its arm's telemetry lines (after and before: ms, event, line),
    and the snapshot then in force (event, line, values)."""
    parts = []
    if after:
        parts.append(f"starts {after[0]:.3f} ms after {after[1]} (telemetry line {after[2]})")
    if before:
        parts.append(f"ends {before[0]:.3f} ms before {before[1]} (telemetry line {before[2]})")
    if not parts:
        parts.append("no telemetry line before or after it")
    text = f"{arm}: {api} " + " and ".join(parts)
    if in_force:
        text += f"; last telemetry snapshot before it: {in_force[0]} (line {in_force[1]}): "
        text += _values(in_force[2])
    text += "; clock alignment checked" if verified else "; clock alignment NOT checked"
    return text



class HeldBy(NamedTuple):
    """What one process holds on a device, by mechanism, in bytes (the ledger's ``by_mechanism``)."""

    pool_reserved: int
    pool_utilized: int
    mapped: int
    segments: int
    static: int
    imported_pool: int


class DeviceHeld(NamedTuple):
    """The ledger on one device at a moment: its name (None: not named), the bytes held and its total,
    the processes holding memory ((pid, name, role), what each holds), why no bound on free memory is
    claimed (None: it is), the bound, managed bytes, whether the process has memory events."""

    name: str | None
    held: int
    total: int | None
    holders: Sequence[tuple[tuple[int | None, str | None, str | None], HeldBy]]
    bound_unknown: str | None
    free_at_most: int | None
    managed: int
    process_has_events: bool


def held_parts(m: HeldBy, *, pool_first: bool) -> list[str]:
    """What one process holds on a device, by mechanism, most first."""
    parts = []
    if m.pool_reserved:
        # More in use than the pool holds cannot be: the events contradict themselves (warned).
        use = (f"{size_word(m.pool_utilized)} of it in use" if m.pool_utilized <= m.pool_reserved else
               f"its use unknown: the events say {size_word(m.pool_utilized)}, more than the pool")
        parts.append(f"{size_word(m.pool_reserved)} in its CUDA memory pool ({use})")
    if m.mapped:
        parts.append(f"{size_word(m.mapped)} mapped (virtual memory: cuMemMap, cuMemSetAccess)")
    if m.segments:
        outside = " outside it" if m.pool_reserved and pool_first else ""
        parts.append(f"{size_word(m.segments)} allocated{outside} (cudaMalloc, cuMemAlloc)")
    if m.static:
        parts.append(f"{size_word(m.static)} of the driver's module memory")
    if m.imported_pool:
        parts.append(f"{size_word(m.imported_pool)} from a pool imported from another process (counted there)")
    return parts or ["nothing on the device"]


def _holder(pid: int | None, name: str | None, role: str | None) -> str:
    extra = ", ".join(x for x in (name, role) if x)
    return f"pid {pid}" + (f" ({extra})" if extra else "")


def held_at(moment: str, devices: Sequence[DeviceHeld], pid: int | None, unknown: str | None) -> str:
    """Who held each device at ``moment``, by mechanism, and the bound on free memory: one sentence
    (``pid``: the process of the moment; ``unknown``: why the ledger cannot be read at it)."""
    sentences = []
    for d in devices:
        of_total = f" of {size_word(d.total)}" if d.total is not None else ""
        prefix = f"{d.name}: " if d.name is not None else ""
        head = f"{prefix}{size_word(d.held)}{of_total} held at {moment}"
        if not d.holders:
            text = f"{head}: no traced process held device memory then"
        elif len(d.holders) == 1:
            who, held = d.holders[0]
            text = f"{head}, all by {_holder(*who)}: " + ", ".join(held_parts(held, pool_first=True))
        else:
            text = f"{head} by {len(d.holders)} traced processes: " + "; ".join(
                f"{_holder(*who)}: " + ", ".join(held_parts(held, pool_first=True)) for who, held in d.holders
            )
        if d.bound_unknown:
            text += f"; {d.bound_unknown}"
        elif d.free_at_most is not None:
            text += f"; at most {byte_size(d.free_at_most)} free"
        else:
            text += "; the device's total is unknown, so free memory is unknown"
        if d.managed:
            text += f" (managed memory, {size_word(d.managed)}, may reside on the host: not counted)"
        if not d.process_has_events:
            text += (f"; pid {pid} has no memory event, so the trace does not say which device it used: "
                     "every traced device is shown")
        sentences.append(text)
    if not sentences:
        return f"At {moment} the ledger cannot be read: {unknown or 'no device is known'}."
    return "; ".join(sentences) + "."



# The mechanisms a change between two moments, or between the arms, is told by.
Held = Literal["pool_reserved", "segments", "mapped"]
CHANGE_VERBS: dict[Held, tuple[str, str]] = {
    "pool_reserved": ("grew its CUDA memory pool by", "trimmed its CUDA memory pool by"),
    "segments": ("allocated", "freed"),
    "mapped": ("mapped", "unmapped"),
}
HELD_WORDS: tuple[tuple[Held, str], ...] = (
    ("pool_reserved", "CUDA memory pools"), ("segments", "plain allocations"), ("mapped", "mapped memory"),
)


def held_change(
    arm: str, before: str, after: str, changes: Sequence[tuple[int | None, Mapping[Held, int]]], held_before: int,
    held_after: int,
) -> str:
    """What the traced processes of one arm took or gave back between two moments: each process's
    change by mechanism (pid, bytes by :data:`CHANGE_VERBS`' mechanism), the bytes held before and after."""
    said = []
    for pid, by in changes:
        verbs = [f"{up if by[m] > 0 else down} {size_word(abs(by[m]))}"
                 for m, (up, down) in CHANGE_VERBS.items() if by[m]]
        if verbs:
            said.append(f"pid {pid} " + ", ".join(verbs))
    tail = f"{size_word(held_before)} held before, {size_word(held_after)} after"
    what = "; ".join(said) if said else "no traced process took or gave back device memory"
    return f"{arm}: between {before} and {after}, {what}; {tail}"


def arms_held(
    moment: str, observe: int, release: int, by: Mapping[Held, tuple[int, int]], observe_free: Sequence[int | None],
    release_free: Sequence[int | None],
) -> str:
    """How the two arms' device memory differed at the same moment: held in all (``observe``,
    ``release``), by mechanism (observe's and release's bytes), and the bound on free memory per device."""
    diff = release - observe
    head = (
        f"At {moment} the release arm held {size_word(abs(diff))} {'less' if diff < 0 else 'more'} device memory "
        f"than the observe arm ({size_word(release)} against {size_word(observe)})"
        if diff
        else f"At {moment} both arms held the same device memory ({size_word(observe)})"
    )
    parts = []
    for mechanism, label in HELD_WORDS:
        o, r = by[mechanism]
        if o != r:
            parts.append(f"{label} {size_word(abs(r - o))} {'smaller' if r < o else 'larger'}")
    if parts:
        head += ": " + ", ".join(parts)
    free = {"observe": observe_free, "release": release_free}
    known = {n: [v for v in vs if v is not None] for n, vs in free.items()}
    if all(len(known[n]) == len(free[n]) > 0 for n in free):
        head += (f"; at most {byte_size(sum(known['release']))} free in release against "
                 f"{byte_size(sum(known['observe']))} in observe")
    return head



def _site(stack: Mapping[str, Any] | None) -> str:
    """Where a stack allocated, in words: its outermost frame (the script's line), and its innermost
    when that is another ("in convert (module.py:1370) from snap_workload.py:18")."""
    if stack is None:
        return "before the snapshot's history"
    frames = stack["frames"]
    if not frames:
        return "with no Python frame recorded"

    def at(f: Mapping[str, Any]) -> str:
        return f"{f['filename']}:{f['line']}" if f["line"] is not None else f["filename"]

    outer, inner = frames[-1], frames[0]
    if stack["frames_total"] > len(frames) or inner is not outer:
        return f"in {inner['name']} ({at(inner)}) from {at(outer)}"
    return f"at {at(outer)} ({outer['name']})"


def allocator_state(
    moment: str, pid: int | None, s: Mapping[str, Any], top: Mapping[str, Any] | None,
    stack: Mapping[str, Any] | None, freed_ms: float | None,
) -> str:
    """The caching allocator of process ``pid`` at ``moment`` from one snapshot (``s``, an
    ``allocator.at[].states`` entry): what it reserved, how much was inactive, ``top``, the largest holder of
    its inactive memory, allocated at ``stack`` and freed ``freed_ms`` before; what the trace shows
    outside its segments."""
    who = f"pid {pid}'s caching allocator" if pid is not None else "the caching allocator"
    if s["history"] in ("before", "not_placed"):
        why = ("its history begins after it" if s["history"] == "before"
               else "its history cannot be placed on the trace clock")
        return f"At {moment}, {who} is not known from snapshot {s['snapshot']}: {why}."
    reserved, inactive = s["reserved_bytes"] or 0, s["inactive_bytes"] or 0
    when_words = f"At {moment}" if s["history"] == "within" else (
        f"At its history's last entry, {(s['ns_after_history'] or 0) / 1e6:,.3f} ms before {moment}")
    out = (f"{when_words}, {who} (snapshot {s['snapshot']}) held {size_word(reserved)} reserved "
           f"({reserved:,} B): {size_word(inactive)} of it inactive (reserved, requested by no live "
           f"allocation) in {s['inactive_ranges']} range(s)")
    sizes = s["largest_inactive_bytes"]
    largest = [f"{size_word(v)} ({k})" for k, v in (("large", sizes["large"]), ("small", sizes["small"])) if v]
    if largest:
        out += f", the largest {' and '.join(largest)}"
    if top is not None:
        freed = "" if freed_ms is None else f", freed {freed_ms:,.3f} ms before"
        out += (f"; {size_word(top['bytes'])} of it in {top['ranges']} range(s) last used by {top['allocations']} "
                f"allocation(s) made {_site(stack)}{freed}")
    outside = s["outside_allocator"]
    if outside["bytes"]:
        apis = ", ".join(f"{display_name(a['api']) if a['api'] else 'an unknown call'}: {a['allocations']}"
                         for a in outside["by_api"])
        out += f"; outside its segments the trace shows {size_word(outside['bytes'])} ({apis})"
    out += "." if s["verified"] else " (the snapshot's clock is not checked against the trace)."
    return out



def bound_assumes_no_free(calls: int, examples: Sequence[int]) -> str:
    """What the bound on free memory assumes of the earlier free calls without a deallocation event."""
    ids = ", ".join(str(i) for i in examples)
    return (f"The bound assumes that the {calls} earlier free call(s) without a deallocation event"
            f"{f' (correlation {ids})' if ids else ''} freed nothing, as cudaFree(NULL) does.")



# The rules the analysis states beside what it lists or leaves out (a document's ``rule`` keys).
ALLOCATOR_RULE = (
    "inactive_bytes: reserved less the bytes live allocations requested (the allocator's inactive blocks "
    "and the rounding of its active ones); inactive ranges: the segments less the live allocations rounded "
    "up to 512 B (an upper bound on each free block); holders: the allocation that last used each inactive "
    "byte, by its stack"
)
NCCL_HELPER_RULE = (
    "every CUDA API call of this thread lies inside the NCCL call, made on another thread of the same process "
    "(NCCL initializes a communicator on a thread it starts for the call and joins before the call returns)"
)
START_UNKNOWN_RULE = (
    "their start is unknown: a deallocation counts at every moment, an allocation at none, so the bound "
    "on free memory stays an upper bound"
)


def all_library_calls(total: int, few: int) -> str:
    return f"all library calls (this arm has {total}, at most {few})"


def library_calls_of_interest(total: int, few: int, with_nccl: bool, matched: int | None, listed: int) -> str:
    """Which library calls are of interest (``matched``: how many match, where more than ``listed``)."""
    finding = ", enclosing a finding, or an NCCL communicator's initialization" if with_nccl else (
        ", or enclosing a finding")
    selection = (
        f"library calls on a thread other than the process's main thread, censored, with a failed "
        f"nested call{finding} (this arm has {total} library calls, more than {few})"
    )
    if matched is not None:
        selection += (
            f"; {matched} match, the first {listed} are listed (enclosing a finding, "
            "with a failed nested call, censored, handle creation first, then by time); "
            "`nsysaudit analyze --json` lists them all"
        )
    return selection


def nccl_evidence(named_pids: str | None, schema_domains: Sequence[int], schema_pids: str, entry: str) -> str:
    """How the export shows NCCL's calls: its named domain's processes, the domains found by their
    payload schemas."""
    parts = []
    if named_pids is not None:
        parts.append(f"an NVTX domain named NCCL (NvtxDomainCreate) in pid {named_pids}")
    if schema_domains:
        ids = ", ".join(str(d) for d in schema_domains)
        parts.append(f"NVTX domain {ids} of pid {schema_pids}, which has no "
                     f"NvtxDomainCreate row: NCCL's by its payload schemas ({entry}) and API names")
    return "; ".join(parts) or "no NCCL range"


def nccl_nvtx_disabled(value: str) -> str:
    return f"the launched command's environment sets NCCL_NVTX_DISABLE={value}: NCCL records no NVTX range"


def bound_unknown_uncovered(reasons: Sequence[str]) -> str:
    return (f"the trace does not cover this moment ({', '.join(reasons)}): a free after its evidence ends would "
            "be missing, so no bound on free memory is claimed")


def telemetry_points_rule(points: int, repeats: int) -> str:
    return (
        f"every telemetry line of a traced process when there are at most {points}; otherwise the "
        f"first {points} lines whose event occurs at most {repeats} times (phases such as "
        "handoff, not a log of calls)"
    )


def stalls_listed_rule(calls: int) -> str:
    return f"the {calls} calls that blocked longest (all are counted in the sums)"


def stall_ranges_rule(ranges: int) -> str:
    return (f"per process and NVTX range holding a blocking call (a call counts in every range that holds it), "
            f"the {ranges} whose stalls took longest (then whose calls blocked longest)")


def attribution_rule(calls: int, stall_min_ns: int, rows: int) -> str:
    return (
        f"the work behind the {calls} longest waits of at least {stall_min_ns / 1e6:g} ms, "
        f"row by row with its launch (at most {rows:,} rows)"
    )


def outside_capture(bounds: str, sources: str) -> str:
    return f"outside the capture ({bounds} on the trace clock, from {sources})"


def diagnostics_unusable_rows(table: str) -> str:
    return f"{table} rows without an integer timestamp or a text: left out"



# How an object of the package shows itself (repr, a notebook's HTML) and the engine line.
def _found(kinds: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{n} {k}" for k, n in kinds) or "no finding"


def analysis_repr(verdict: str, kinds: Sequence[tuple[str, int]], library_calls: int, cuda_api_calls: int,
                  warnings: int) -> str:
    return (f"<Analysis {verdict}: {_found(kinds)}; {library_calls} library call(s), "
            f"{cuda_api_calls:,} CUDA API calls, {warnings} warning(s)>")


def result_repr(path: str, verdict: str, kinds: Sequence[tuple[str, int]], library_calls: int, failed_groups: int,
                warnings: int) -> str:
    return (f"<AnalysisResult {path!r}: {verdict}; {_found(kinds)}; {library_calls} library call(s), "
            f"{failed_groups} failed-call group(s), {warnings} warning(s)>")


def session_summary(
    path: str, kind: str, nsys_version: str | None, schema_version: str | None, sha256: str,
    counts: tuple[int, int, int, int, int], closed: bool,
) -> list[str]:
    """A notebook session's lines: the input, its digest, what was read (CUDA API calls, library calls,
    NVTX ranges, named threads, warnings)."""
    calls, libraries, ranges, threads, warnings = counts
    return [
        f"{path} ({kind}, nsys {nsys_version or 'unknown'}, schema {schema_version or 'unknown'})",
        f"sha256 {sha256}",
        f"{calls:,} CUDA API calls, {libraries:,} library calls, {ranges:,} NVTX ranges, {threads:,} named threads, "
        f"{warnings} warning(s)" + (" (closed)" if closed else ""),
    ]


def gpu_tables_summary(have: Sequence[str], absent: Sequence[str]) -> str:
    """A session's GPU tables: the kinds it has, the tables it lacks (their frames are empty)."""
    said = f"GPU tables: {', '.join(have)}" if have else "no GPU table"
    return said + (f"; no {', '.join(absent)} (those frames are empty)" if absent and have else
                   " (kernels(), memcpy(), memset(), synchronization() are empty)" if absent else "")


def session_html(first: str, rest: Sequence[str]) -> str:
    return f"<b>nsysaudit session</b> {first}<ul>{''.join(f'<li>{line}</li>' for line in rest)}</ul>"


def snapshot_repr(path: str, segments: int, blocks: int, entries: int) -> str:
    return f"<Snapshot {path!r}: {segments} segment(s), {blocks} block(s), {entries} history entries>"


def verification_repr(folder: str, seal: str, files: int, rerun: bool) -> str:
    how = ", inputs re-run byte-identical" if rerun else ""
    return f"<Verification {folder!r}: seal sha256:{seal} verified, {files} files{how}>"


NATIVE_NOT_USED = "not used (it could not read the CUDA API table; the polars engines did)"


def native_unavailable(why: str, *, detail: str = "", abi: int = 0, python_sqlite: str = "") -> str:
    """Why the native engine is not used: a few words, then the detail in parentheses."""
    if why == "not_built":
        return "not built (nsysaudit was installed without a C compiler or SQLite's header)"
    if why == "not_loadable":
        return f"not loadable ({detail})"
    if why == "stale":
        return f"stale (built from another native/scan.c: interface {detail}, not {abi})"
    if why == "single_threaded":
        return "not usable (Python's SQLite is built single-threaded: SQLITE_THREADSAFE=0)"
    return (f"on another SQLite (it links SQLite {detail}, Python's sqlite3 runs SQLite {python_sqlite}: one SQLite "
            "must read and check the rows)")



# Why an input does not meet its expectation (nsysaudit.batch.check, docs/check.md).
CHECK_NO_EXPECTATION = "no expectation for this file"


def check_verdict(verdict: str | None, expected: str) -> str:
    return f"verdict is {verdict}, expected {expected}"


def check_failed_calls(calls: int | None, at_most: int) -> str:
    return f"{calls} failed calls, at most {at_most} expected"


def check_censored(calls: int | None, reasons: Sequence[str], allowed: Sequence[str]) -> str:
    return f"{calls} censored library call(s) ({', '.join(reasons)}); allowed: {', '.join(allowed) or 'none'}"


def check_findings(found: int, expected: int) -> str:
    return f"{found} finding(s), expected {expected}"


def check_stalls(stalled_ns: int, calls: int, at_most_ms: float) -> str:
    return (f"host stalls took {stalled_ns / 1e6:,.1f} ms ({calls:,} call(s) that each blocked at least 1 ms), "
            f"at most {at_most_ms:g} ms expected")


def check_range_stalls(nvtx_range: str, pid: int | None, stalled_ns: int, budget_ms: float, pattern: str) -> str:
    return (f"host stalls in NVTX range {nvtx_range} (pid {pid}) took "
            f"{stalled_ns / 1e6:,.1f} ms, at most {budget_ms:g} ms expected for {pattern!r}")


def check_ranges_unlisted(ranges: int, listed: int, pattern: str) -> str:
    return (f"{ranges:,} NVTX ranges hold blocking calls, {listed} are listed: the "
            f"budget for {pattern!r} cannot be checked on every one")


def check_unexpected_finding(kind: str, api: str | None, return_code: int | None, enclosing: str) -> str:
    return f"unexpected finding {kind} {api} returned {return_code}{enclosing}"


def check_left_out(expectations: int) -> str:
    return f"{expectations} expectation(s) match no file checked: left out (--only-matching)"


def check_no_file(base: object) -> str:
    return f"matches no file (relative to {base})"



# The export cache's listing and pruning (nsysaudit cache), the scan's progress, a batch's counts.
def cache_leftovers(unfinished: int, foreign: int) -> list[str]:
    out = []
    if unfinished:
        out.append(f"{unfinished} unfinished export(s) (a running or killed nsys export)")
    if foreign:
        out.append(f"{foreign} other file(s), not this cache's: left alone")
    return out


def cache_pruned(removed: int, freed: int, unfinished_removed: int, kept_in_use: int) -> list[str]:
    out = [f"removed {removed} least recently used export(s), {size_word(freed)}"]
    if unfinished_removed:
        out.append(f"removed {unfinished_removed} unfinished export(s) left by a killed process")
    if kept_in_use:
        out.append(f"kept {kept_in_use} in use or used in the last minute, over the bound")
    return out


def scanning(rows: int, *, tolerant: bool = False) -> str:
    if tolerant:
        return f"re-reading {rows:,} CUDA API rows with the tolerant reader"
    return f"scanning {rows:,} CUDA API rows"


def batch_counts(inputs: int, analyzed: int, resumed: int, unusable: int, findings: int) -> str:
    return f"{inputs} input(s): {analyzed} analyzed, {resumed} resumed, {unusable} unusable; {findings} finding(s)"


AUDIT_DEPRECATED = "nsysaudit.audit is deprecated; use nsysaudit.audit_many (the batch's inputs table)"



def side_file_ignored(name: str, kind: str | None, size: int, wal: bool) -> str:
    """A journal or WAL file beside the export, not read (``kind``: what it is when not a regular file)."""
    if kind is not None:
        return f"{name} beside the export is not a regular file ({kind}): ignored, not opened"
    if wal:
        return (f"{name} beside the export ({size:,} bytes) is ignored, never read: the export is in "
                "rollback mode (like every nsys export), so a WAL beside it is not part of it")
    return f"{name} beside the export ({size:,} bytes) is ignored: a WAL-mode file has no journal"


def no_metadata_table(tables: Sequence[str]) -> str:
    return ("the export has neither META_DATA_EXPORT nor EXPORT_META_DATA (nsys 2020.3 and "
            f"older): the nsys and schema versions are unknown; its tables ({', '.join(tables)}) are read "
            "by probing")



TEMPLATES: Mapping[str, Callable[..., str]] = {
    f.__name__: f
    for f in (
        side_file_ignored, no_metadata_table,
        bound_unknown_uncovered, diagnostics_unusable_rows,
        process_not_in_processes, telemetry_rank_claim, launched_program_unknown, launched_by_name,
        launched_name_ambiguous, launched_shared, rank_not_stated, no_launched_command, not_the_launched_command,
        launched_rank_not_placed, launched_process_unknown,
        bound_unknown_conflict, bound_unknown_total_disagrees, bound_unknown_exceeded, memory_size_overflow,
        pool_events_without_pool, memory_events_without_size, pools_without_size, memory_collection_off,
        no_memory_table, memory_table_empty, pool_over_its_size, virtual_memory_note, free_calls_without_event_note,
        moment_unknown,
        cuda_api_problem, dangling_thread_name, threads_with_several_names, damaged_time_range, pair_limit,
        utc_clock_not_read, utc_no_stamp, utc_no_session_start, utc_mapping, anchors_no_clock,
        anchors_on_realtime, telemetry_without_pid, telemetry_pids_not_traced, anchor_range_missing,
        anchor_range_in_other_process, anchor_range_on_other_thread, anchor_lines_without_stamp,
        anchor_pairing_ambiguous, anchors_no_traced_process, anchors_all_skipped, anchors_no_range_named,
        anchors_none_matched, anchor_mapping, mappings_not_compared, mappings_compared, no_anchor_pair,
        anchor_residuals, telemetry_placed_outside_clock, no_mapping,
        found, found_on_helper_thread,
        library_refused, library_not_requested, library_unknown, library_domain_unused,
        library_not_traced, failed_outside_library_calls, shadowed_tables_read, nsys_warned,
        no_cuda_api_trace, empty_cuda_api_table, censored_library_calls, shadowed_tables_unread,
        failures_where_no_library_traced, unrecovered_out_of_memory, telemetry_failure_unexplained,
        library_calls_clean, tracing_recorded_no_library_call, no_allocation_failure_untraced, no_call_failed,
        undecided_rows, undecided_waits, unexamined_library_calls,
        snapshot_replay_below_zero, snapshot_segment_events_unmatched, launched_command_ambiguous, undecided_wait_times,
        undecided_call_rows, duplicate_correlation_id, allocation_correlation_shared, library_call_without_start,
        unknown_nvtx_domain, allocation_event_for_failed_call, memory_address_live_twice, memory_negative_size,
        deallocation_size_differs, memory_pool_overfull, telemetry_bad_lines, duration_overflow,
        line_not_utf8, line_invalid_json, line_unusable_value, line_nested_too_deep, line_not_object,
        line_without_event, line_event_not_text, line_clock_not_integer, line_without_clock, line_id_not_integer,
        nvtx_attribution_skipped, no_memory_events, memory_events_outside_capture, pool_events_outside_capture,
        cuda_api_rows_outside_capture, nvtx_ranges_outside_capture, damaged_index, damaged_free_list,
        capture_duration_disagrees,
        gpu_work_outside_capture, gpu_work_union_unknown, gpu_work_unreadable, unknown_schema_version,
        inconsistent_schema_version, unknown_schema_major, ambiguous_table, schema_version_not_a_version,
        schema_major_not_a_number, type_mismatch, allocation_size_unknown, invalid_utf8_text, dangling_library_name,
        library_call_without_end, reversed_library_range, duplicate_allocation_correlation, integer_column_mismatch,
        rows_disagree_on_value, rows_of_one_key_disagree,
    )
}


# A comparison's statements (nsysaudit.reports.compare): why a capture key differs by construction, which
# handoff line it shows, the nested allocation failure's presence, the nested calls of a paired call.
EXPECTED_CAPTURE_KEY = {
    "session": "identifies the capture session",
    "duration": "measured length of the run",
    "pid": "process id assigned by the OS",
    "arguments": "the arm's own command arguments",
}
HANDOFF_RULE = {True: "last handoff line at or before the first library call of interest",
                False: "last handoff line in the file"}
NESTED_FAILURE_IN_BOTH = "A nested allocation failure is present in both arms"


def nested_failure_in_one_arm(present: str, count: int, what: str, absent: str, censored_there: int) -> str:
    text = f"A nested allocation failure is present in {present} ({count}: {what}) and absent in {absent}"
    if censored_there:
        text += f" as far as its trace goes ({censored_there} library call(s) censored there)"
    return text


def nested_failure_in_neither(censored: bool) -> str:
    text = "No nested allocation failure is in either trace"
    if censored:
        text += " (but see what the comparison does not establish: coverage is censored)"
    return text


def nested_calls_compared(same: bool, calls: int) -> str:
    if same:
        return f"The traced nested calls are the same in both arms ({calls:,} calls, same api and return code counts)"
    return "The traced nested calls differ between the arms (api and return code counts)"


# An NCCL call's words (nsysaudit.reports.nccl): its helper thread, the mappings before a failure, the
# telemetry's NCCL error line, what the call allocated.
def nccl_helper_thread(calling_tid: object, calls: int, tid: int) -> str:
    return (f"the call ran on tid {calling_tid}, and all {calls:,} CUDA API calls of tid "
            f"{tid} lie inside it (NCCL runs a communicator's initialization on a thread it starts)")


def nccl_mapped(count: int, each: str) -> str:
    return f"{count} mapping(s) of {each} B (their cuMemSetAccess memory events)"


def nccl_error_line(line: int, event: str, gap_ms: float | None, said: str) -> str:
    when = f", {gap_ms:.3f} ms after this call began" if gap_ms is not None else ""
    return f"telemetry line {line} ({event}{when}) records NCCL's error: {said}; "


def nccl_out_of_memory_confirmed(api: object, return_code: object, code: str) -> str:
    return f"the trace confirms an out-of-memory: {api} returned {return_code} ({code})"


NCCL_OUT_OF_MEMORY_NOT_SHOWN = ("the trace does not show an out-of-memory behind it: this call's return does not "
                                "mean one")
NCCL_ALLOCATED = "from the memory events of the calls inside it"


def nccl_allocated(arm: str, api: str, what: str, device_bytes: int, size: str, calls: int, apis: str,
                   outcome: str) -> str:
    return (f"{arm}: {api} ({what}) allocated {device_bytes:,} B of device memory ({size}, "
            f"{NCCL_ALLOCATED}) in {calls} {apis} call(s), {outcome}")


def nccl_pinned(host_bytes: int, calls: int, apis: str) -> str:
    return f"; and {host_bytes:,} B of pinned host memory in {calls} {apis} call(s)"


# A finding's sentence in the answer (nsysaudit.reports.answer): what its failed call follows.
def allocations_before(comma: bool, count: int, each: str) -> str:
    return f"{',' if comma else ''} after {count} successful allocation(s) in it ({each} B)"


def first_allocation(comma: bool) -> str:
    return f"{',' if comma else ''} the first allocation in it"


def after_stream_capture(since: str, events: int, begin: object, end: object) -> str:
    return (f", {since} after a stream capture that recorded {events} event(s) ({begin} .. {end}); the trace "
            "does not say which event the wait used")


def short_after_stream_capture(failed: str, thread: str) -> str:
    return f"{failed} on {thread}, after events were recorded inside a stream capture"


# --- the outline's sentences: answers, sections, tables' captions (render/) ---
# The answer's labels: what an entry of the answer is (render/outline.py).
HELD = "held"
HELD_AT_START = "held at its start"
REPORTED = "reported"
CENSORED = "censored"
STALL = "stall"
ALSO = "also"
MORE_CENSORED = "and {n} more censored library call(s)"
# The comparison's answer: its sections' titles (the terminal writes them in lower case).
RANKS_TITLE = "The ranks"
ARMS_TITLE = "The arms"
ARM_LINE = "{verdict}, {findings}"
ARM_FINDINGS = "{n} finding(s): {kinds}"
ARM_NO_FINDING = "no finding"
REFER_TERMINAL = "the findings in full: nsysaudit analyze {input}"
REFER_MARKDOWN = "the findings in full: the {arm} arm's section below"
MEMORY_AT_CALL_TITLE = "Memory at the call"
NOT_ESTABLISHED_TITLE = "Not established"
STALLS_TITLE = "Host stalls"

# The allocator's own view (memory snapshots, docs/ledger.md): the answer's line at a finding, the
# section of the details, the comparison's lines. ``{...}`` values are formatted by the outline
# (bytes as "139.1 GiB", counts with thousands separators, "unknown" for null).
ALLOCATOR = "allocator"
ALLOCATOR_TITLE = "The allocator's own view (memory snapshots)"
SNAPSHOT = ("snapshot {index}: {path} ({size_bytes} B), {backend} allocator, {segments} segment(s), {reserved} "
            "reserved and {allocated} allocated when it was taken; a history of {entries} entries; {clock}")
SNAPSHOT_CLOCK = {True: "its clock checked against the trace ({method})",
                  False: "its clock NOT checked against the trace: its moments are unverified"}
SNAPSHOT_NOTES = {
    "expandable_segments": "expandable segments: {segments} of its segments, {map_entries} map and unmap entries",
    "cuda_malloc_async_backend": ("the cudaMallocAsync backend, which tracks no blocks ({segments} segment(s), "
                                  "{entries} history entries)"),
    "trace_shows_memory_pool": ("the trace shows {allocations} allocation(s), {bytes} B, from a CUDA memory pool: "
                                "outside the snapshot"),
    "no_history": "no history recorded: only its {segments} segment(s) when it was taken",
    "history_starts_with_segments": "the allocator held {reserved_before_bytes} B before its history's first entry",
    "replay_below_zero": ("its history and its segments disagree: {quantity} on device index {device_index} "
                          "replays to {bytes} B before the history"),
    "segment_events_unmatched": "{count} segment event(s) inside the capture match no memory event of the trace",
}
SNAPSHOT_NOTE_UNKNOWN = "note {code}: {values}"  # a code this version has no words for
WARNING_NOTES = ("replay_below_zero", "segment_events_unmatched")
SEGMENTS_RELEASED = ("{arm}: its caching allocator gave {segments} segment(s), {bytes}, back to CUDA in its "
                     "history (snapshot {snapshot})")
NO_SNAPSHOT = "{arm}: no memory snapshot given"
ALLOCATOR_CHANGE = ("the caching allocator at {where}: {observe_reserved} reserved in observe, {release_reserved} "
                    "in release; inactive {observe_inactive} against {release_inactive}")
AT_HANDOFF = "the telemetry handoff"
AT_CALL = "{api}'s start (its {role} thread's call {ordinal})"
THREAD_ROLE = {"main": "main", "other": "non-main"}
# What a comparison does not establish (compare's ``not_established``), by code (reports/compare.py).
NOT_ESTABLISHED = {
    "censored_library_call": (
        "The comparison cannot establish whether an allocation failed inside {api} ({role}, call #{ordinal}) "
        "{arms_word} from the traces alone: the call is censored in {where} ({reasons}), so the absence of a "
        "failed allocation there is not evidence that none failed"),
    "censored_library_call_further": (
        "{count} further library call(s) of the {arm} arm are censored: the absence of a failure inside them is "
        "not evidence that none failed"),
    "no_cuda_api_trace": "The {arm} export has no CUDA API trace: nothing about CUDA calls in it is established",
    "different_version": (
        "The arms were exported by different or unknown {label}s (observe {observe}, release {release}): a "
        "difference between them may come from the tool, not the run"),
    "different_capture_options": (
        "The arms were captured with different options (META_DATA_CAPTURE: {keys}): a difference between them "
        "may come from what was traced, not from what the program did"),
    "no_telemetry": (
        "No telemetry was given for the {arm} arm: its memory state at the handoff and the position of its calls "
        "relative to the application's boundaries are not known"),
    "alignment_not_checked": (
        "The {arm} arm's telemetry clock alignment is not checked: positions relative to its telemetry boundaries "
        "are unverified"),
    "no_handoff_snapshot": "The {arm} arm's telemetry has no handoff snapshot: its memory state then is unknown",
    "allocator_view_in_one_arm": ("No memory snapshot was given for the {arm} arm: what its caching allocator held "
                                  "(reserved, inactive, by which stack) is not known there, only what its trace shows"),
    "snapshot_clock_not_checked": ("A memory snapshot of the {arm} arm is not checked against its trace's clock: the "
                                   "allocator's figures at its moments are unverified"),
    "single_run_per_arm": (
        "Each arm is one run: the comparison shows how these two traces differ, not that the change between the "
        "arms causes the difference, nor that it recurs"),
}

# The device-memory ledger (render/memory_outline.py, docs/ledger.md).
MEMORY_TITLE = "Device memory (CUDA_GPU_MEMORY_USAGE_EVENTS)"
MEMORY_LEDGER_FROM = "ledger from {allocations} allocation and {deallocations} deallocation events"
MEMORY_NO_LEDGER = "no ledger: {why}"
MEMORY_DEVICE = "device {device} {name}: total {total}; allocated {allocated} B in {events} events"
MEMORY_DEVICE_FREED = ", released to the device {freed} B; peak device-resident live {peak} B at {at} ns"
MEMORY_PROCESS = "pid {pid}: live at end {live} B; allocations {calls}"
MEMORY_BY_MECHANISM = "by mechanism"
MEMORY_MECHANISM = "{mechanism} {allocations} allocation(s) of {allocated} B, {deallocations} deallocation(s)"
MEMORY_POOL = ("CUDA memory pool of pid {pid} at {address} on device {device}: size at end {size} B (peak {peak} B), "
               "{used} B in use; {trims} trim(s){destroyed}")
MEMORY_POOL_DESTROYED = ", destroyed"
MEMORY_TABLE = "at each finding, library call of interest and telemetry line, device {device} of {total}"
MEMORY_AT_COLUMN = ("at", "(trace ns)")  # a heading in lines: the terminal stacks them, Markdown joins them
MEMORY_BYTES_COLUMNS = (("process", "live (B)"), ("all processes", "live (B)"), ("free at", "most (B)"))
MEMORY_AT = "at {label}: {what}"
MEMORY_NO_DEVICE = "no traced device"
MEMORY_NO_EVENTS = "process {pid} has no memory event, so its device is unknown; every traced device is shown"
MEMORY_NOT_COUNTED = "not counted: {what}"

# The details' sections (render/details_outline.py).
CENSUS_TITLE = "Census"
CENSUS_LEAD = "{calls} CUDA API calls, {nonzero} with a non-zero return"
FAILED_CALLS_TITLE = "Failed calls no finding explains"
FAILED_CALLS_NONE = "none: no failed call outside the findings"
FAILED_CALLS_LEAD = "{total} in {groups} group(s)"
FAILED_GROUP = ("{count} x {api} returned {code} ({name}){oom} on pid {pid} tid {tid} thread {thread}, {where}, "
                "{span}, e.g. correlation ids {examples}")
OUT_OF_MEMORY = " [out of memory]"
FAILED_IN_RANGE = "inside NVTX range {range}"
FAILED_IN_NO_RANGE = "in no NVTX range"
STRADDLES = "straddling a library call's edge"
UNEXAMINED = "overlapping a library call the pair limit left unexamined"
NAME_UNKNOWN = "(name unknown)"
END_AT_STOP = "unknown (recorded {recorded}: the capture's stop)"
CAPTURE_TITLE = "Capture"
CAPTURE_BOUNDS = "{start} .. {stop} ns on the trace clock (from {source})"
CAPTURE_UNKNOWN = "bounds unknown (no DIAGNOSTIC_EVENT and no ANALYSIS_DETAILS)"
NO_DIAGNOSTICS = "no nsys diagnostics (DIAGNOSTIC_EVENT) in this export: silence about lost events proves nothing"
DIAGNOSTIC = "nsys {severity} at {at} ns{who} [{category}]: {text}"
DIAGNOSTIC_PID = " (pid {pid})"
LIBRARY_SOURCE = "library {library}: {status}, {calls} call(s){by_api}"
HELPER_THREAD = "tid {tid}: every one of its {calls} CUDA API calls lies inside {api} (tid {calling})"
UNNAMED_CALL = "an unnamed call"
COVERAGE_TITLE = "Coverage by trace source and process"
NO_TRACE_ROWS = "no trace rows"
NO_CUDA_API_TRACE = "the export has no CUDA API trace"
CENSORED_CALL = "{api} (pid {pid}, tid {tid}) {span}: {why} [{codes}]"
TRACE_ENDS = "the process's CUDA API trace ends at {last}, {before} ns before the call ends"
DEVICES_TITLE = "Devices and ranks"
WARNINGS_TITLE = "Warnings"
# Findings, library calls, and a call's place among the telemetry lines.
FINDINGS_TITLE = "Findings"
FINDINGS_LEAD = "{n} finding(s)"
NO_FINDINGS = "none: no failed call inside or across a library call, and no failed wait on a captured event"
FINDING = "{api} returned {code} ({name}){oom}, correlation id {correlation}"
UNKNOWN_CODE = "unknown code"
FINDING_WHERE = "pid {pid} tid {tid} thread {thread}, {span}"
REQUESTED = ", requested bytes {bytes}"
INSIDE = "inside {api} {span} ({source}, coverage {coverage})"
ALLOCATIONS_BEFORE = "after {count} successful allocation(s) in it{each}"
AFTER_CAPTURE = ("after the stream capture on pid {pid} tid {tid} thread {thread}: {begin} at {start} .. {end} "
                 "ending {stop} ns")
CAPTURE_RECORDS = ("{count} event record(s) inside the capture (at {at}{more} ns); the wait failed {since} after the "
                   "capture ended")
MORE_RECORDS = ", and {n} more"
UNKNOWN_TIME = "an unknown time"
CAPTURES_BEFORE = " ({n} such captures before it; the latest is shown)"
TELEMETRY = "telemetry"
POSITION_AFTER = "{ms} ms after {event} (line {line})"
POSITION_BEFORE = "{ms} ms before {event} (line {line})"
POSITION_NONE = "no telemetry line placed around it"
POSITION_DURING = "; during it: {event} (line {line}, {ms} ms after its start)"
POSITION_METHOD = " [{method}, {checked}]"
CLOCK_CHECKED = {True: "clock alignment checked", False: "clock alignment NOT checked"}
IN_FORCE_LABEL = "in force"
IN_FORCE = "{event} (line {line}, {ms} ms earlier): {values}"
LIBRARY_CALLS_TITLE = "Library calls"
LIBRARY_CALLS_LEAD = "{n} library call(s)"
NO_LIBRARY_CALLS = "none: no library API ranges (cuBLAS/cuDNN/NCCL) in this export"
LIBRARY_CALLS_SHOWN = " (censored and failing first; {n} shown, all in the JSON)"
LIBRARY_CALL = "{api} {source} pid {pid} tid {tid} thread {thread}"
LIBRARY_CALL_SPAN = "{span} ({duration}), coverage {coverage}{why}"
DURATION_UNKNOWN = "duration unknown"
LIBRARY_CALL_NESTED = ("{nested} nested CUDA API call(s), {failed} failed, {straddling} straddling; allocated by "
                       "nested calls: {allocated}")
ALLOCATED_TRACED = " ({bytes} B in the trace{unknown})"
SIZE_UNKNOWN = ", {n} allocation(s) of unknown size"
# The verdict, the telemetry and its clock alignment.
VERDICT_TITLE = "Verdict"
ALIGNMENT_TITLE = "Clock alignment"
NO_TELEMETRY = "no telemetry given"
CHECKED = {True: "checked", False: "NOT checked"}
ALIGNMENT_METHOD = " (positions use {method}: trace_ns = {field} + ({offset}))"
TELEMETRY_FILE = "telemetry {path}, sha256 {sha256}, {events} line(s) used, {bad} bad line(s) skipped"
ARM_TELEMETRY_FILE = "telemetry {path} ({size} bytes, sha256 {sha256})"
ALIGNMENT_CHECK = "{check}: {detail}"
CHECK_MARK = {True: "ok", False: "FAILED", None: "not run"}
ANCHOR = "anchor {event} (line {line}) = NVTX {nvtx} {edge} (pid {pid} tid {tid}): residual {residual}, with UTC {utc}"
NOT_AN_ANCHOR = "not an anchor: {event} (line(s) {lines}): {reason}"
REASON = "reason"
NOTE = "note"
TIMELINE_TITLE = "telemetry timeline (trace clock)"
# A comparison's differences (render/comparison_outline.py).
DIFFERENCES_TITLE = "Differences"
NESTED_FAILURE_TITLE = "Nested allocation failure"
FINDINGS_BY_KIND_TITLE = "Findings by kind"
NO_FINDING_IN_EITHER = "no finding in either arm"
PAIRS_TITLE = "What the library calls allocated, arm by arm"
NO_PAIRS = "no library call of interest in either arm"
PAIR = "{api}, {role} thread, call #{ordinal}"
FAILING_TITLE = "Failing calls in each arm (the whole export, and nested in the library calls of interest)"
NO_FAILING = "no failing call in either arm"
FAILING_WHERE = {"only_in_observe": "observe only", "only_in_release": "release only", "in_both": "both"}
FAILING_SCOPE = {"census": "whole export", "nested": "library calls"}  # nested in the library calls of interest
SOURCES_TITLE = "Sources and capture options"
NSYS_VERSION = "nsys version"
SCHEMA_VERSION = "schema version"
INPUT_KIND = "input kind"
SOURCE_VERSION = "{label}: observe {observe}, release {release} ({same})"
SAME = {True: "same", False: "DIFFERENT", None: "unknown"}
CAPTURE_OPTIONS = ("capture options (META_DATA_CAPTURE): {keys} keys compared, {same} the same, {differ} differ, "
                   "{expected} differ as expected")
KEY_DIFFERS = "differs: {key}: observe {observe}, release {release}"
KEY_DIFFERS_AS_EXPECTED = "differs as expected: {key} ({why}): observe {observe}, release {release}"
ABSENT = "absent"
LEDGER_BOTH_TITLE = "Device memory (the ledger, both arms)"
ALLOCATOR_BOTH_TITLE = "The allocator's own view, both arms"
HANDOFF_TITLE = "Memory at the handoff (telemetry)"
NO_HANDOFF = "no handoff snapshot in either arm's telemetry"
NOT_ESTABLISHED_DETAILS_TITLE = "What this comparison does NOT establish"
# The host stalls' section (render/details_outline.stalls_section; the statements are reports/stalls.py's).
STALLS_DETAILS_TITLE = "Host stalls"
STALLS_BY_KIND = "by kind: {kinds}"
STALLS_IDLE = "; of the stalls' time, {idle} with no GPU work of their processes"
STALLS_IDLE_UNKNOWN = "; how much of the stalls' time no GPU work covered is unknown (see warnings)"
STALLS_OWN = " (their own copies and memsets ran {own} more)"
STALLS_WAITED = "waited {waited}{own}{idle}"
STALLS_ROWS = ("GPU rows read: {rows}; synchronization rows joined to the calls described (the stalls, the "
               "longest): {joined}")
STALLS_RANGES = ("per NVTX range ({shown} of {total} shown, the longest stalls first; a call counts in every range "
                 "that holds it)")
STALLS_CALLS = "the calls that blocked longest ({shown} of {total} shown; the JSON lists {listed})"
STALL_SPAN = "trace ns {start} .. {end}"
# The glance under the answer (render/outline.glance): one line per part of the details.
def glance_census(calls: int, nonzero: int, library_calls: int, censored: int) -> str:
    return (f"census: {calls:,} CUDA API calls, {nonzero:,} non-zero returns; "
            f"{library_calls:,} library call(s), {censored} censored")


def glance_ledger(events: int, moments: int) -> str:
    return f"device memory: ledger of {events:,} events, read at {moments} moment(s)"


GLANCE_NO_LEDGER = "device memory: no ledger ({why})"
NO_RANK_STATED = "none stated"


def glance_devices(devices: int, ranks: str, with_rank: int, processes: int) -> str:
    return f"devices: {devices}; ranks: {ranks} ({with_rank} of {processes} process(es) with a rank)"


GLANCE_TELEMETRY = "telemetry: {events} line(s), clock alignment {checked}"  # checked: CHECKED's
GLANCE_FULL_REPORT = ("the full report: --details (census, calls, memory, library calls, coverage, alignment); "
                      "every value: --json")


# What a command prints first (render/report_outline: the heads): analyze's input, compare's inputs,
# where a sealed report was written, what ``nsysaudit verify`` checked.
HEAD_TITLE = "nsysaudit {command}"
INPUT_HEAD = "{kind}, sha256 {sha256}, nsys {nsys}, schema {schema}"
ENGINE_LINE = "engine {engine}, SQLite {sqlite}"
NATIVE_UNAVAILABLE = " (native engine {why})"
EXPORT_LINE = "export sha256 {sha256} ({hit})"
CACHE_HIT = {True: "cache hit", False: "exported now"}
COMPARED_INPUT = "{role}: {name}  sha256 {sha256}  {size} bytes"
SEALED_TITLE = "sealed report:"
SEALED_FULL_REPORT = "the full report: {html} (a browser), report.md, report.json"
VERIFIED_TITLE = "verified"


def verified_files(files: int) -> str:
    return f"{files} files match manifest-sha256.txt and tagmanifest-sha256.txt; no extra file"


VERIFIED_INPUT = "input {path} ({role}) matches the sealed {name}: sha256 {sha256}, {size} bytes"
VERIFIED_RERUN = "re-running the analysis gives byte-identical report.json, report.md and inputs-sha256.txt"


# report.md's own lines (render/report_outline): the seal, the input, a library call of an arm, the
# handoff snapshot, the options. Templates: their ``{...}`` values are trace text, escaped by the back-end.
SEAL_SENTENCE = (
    "The seal of this report is the SHA-256 of `tagmanifest-sha256.txt` beside it, which pins every file of "
    "the folder; `nsysaudit verify` checks every digest"
)
INPUT_TITLE = "Input"
INPUTS_TITLE = "Inputs"
INPUT_LINE = "Input {name} ({kind}, {size} bytes, sha256 `{sha256}`), nsys {nsys}, schema {schema}"
ARM_TITLE = "The {arm} arm"
LIBRARY_CALL_HEADING = "{api} on pid {pid} tid {tid} ({role} thread, name {name})"
ARM_CALL_SPAN = "{source}, {start} to {end} ns, coverage **{coverage}**"
CENSORED_TRACE_ENDS = " ({why}; CUDA API trace ends at {last} ns)"
NESTED_CALLS_LINE = "nested CUDA API calls: {calls}, of which {failed} failed"
NESTED_ALLOCATIONS_LINE = ("nested allocation calls: {calls}: {succeeded} succeeded ({bytes} bytes{unknown}), "
                           "{failed} failed")
UNKNOWN_SIZES = ", {n} of unknown size"
NESTED_BY_API_TITLE = "nested calls by api and return code"
STRADDLING_CALLS = "calls straddling its edges: {n}"
NO_HANDOFF_SNAPSHOT = "Handoff snapshot: none (no handoff line in the telemetry)"
NOT_ON_TRACE_CLOCK = "not placed on the trace clock"
HANDOFF_AT = "at trace {trace_ns} ns via {via}"
HANDOFF_SNAPSHOT = "Handoff snapshot (telemetry line {line}, {at}; {chosen_by} of {lines}): {values}"
LIBRARY_CALLS_OF_INTEREST_HEADING = "Library calls of interest ({shown} of {total})"
SELECTION = "selection: {selection}"
OPTIONS = "options: library domains {domains}; max pairs {max_pairs}"
OPTIONS_TELEMETRY = ("; telemetry event key {key}, clocks {clocks}, anchors {anchors}, clock tolerance {tolerance} "
                     "ns{lenient}")
LENIENT = ", lenient"
DEFAULT_ANCHORS = "the default rule"
COMPARISON_MD_TITLE = "nsysaudit comparison: observe arm vs release arm"
ANALYSIS_MD_TITLE = "nsysaudit analysis: {path}"


# The devices and ranks in words (nsysaudit.reports.ranks): where a finding ran, who used a device,
# whether two arms are ranks of one job, and what each rank's call did.
DEVICES_WHICH_UNKNOWN = "devices {devices} (which one the failed call used is unknown)"
DEVICE_UNKNOWN_NO_EVIDENCE = "device unknown (the process has no memory event and no CUDA context in the export)"
DEVICE_UNUSED = "; no traced process used it"
SAME_JOB_WHY = {
    "no_two_ranks": "the arms do not both state one rank",
    "world_sizes": "their world sizes differ ({observe} and {release})",
    "same_command": "the same launched command and arguments",
    "commands": "their launched commands differ or are not recorded: the export does not say they are one job",
}
TWO_RANKS = "The arms are two ranks: {observe} and {release}"
FAILING_AGAINST_HEALTHY = "; rank {failing} failed and rank {healthy} did not: the failing rank against a healthy one"
RANK_CALL = {True: "{api} (call #{ordinal} off the main thread)", False: "{api} (call #{ordinal} on the main thread)"}
RANK_AT_CALL = "At {call}, rank {rank}: {calls}; at its start {holder}"
IDENTITY_WHY = "the rank's own identity (its rank, local rank, and the devices it sees)"


# The timeline pictures' titles and labels (render/pictures.py).
PICTURE_WHOLE_CAPTURE = " · nothing to focus on (nothing failed, no library call): the whole capture"
PICTURE_ZOOM_TITLE = "zoom on the focus's library call, thread {thread}"
PICTURE_MEMORY_TITLE = "device memory, device {device}{name}: how little could have been free"
PICTURE_MEMORY_TOTAL = (" device total {total} B ({gib} GiB); red: at most this much free, blue: held by traced "
                        "processes (log scale)")
PICTURE_LIVE_AXIS = "GiB live (device total unknown)"
PICTURE_EMPTY_WINDOW = "no thread has anything in this window"
PICTURE_END_UNKNOWN = " · end unknown (the capture's stop)"

# How to read the timeline pictures (render/html.py writes it under them; it holds HTML markup).
HOW_TO_READ_PICTURE = (
    "One lane per thread (its name from ThreadNames, or \u201cname unknown\u201d when the export has none; "
    "pid and tid below it). Blue bars are library calls (cuBLAS, cuDNN); the ticks on them are the CUDA API "
    "calls the trace recorded, grey when they returned 0, green for a successful allocation, red with a "
    "\u25bc for a failed call (labelled with its api and return code), orange for a non-zero return that is "
    "not a failure. Violet bands are NVTX ranges. Dashed vertical lines are the application\u2019s telemetry "
    "lines placed on the trace clock (dotted, \u201cunverified\u201d, when the clock alignment is not checked); "
    "the solid black line is the capture\u2019s stop. Hatched grey parts are <strong>not covered</strong>: "
    "after the capture stopped, and after a process\u2019s last CUDA API record when the analysis found its "
    "CUDA trace censored. Nothing in a hatched part is evidence of absence. Below the context, each arm\u2019s "
    "zoom shows the focus\u2019s library call alone, every nested call to scale."
)


# The host stalls' statements (nsysaudit.reports.stalls): kinds, a call's relation to the stream of the
# work behind it, where that work was launched, a call's, a range's, a process's and an arm's sentence.
STALL_WORK_WORDS = {"kernel": ("kernel", "kernels"), "memcpy": ("copy", "copies"), "memset": ("memset", "memsets")}
STALL_KIND_WORDS = {
    "explicit": ("synchronization", "synchronizations"),
    "sync_copy": ("synchronous copy", "synchronous copies"),
    "async_copy": ("asynchronous copy of pageable memory", "asynchronous copies of pageable memory"),
    "sync_memset": ("synchronous memset of host memory", "synchronous memsets of host memory"),
    "free": ("cudaFree of device memory", "cudaFrees of device memory"),
}
BLOCKING_CALLS = ("blocking call", "blocking calls")
STALL_RELATION = {
    "device": "it synchronized the whole device",
    "event": "it waited on an event, whose stream the trace does not record",
    "unrecorded": "which stream it synchronized is not recorded",
    "same": "the stream it synchronized",
    "other": "not the stream it synchronized, stream {stream}",
}
STALL_LAUNCHED_AFTER = "{rows} row(s) ({share}) launched after it began, on another thread"
STALL_LAUNCH_UNKNOWN = "{rows} row(s) ({share}) whose launch no single CUDA API row of the trace holds"
STALL_ROW_LIMIT = "not every row attributed (the row limit)"
STALL_CALL = "{api} on {thread}, correlation {correlation}, blocked the host {blocked}"
STALL_OWN_WORK = "; its own {own} ({kinds}{size}) ran {ran} of it"
STALL_MORE_STREAMS = "; and work on {more} more stream(s)"
STALL_NOTHING_ELSE = "; no other {seen} of the process ran meanwhile"
STALL_NO_TABLE = "; the export has no usable {tables} table: of those nothing is known"
STALL_IDLE = "; no GPU work of the process at all for {idle} of it"
STALL_RANGE_IDLE = ", {idle} with no GPU work of the process"
STALL_PROCESS = "pid {pid}{name}: {calls} of at least {at_least} blocked the host {stalled}"
STALL_SHARE = ", {share}% of its {span} CUDA API trace"
GLANCE_NO_STALLS = "host stalls: no call that blocked the host"
GLANCE_STALLS = "host stalls: {calls} blocked the host {blocked}"
STALLS_OF_ARM = "{label}: {calls} blocked the host {blocked}"
STALLS_BEHIND_LISTED = ", {busy} of it behind stream {stream} (in the calls listed)"


# What a timeline shows, as notes and labels (nsysaudit.reports.timeline): the focus, the lanes, the
# parts not covered, the memory panel, the window.
NO_CODE_NAME = "no name for this code"
FOCUS_STALL = "stall {n} (--around), {api} blocked the host {ms} ms"
FOCUS = {
    "censored": "the first censored library call",
    "after": "the first library call after {boundary}",
    "failed": "the first failed CUDA call ({name})",
    "nothing": "nothing to focus on (nothing failed, no library call): the whole capture",
}
LANES_NOT_SHOWN = "{more} more thread(s) with something in the window are not shown"
NOT_COVERED = {"not_started": "not covered: capture not started",
               "trace_stops": "not covered: pid {pid}'s CUDA trace stops ({where})"}
READ_AT = {True: "at the end of the capture", False: "at the focus"}
MEMORY_DEVICE_CHOSEN = {True: "the device the focus's process allocated most on",
                        False: "the focus's process has no memory event: the device with the most allocated"}
MEMORY_PICTURE_NOTE = "memory: device {device} ({why}); all traced processes' device-resident live bytes"
SHARED_WINDOW = "both arms share one window, relative to each arm's own origin"
FOCUS_END = {True: "the end of the focus's library call", False: "the end of the focus"}
WINDOW_GIVEN = "{ms} ms (--window), centred on the focus"
WINDOW_WHOLE = "{ms} ms, the whole capture, widened {pad} each side"
WINDOW_TO = "{ms} ms, from the origin to {to}, widened {pad} each side"
_LANES_WITH = " with a library call, failed CUDA call, NVTX range or telemetry line in the window"
LANES_NOTE = {True: "lanes: every thread" + _LANES_WITH,
              False: "lanes: the focus's thread and every thread" + _LANES_WITH}
