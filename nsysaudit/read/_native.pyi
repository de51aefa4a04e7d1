# The types of the extension module built from native/scan.c (its binding, CPython's C API, is at
# the end of that file). nsysaudit/read/native.py is its only caller.
from collections.abc import Sequence
from typing import TypedDict

from typing_extensions import Buffer

ABI: int
CORR_GROUP: int
SQLITE_HEADER_VERSION: str

class Error(RuntimeError): ...

class Plan:
    """A table's b-tree (native/scan.c's plan_table): its interior pages checked, its leaves listed."""

    @property
    def why(self) -> str: ...
    @property
    def leaves(self) -> int: ...
    def runs(self, n: int, /) -> list[tuple[int, int, int, int]]: ...

class ScanResult(TypedDict):
    rows: int
    mismatch_rows: int
    counted: int
    page_rows: int
    handovers: int
    handover: str
    check: str
    selected: tuple[bytes, bytes, int]  # int64 values (6 a row), a null bit per column a row, rows
    marked: tuple[bytes, bytes, int]
    keyed: tuple[bytes, bytes, int]  # the rows of a wanted key, any return, in rowid order
    spans: list[tuple[int | None, int | None, int | None, int]]
    key_rows: bytes
    key_first_name: bytes
    key_first_null: bytes
    corr_lo: bytes  # per group of CORR_GROUP leaves read from the pages: its least correlationId
    corr_hi: bytes
    corr_seen: bytes  # 1: a row of the group carries one (no group: SQLite read the run)
    problems: tuple[int, int, int, int, int, int, int]

def scan(
    uri: str,
    sql: str,
    lo: int,
    hi: int,
    w_gtid: Buffer,
    w_start: Buffer,
    w_end: Buffer,
    strings: Buffer,
    check_strings: bool,
    marked: Buffer,
    counted: Buffer,
    key_gpid: Buffer,
    key_corr: Buffer,
    plan: Plan | None = None,
    first: int = 0,
    last: int = 0,
    classes: bytes = b"",
    layout: Sequence[int] | None = None,
    want_gpid: Buffer | None = None,
    want_corr: Buffer | None = None,
) -> ScanResult: ...
def plan(uri: str, table: str, /) -> Plan: ...
def check(uri: str, tables: Sequence[tuple[str, bytes]], /) -> list[str]: ...
def read(uri: str, sql: str, ncol: int, collect: bool) -> tuple[bytes, bytes, int, int]: ...
def read_pages(
    uri: str,
    plan: Plan,
    first: int,
    last: int,
    classes: bytes,
    layout: Sequence[int],
    w_gpid: Buffer | None,
    w_start: Buffer | None,
    w_end: Buffer | None,
    bounds: tuple[int, bool, int, bool],
    columns: tuple[int, int, int],
    keys: Buffer | None,
    key_column: int,
    reduce: tuple[object, ...] | None = None,
    /,
) -> tuple[bytes, bytes, int, int, int, str, str, bytes | None, bytes | None]: ...
def sqlite_version() -> str: ...
def sqlite_source_id() -> str: ...
