"""SQL over a version, run by DuckDB: find samples by their fields and derived values.

The version is one view, `v`: `_index` (the sample's index in the version), every stored field
(the row hashes apart) and the derived columns (`derived.py`). The scalar fields, the derived
values and `_index` are held in memory (Arrow tables from the shards' sidecars, which carry a copy
of the scalars: read once per query session); the other fields (text, tokens, media, trajectories)
stay in the shards, each handed to DuckDB as a pyarrow dataset of its Parquet file (DuckDB pushes
the columns it needs into the scan) and lined up with the in-memory columns by POSITIONAL JOIN. A
query that names none of those fields runs on the in-memory view alone, ~10x faster (DuckDB's JSON
syntax tree says which names a query uses).

DuckDB itself is shut in before a query runs: external access off (no file, no network: it reads
only what was handed to it; `read_csv('/etc/passwd')` and `COPY ... TO` are refused), no
extensions, the configuration locked, a memory limit, and a time limit (`interrupt`). Only one
SELECT statement is taken. The shards are read as stored, not re-hashed: a query finds samples; the
sample they open (`show`, the viewers) is read through the verified cache.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.extras import require
from dsinspect.inspect.derived import Derived, derivations
from dsinspect.inspect.floats import from_duckdb
from dsinspect.inspect.query_errors import Part, syntax_error, unknown_column
from dsinspect.inspect.sidecars import derived_tables
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["VersionQuery", "QueryResult", "MAX_ROWS"]

MAX_ROWS = 10_000       # rows one query returns at most (a page of the viewers is far less)
TIMEOUT = 60.0          # seconds
MEMORY = "2GB"


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]
    sql: str
    address: str                     # the version's address: samples are f"{address}:{_index}"
    truncated: bool = False          # more rows matched than were returned
    total: int | None = None         # rows matching, when counted
    derived: list[str] = field(default_factory=list)
    types: list[pa.DataType] = field(default_factory=list)  # per column, as far as its float widths go

    def addresses(self) -> list[str] | None:
        """Each row's sample address, when the result has `_index`."""
        if "_index" not in self.columns:
            return None
        at = self.columns.index("_index")
        return [f"{self.address}:{row[at]}" for row in self.rows]


class VersionQuery:
    """DuckDB over one version (`with VersionQuery(version) as q: q.where("tokens_len > 2000")`).
    `on_shard(i)`: progress while the sidecars are read or made (once per version)."""

    def __init__(self, version: DatasetVersion, *, timeout: float = TIMEOUT, memory_limit: str = MEMORY,
                 threads: int | None = None, on_shard: Callable[[int], None] | None = None,
                 meanings: Mapping[str, str | None] | None = None, checks: Mapping[str, Any] | None = None):
        self._duckdb = require("duckdb", "query", "a query")
        self.version, self.timeout = version, timeout
        self._rollout_settings = {"meanings": dict(meanings or {}), "checks": dict(checks or {})}
        self.derived: list[Derived] = derivations(version.fields)
        self.small = [f.name for f in version.fields if f.role == "scalar"]  # kept in memory with the derived
        self.big = {f.name for f in version.fields} - set(self.small)
        self._big_names = {name.lower() for name in self.big}  # SQL names are case-insensitive
        # a DuckDB connection runs one statement at a time: viewers share a VersionQuery over threads
        self.lock = threading.RLock()
        sidecars = derived_tables(version, self.derived, self.small, on_shard) if self.derived or self.small else []
        self.con, self.full = self._connections(sidecars)
        self.rollout_names = self._rollout_names()  # the view's rollout_* columns, made when first named
        self._rollouts_made = False
        for con in (self.con, self.full):
            for setting in ([f"SET threads = {int(threads)}"] if threads else []) + [
                    f"SET memory_limit = '{memory_limit}'", "SET max_temp_directory_size = '0B'",
                    "SET python_enable_replacements = false", "SET autoinstall_known_extensions = false",
                    "SET autoload_known_extensions = false", "SET enable_external_access = false",
                    "SET lock_configuration = true"]:
                con.execute(setting)

    def _connections(self, sidecars: list[pa.Table]) -> tuple[Any, Any]:
        """Two databases, each with the view v: over the in-memory columns (`_index`, the scalar
        fields, the derived values: what most conditions use, ~10x faster), and that joined with
        the shards' other fields by position. A query runs on the first when it names only those."""
        import pyarrow.dataset as ds

        small, full = self._duckdb.connect(":memory:"), self._duckdb.connect(":memory:")
        filesystem = _arrow_filesystem(self.version.catalog.fs)
        order = ["_index"] + [f.name for f in self.version.fields] + [d.name for d in self.derived]
        small_parts, full_parts, offset = [], [], 0
        fields = self.version.manifest.schema
        widened = scannable_schema(fields) if scannable_schema(fields) != fields else None  # read as float32
        for s, entry in enumerate(self.version.manifest.shards):
            if not entry.rows:
                continue
            data = ds.dataset(self.version.shard_path(s), format="parquet", filesystem=filesystem, schema=widened)
            index = pa.array(np.arange(offset, offset + entry.rows, dtype=np.int64))
            memory = pa.Table.from_arrays([index, *(sidecars[s].columns if sidecars else [])],  # scalars, derived
                                          names=["_index", *self.small, *(d.name for d in self.derived)])
            memory = memory.cast(scannable_schema(memory.schema))
            for con in (small, full):
                con.register(f"_m{s}", memory)
            full.register(f"_d{s}", data)
            small_parts.append(f"SELECT * FROM _m{s}")
            picked = ", ".join(f"d.{_quote(c)}" if c in self.big else f"m.{_quote(c)}" for c in order)
            full_parts.append(f"SELECT {picked} FROM _m{s} m POSITIONAL JOIN _d{s} d")
            offset += entry.rows
        if not full_parts:  # a version without rows: the views still have their columns
            empty = pa.table({"_index": pa.array([], pa.int64()),
                              **{f.name: pa.array([], scannable(f.type)) for f in self.version.fields},
                              **{d.name: pa.array([], d.type) for d in self.derived}})
            for con in (small, full):
                con.register("_empty", empty)
            small_parts = [f"SELECT {', '.join(_quote(c) for c in order if c not in self.big)} FROM _empty"]
            full_parts = ["SELECT * FROM _empty"]
        for con, parts in ((small, small_parts), (full, full_parts)):
            con.execute("CREATE VIEW _v AS " + " UNION ALL ".join(parts))
            con.execute("CREATE VIEW v AS SELECT * FROM _v")
        return small, full

    def _rollout_names(self) -> list[str]:
        """The per-rollout columns (`rollout_query.ROW_COLUMNS`) a version of rollouts adds to v, but any a
        stored or derived column already has; none for other versions."""
        from dsinspect.loaders.format.rollout_fields import rollout_columns, with_meanings

        fields = with_meanings(self.version.fields, self._rollout_settings["meanings"], f" in {self.version.address}")
        if rollout_columns(fields) is None:
            return []
        from dsinspect.inspect.rollout_query import ROW_COLUMNS

        taken = {name.lower() for name, *_ in self.full.execute("DESCRIBE v").fetchall()}
        return [name for name, *_ in ROW_COLUMNS if name not in taken]

    def _make_rollouts(self) -> None:
        """The rollout_* columns joined into v and the rollout_findings table, in both databases (once)."""
        if self._rollouts_made:
            return
        from dsinspect.inspect.rollout_query import FINDINGS_TABLE, rollout_tables

        rows, findings = rollout_tables(self.version, **self._rollout_settings)
        rows = rows.select(["_index", *self.rollout_names])
        for con in (self.con, self.full):
            con.register("_rollout_rows", rows)
            con.register(FINDINGS_TABLE, findings)
            con.execute("CREATE OR REPLACE VIEW v AS SELECT * FROM _v LEFT JOIN _rollout_rows USING (_index)")
        self._rollouts_made = True

    def _connection_for(self, sql: str) -> Any:
        """The in-memory database when `sql` names no stored field outside it and selects no `*`; the
        rollout columns and findings made first when it names them (or takes every column)."""
        tree = json.loads(self.con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
        if tree.get("error"):
            return self.full  # let the full view give the error
        refs, star = _references(tree)
        tables = _tables(tree)
        if "rollout_findings" in tables and not self.rollout_names:
            raise UserError(f"{self.version.address} is not LLM rollouts: it has no rollout_findings "
                            "(--meaning FIELD=MEANING says what a column is)")
        if self.rollout_names and (star or refs & set(self.rollout_names) or "rollout_findings" in tables):
            self._make_rollouts()
        return self.full if star or refs & self._big_names else self.con

    # -- asking ------------------------------------------------------------------------------------

    def columns(self) -> list[tuple[str, str]]:
        """The view's columns and their SQL types (the rollout columns too, before they are made)."""
        with self.lock:
            found = [(name, kind) for name, kind, *_ in self.full.execute("DESCRIBE v").fetchall()]
        if self.rollout_names and not self._rollouts_made:
            from dsinspect.inspect.rollout_query import ROW_COLUMNS

            sql = {pa.float64(): "DOUBLE", pa.int64(): "BIGINT", pa.bool_(): "BOOLEAN",
                   pa.list_(pa.float64()): "DOUBLE[]", pa.list_(pa.string()): "VARCHAR[]"}
            found += [(name, sql[kind]) for name, kind, _ in ROW_COLUMNS if name in self.rollout_names]
        return found

    def where(self, condition: str | None = None, *, order_by: str | None = None, limit: int = 50,
              offset: int = 0, columns: Sequence[str] | None = None, count: bool = False) -> QueryResult:
        """Samples matching `condition` (an SQL expression over the view's columns), with `_index` and
        `columns` (default: the derived ones and the stored scalars), ordered, one page of them."""
        if limit < 0 or offset < 0:
            raise UserError("--limit and --offset must be >= 0")
        chosen = list(columns) if columns else self.default_columns()
        picked = ", ".join(["_index"] + [_quote(c) for c in chosen if c != "_index"])
        sql, parts = f"SELECT {picked} FROM v", []  # parts: where the typed text is, for the errors
        if condition and condition.strip():
            sql += " WHERE ("
            parts.append(Part("where", condition, len(sql)))
            sql += f"{condition})"
        where = sql[sql.index(" FROM v"):]
        if order_by:
            sql += " ORDER BY "
            parts.append(Part("order by", order_by, len(sql)))
            sql += f"{order_by}, _index"
        else:
            sql += " ORDER BY _index"
        page = min(limit, MAX_ROWS)
        result = self._run(f"{sql} LIMIT {page + 1} OFFSET {offset}", page, parts)  # one more: were there more?
        if count:
            result.total = self._run(f"SELECT count(*){where}", 1).rows[0][0]
        return result

    def sql(self, text: str, limit: int = MAX_ROWS) -> QueryResult:
        """One SELECT over `v` (anything DuckDB's SQL says); at most `limit` rows come back."""
        return self._run(text, limit, [Part("sql", text, 0)])

    def default_columns(self) -> list[str]:
        """The derived values and the stored scalars: what the in-memory view holds (fast)."""
        return [d.name for d in self.derived] + self.small

    def _run(self, sql: str, limit: int, parts: Sequence[Part] = ()) -> QueryResult:
        _one_select(sql, parts)
        with self.lock:
            return self._run_alone(sql, limit)

    def _run_alone(self, sql: str, limit: int) -> QueryResult:
        import duckdb

        con = self._connection_for(sql)
        timer = threading.Timer(self.timeout, con.interrupt)
        timer.start()
        try:
            cursor = con.execute(sql)
            rows = cursor.fetchmany(limit + 1)
            names = [d[0] for d in cursor.description]
            types = [from_duckdb(d[1]) for d in cursor.description]
        except duckdb.InterruptException:
            raise UserError(f"the query ran longer than {self.timeout:g} s and was stopped") from None
        except duckdb.PermissionException:
            raise UserError("the query asks for files, the network or settings: a query reads only the "
                            f"version {self.version.address} (the view v)") from None
        except duckdb.Error as e:
            names = [name for name, *_ in self.full.execute("DESCRIBE v").fetchall()]
            raise unknown_column(str(e), names, self.version.address) or UserError(f"bad query: {_first_line(e)}") \
                from None
        finally:
            timer.cancel()
        return QueryResult(names, rows[:limit], sql, self.version.address, truncated=len(rows) > limit,
                           derived=[d.name for d in self.derived], types=types)

    def close(self) -> None:
        self.con.close()
        self.full.close()

    def __enter__(self) -> "VersionQuery":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def scannable(t: pa.DataType) -> pa.DataType:
    """`t` with float16 widened to float32 (exact), at any depth: DuckDB cannot scan Arrow's float16."""
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_fixed_size_list(t):
        return pa.list_(scannable(t.value_type), t.list_size)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return (pa.large_list if pa.types.is_large_list(t) else pa.list_)(scannable(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(scannable(f.type)) for f in t])
    return t


def scannable_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(scannable(f.type)) for f in schema], metadata=schema.metadata)


def _arrow_filesystem(fs: Any) -> Any:
    """The catalog's fsspec filesystem as pyarrow's (its own local one for local files: faster)."""
    import pyarrow.fs as pafs

    if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def _one_select(sql: str, parts: Sequence[Part] = ()) -> None:
    """Only one SELECT runs: a condition cannot end the statement and start another (the lock-down
    would refuse what it could do anyway; this gives the clear error)."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise syntax_error(str(e), sql, parts) from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kinds = ", ".join(s.type.name for s in statements) or "nothing"
        raise UserError(f"a query is one SELECT over the view v, not {kinds}")


def _references(tree: Any) -> tuple[set[str], bool]:
    """The names a parsed statement (DuckDB's JSON syntax tree) refers to (lowercased), and whether it
    selects a `*` (or COLUMNS(...)), which takes every column."""
    refs: set[str] = set()
    star = False
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("class") == "COLUMN_REF":  # every part: `t.x`, `x.field` of a struct
                refs.update(str(name).lower() for name in node.get("column_names") or ())
            star = star or node.get("class") == "STAR"
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return refs, star


def _tables(tree: Any) -> set[str]:
    """The table names a parsed statement reads from (lowercased)."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
                found.add(node["table_name"].lower())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
