"""Cron in simulated time: the daemon is the cron.

A harness's crontab is read from its sandbox and parsed here; the scheduler
asks :class:`CronSource` for the next fire times in simulated time and runs
each job with an exec inside the sandbox at that time, so the job's ``date``
shows the simulated time and a 3-day jump fires what falls inside it in order
(no cron daemon sleeping on the real clock inside).

Syntax (Vixie cron): five fields ``minute hour day-of-month month day-of-week``,
each ``*``, a number, a range ``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n``, or a
comma list of those; month and weekday names (``jan``, ``mon``); weekday 0 or 7
is Sunday; ``@yearly @annually @monthly @weekly @daily @midnight @hourly``, and
``@reboot`` (fires when the sandbox starts). When both day fields are
restricted a day matching either fires (the Vixie rule). ``NAME=value`` lines
set the jobs' environment. Always UTC: simulated time has no zone.
"""

from __future__ import annotations

import bisect
import datetime as dt
import heapq
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from sclated.errors import InvalidArgument

__all__ = ["CronEntry", "CronExpr", "CronFire", "CronSource", "CronTable", "next_fire"]

_NS = 1_000_000_000
_MINUTE_NS = 60 * _NS
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# An expression that can fire fires within 28 years (weekday cycles of Feb 29);
# a bound keeps a bug from looping forever.
_SEARCH_YEARS = 30

_MONTHS = {m: i + 1 for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
)}  # fmt: skip
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ENV_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")


def _field(text: str, lo: int, hi: int, names: Mapping[str, int], what: str) -> frozenset[int]:
    values: set[int] = set()

    def number(tok: str) -> int:
        low = tok.lower()
        if low in names:
            return names[low]
        if not tok.isdigit():
            raise InvalidArgument(f"cron {what}: {tok!r} is not a number or a name", field=what)
        return int(tok)

    for part in text.split(","):
        if not part:
            raise InvalidArgument(f"cron {what}: empty list item in {text!r}", field=what)
        rng, _, step_text = part.partition("/")
        step = 1
        if _:
            if not step_text.isdigit() or int(step_text) == 0:
                raise InvalidArgument(f"cron {what}: bad step in {part!r}", field=what)
            step = int(step_text)
        if rng == "*":
            start, end = lo, hi
        elif "-" in rng:
            a, _, b = rng.partition("-")
            start, end = number(a), number(b)
        else:
            start = number(rng)
            # "a/n" runs from a to the top of the range; plain "a" is just a.
            end = hi if step_text else start
        # Weekday 7 is Sunday too; allow it as a range end ("1-7").
        top = 7 if names is _DAYS else hi
        if not (lo <= start <= top and lo <= end <= top) or start > end:
            raise InvalidArgument(f"cron {what}: {part!r} is outside {lo}-{hi}", field=what)
        values.update(range(start, end + 1, step))
    if names is _DAYS and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


@dataclass(frozen=True)
class CronExpr:
    """A parsed schedule. ``reboot``: fires once when the sandbox starts, never by time."""

    text: str
    minutes: tuple[int, ...] = ()
    hours: tuple[int, ...] = ()
    days: frozenset[int] = frozenset()
    months: frozenset[int] = frozenset()
    weekdays: frozenset[int] = frozenset()
    day_star: bool = True
    weekday_star: bool = True
    reboot: bool = False

    @classmethod
    def parse(cls, text: str) -> CronExpr:
        src = text.strip()
        if src.lower() == "@reboot":
            return cls(text=src, reboot=True)
        expanded = _MACROS.get(src.lower(), src)
        if expanded.startswith("@"):
            raise InvalidArgument(
                f"cron: unknown macro {src!r}; use one of @reboot, {', '.join(_MACROS)}",
                field="schedule",
            )
        parts = expanded.split()
        if len(parts) != 5:
            raise InvalidArgument(
                f"cron: {src!r} has {len(parts)} fields; a schedule is five: "
                "minute hour day-of-month month day-of-week",
                field="schedule",
            )
        minute, hour, dom, month, dow = parts
        expr = cls(
            text=src,
            minutes=tuple(sorted(_field(minute, 0, 59, {}, "minute"))),
            hours=tuple(sorted(_field(hour, 0, 23, {}, "hour"))),
            days=_field(dom, 1, 31, {}, "day-of-month"),
            months=_field(month, 1, 12, _MONTHS, "month"),
            weekdays=_field(dow, 0, 6, _DAYS, "day-of-week"),
            # Vixie cron decides "unrestricted" by the leading '*', so "*/2" counts.
            day_star=dom.startswith("*"),
            weekday_star=dow.startswith("*"),
        )
        if expr.weekday_star and not any(d <= _DAYS_IN_MONTH[m - 1] for m in expr.months for d in expr.days):
            raise InvalidArgument(f"cron: {src!r} never fires (no such day in those months)", field="schedule")
        return expr

    def _day_ok(self, day: dt.date) -> bool:
        dom_ok = day.day in self.days
        dow_ok = (day.isoweekday() % 7) in self.weekdays
        if self.day_star or self.weekday_star:
            return dom_ok and dow_ok
        return dom_ok or dow_ok


def _to_dt(ns: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=ns // 1000)


def _to_ns(when: dt.datetime) -> int:
    delta = when - _EPOCH
    return (delta.days * 86400 + delta.seconds) * _NS + delta.microseconds * 1000


def next_fire(expr: CronExpr | str, after_ns: int) -> int:
    """The first time strictly after ``after_ns`` (ns since the epoch, UTC) that ``expr``
    fires, on a whole minute."""
    if isinstance(expr, str):
        expr = CronExpr.parse(expr)
    if expr.reboot:
        raise InvalidArgument("@reboot has no fire time: it runs when the sandbox starts")
    start = (after_ns // _MINUTE_NS + 1) * _MINUTE_NS
    cur = _to_dt(start)
    limit = cur.year + _SEARCH_YEARS
    while cur.year <= limit:
        if cur.month not in expr.months:
            year, month = cur.year, cur.month + 1
            if month > 12:
                year, month = year + 1, 1
            cur = cur.replace(year=year, month=month, day=1, hour=0, minute=0)
            continue
        if not expr._day_ok(cur.date()):
            cur = (cur + dt.timedelta(days=1)).replace(hour=0, minute=0)
            continue
        h = bisect.bisect_left(expr.hours, cur.hour)
        if h == len(expr.hours):
            cur = (cur + dt.timedelta(days=1)).replace(hour=0, minute=0)
            continue
        if expr.hours[h] != cur.hour:
            cur = cur.replace(hour=expr.hours[h], minute=0)
        m = bisect.bisect_left(expr.minutes, cur.minute)
        if m == len(expr.minutes):
            cur = cur.replace(minute=0) + dt.timedelta(hours=1)
            continue
        return _to_ns(cur.replace(minute=expr.minutes[m]))
    raise InvalidArgument(f"cron: {expr.text!r} does not fire within {_SEARCH_YEARS} years")


@dataclass(frozen=True)
class CronEntry:
    expr: CronExpr
    command: str
    line: int
    user: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def next_fire(self, after_ns: int) -> int:
        return next_fire(self.expr, after_ns)


@dataclass(frozen=True)
class CronTable:
    entries: tuple[CronEntry, ...]

    @classmethod
    def parse(cls, text: str, *, system: bool = False) -> CronTable:
        """A user crontab, or with ``system`` one with a user column (``/etc/crontab``)."""
        env: dict[str, str] = {}
        entries: list[CronEntry] = []
        for no, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            match = _ENV_LINE.match(line)
            if match and not line.startswith(("@", "*")) and not line[0].isdigit():
                value = match.group(2).strip()
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                    value = value[1:-1]
                env[match.group(1)] = value
                continue
            try:
                if line.startswith("@"):
                    macro, _, rest = line.partition(" ")
                    schedule, rest = macro, rest.strip()
                else:
                    fields = line.split(None, 5)
                    if len(fields) < 6:
                        raise InvalidArgument("expected five schedule fields and a command", field="line")
                    schedule, rest = " ".join(fields[:5]), fields[5]
                expr = CronExpr.parse(schedule)
                user = None
                if system:
                    user, _, rest = rest.partition(" ")
                    rest = rest.strip()
                if not rest:
                    raise InvalidArgument("no command", field="line")
            except InvalidArgument as exc:
                raise InvalidArgument(f"crontab line {no}: {exc.message}: {raw!r}", field=f"line {no}") from None
            # Unescaped % ends the command in cron (the rest is stdin); we keep
            # the command whole, which is what harness crontabs rely on.
            entries.append(CronEntry(expr, rest, no, user, MappingProxyType(dict(env))))
        return cls(tuple(entries))

    @property
    def timed(self) -> tuple[CronEntry, ...]:
        return tuple(e for e in self.entries if not e.expr.reboot)

    @property
    def at_reboot(self) -> tuple[CronEntry, ...]:
        return tuple(e for e in self.entries if e.expr.reboot)


@dataclass(frozen=True, order=True)
class CronFire:
    time_ns: int
    line: int
    entry: CronEntry = field(compare=False)


class CronSource:
    """The fire times of a sandbox's crontab, in simulated time."""

    def __init__(self, table: CronTable, name: str = "cron") -> None:
        self.table = table
        self.name = name

    @classmethod
    def from_text(cls, text: str, name: str = "cron", *, system: bool = False) -> CronSource:
        return cls(CronTable.parse(text, system=system), name)

    @classmethod
    def from_file(cls, path: Path, name: str = "cron", *, system: bool = False) -> CronSource:
        """Sync file read: call through ``asyncio.to_thread`` from the event loop."""
        return cls.from_text(Path(path).read_text(), name, system=system)

    def next_fires(self, after_ns: int) -> list[CronFire]:
        """Each timed entry's next fire strictly after ``after_ns``, earliest first."""
        return sorted(CronFire(e.next_fire(after_ns), e.line, e) for e in self.table.timed)

    def fires(self, after_ns: int, until_ns: int | None = None) -> Iterator[CronFire]:
        """Every fire after ``after_ns`` (up to ``until_ns`` inclusive), in time order;
        jobs due at the same minute come in crontab order."""
        heap = self.next_fires(after_ns)
        heapq.heapify(heap)
        while heap:
            fire = heapq.heappop(heap)
            if until_ns is not None and fire.time_ns > until_ns:
                return
            yield fire
            again = CronFire(fire.entry.next_fire(fire.time_ns), fire.line, fire.entry)
            heapq.heappush(heap, again)
