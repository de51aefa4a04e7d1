"""Every sentence nsysaudit shows a user, keyed by the fact or reason code it words (issue 35).

The analysis returns facts and reason codes with their values; the documents keep the code and the
one statement made here from it; the outline (render/outline.py) arranges those statements, and the
terminal, Markdown and HTML back-ends only lay them out. Error messages may stay with their errors.

A new finding's words go into the section of its kind below; nowhere else writes a sentence of five or
more words for a user (tests/test_words.py).
"""

from __future__ import annotations

# --- reasons, warnings and statements of the analysis and the documents (read/, analysis/, reports/) ---


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
