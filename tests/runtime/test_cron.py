"""Cron in simulated time: parsing, next_fire, sources, and a job exec'd at a fire time."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sclated.errors import InvalidArgument
from sclated.runtime import CronExpr, CronSource, CronTable, SandboxManager, next_fire

_NS = 1_000_000_000
UTC = dt.UTC


def utc(*args: int) -> dt.datetime:
    y, mo, d, h, mi, s = (*args, 0, 0, 0)[:6]
    return dt.datetime(y, mo, d, h, mi, s, tzinfo=UTC)


def ns(*args: int) -> int:
    return int(utc(*args).timestamp()) * _NS


def when(n: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(n // _NS, UTC)


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("* * * * *", (2030, 1, 1, 0, 0, 30), (2030, 1, 1, 0, 1)),
        ("* * * * *", (2030, 1, 1, 0, 0, 0), (2030, 1, 1, 0, 1)),  # strictly after
        ("@hourly", (2030, 1, 1, 0, 59), (2030, 1, 1, 1, 0)),
        ("@daily", (2030, 12, 31, 23, 59), (2031, 1, 1, 0, 0)),
        ("@midnight", (2030, 6, 1, 12, 0), (2030, 6, 2, 0, 0)),
        ("@weekly", (2030, 1, 1, 0, 0), (2030, 1, 6, 0, 0)),  # Sunday
        ("@monthly", (2030, 1, 31, 0, 0), (2030, 2, 1, 0, 0)),
        ("@yearly", (2030, 1, 1, 0, 0), (2031, 1, 1, 0, 0)),
        ("*/15 9-17 * * mon-fri", (2030, 1, 4, 17, 46), (2030, 1, 7, 9, 0)),  # Fri -> Mon
        ("*/15 9-17 * * mon-fri", (2030, 1, 7, 9, 14), (2030, 1, 7, 9, 15)),
        ("0 0 29 feb *", (2030, 1, 1, 0, 0), (2032, 2, 29, 0, 0)),  # leap day
        ("0 0 31 * *", (2030, 4, 1, 0, 0), (2030, 5, 31, 0, 0)),  # April has 30
        ("30 4 1,15 * 5", (2030, 1, 2, 0, 0), (2030, 1, 4, 4, 30)),  # Vixie: day OR weekday
        ("0 12 * * 7", (2030, 1, 1, 0, 0), (2030, 1, 6, 12, 0)),  # 7 = Sunday
        ("0 12 * * SUN", (2030, 1, 1, 0, 0), (2030, 1, 6, 12, 0)),
        ("5 0 * 8 *", (2030, 9, 1, 0, 0), (2031, 8, 1, 0, 5)),
        ("0 22 * * 1-5/2", (2030, 1, 1, 23, 0), (2030, 1, 2, 22, 0)),  # Mon, Wed, Fri
        ("10/20 * * * *", (2030, 1, 1, 0, 31), (2030, 1, 1, 0, 50)),
        ("0 0 */2 * *", (2030, 1, 1, 0, 0), (2030, 1, 3, 0, 0)),  # '*'-led: AND with dow
        ("1,2,5-7 3 * jan-mar,dec *", (2030, 4, 1, 0, 0), (2030, 12, 1, 3, 1)),
    ],
)
def test_next_fire_cases(expr: str, after: tuple[int, ...], expected: tuple[int, ...]) -> None:
    got = next_fire(expr, ns(*after))
    assert when(got) == utc(*expected), when(got)


def test_sub_second_after_and_minute_alignment() -> None:
    base = ns(2030, 1, 1, 0, 0)
    assert next_fire("* * * * *", base + 999_999_999) == base + 60 * _NS
    assert next_fire("* * * * *", base - 1) == base


@pytest.mark.parametrize(
    ("expr", "match"),
    [
        ("* * * *", "five"),
        ("60 * * * *", "outside"),
        ("* 24 * * *", "outside"),
        ("* * 0 * *", "outside"),
        ("* * * 13 *", "outside"),
        ("* * * * 8", "outside"),
        ("*/0 * * * *", "step"),
        ("5-1 * * * *", "outside"),
        ("x * * * *", "number"),
        ("1,,2 * * * *", "empty"),
        ("@fortnightly", "macro"),
        ("0 0 30 2 *", "never"),
    ],
)
def test_bad_expressions(expr: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        CronExpr.parse(expr)


def _matches(e: CronExpr, t: dt.datetime) -> bool:
    dom, dow = t.day in e.days, (t.isoweekday() % 7) in e.weekdays
    day = (dom and dow) if (e.day_star or e.weekday_star) else (dom or dow)
    return t.month in e.months and day and t.hour in e.hours and t.minute in e.minutes


def _field_text(lo: int, hi: int) -> st.SearchStrategy[str]:
    num = st.integers(lo, hi)
    item = st.one_of(
        num.map(str),
        st.tuples(num, num).map(lambda p: f"{min(p)}-{max(p)}"),
        st.integers(1, 12).map(lambda s: f"*/{s}"),
        st.tuples(num, num, st.integers(1, 5)).map(lambda p: f"{min(p[:2])}-{max(p[:2])}/{p[2]}"),
    )
    return st.one_of(st.just("*"), st.lists(item, min_size=1, max_size=3).map(",".join))


expressions = st.tuples(
    _field_text(0, 59), _field_text(0, 23), _field_text(1, 28), _field_text(1, 12),
    _field_text(0, 7),
).map(" ".join)  # fmt: skip
instants = st.integers(ns(1990, 1, 1), ns(2090, 1, 1))


@settings(max_examples=300, deadline=None)
@given(expressions, instants)
def test_next_fire_is_the_first_match_after(text: str, after: int) -> None:
    expr = CronExpr.parse(text)
    got = next_fire(expr, after)
    assert got > after and got % (60 * _NS) == 0
    assert _matches(expr, when(got))
    # No earlier minute matches: scan the days in between (at most a few years).
    t = when(after).replace(second=0) + dt.timedelta(minutes=1)
    day = t.replace(hour=0, minute=0)
    while day <= when(got):
        for h in expr.hours:
            for m in expr.minutes:
                cand = day.replace(hour=h, minute=m)
                if t <= cand < when(got):
                    assert not _matches(expr, cand), f"{text}: {cand} matches before {when(got)}"
        day += dt.timedelta(days=1)


@settings(max_examples=100, deadline=None)
@given(expressions, instants)
def test_next_fire_chains_monotonically(text: str, after: int) -> None:
    first = next_fire(text, after)
    assert next_fire(text, first - 1) == first
    assert next_fire(text, first) > first


CRONTAB = """\
# a harness's crontab
SHELL=/bin/sh
MAILTO=""
*/30 * * * *  /usr/local/bin/sync-memory --quiet
@daily        consolidate "nightly run" >> /tmp/log 2>&1
PATH=/opt/bin:/usr/bin:/bin
0 9 * * mon-fri  standup
@reboot       warmup
"""


def test_crontab_parse() -> None:
    table = CronTable.parse(CRONTAB)
    assert [e.command for e in table.entries] == [
        "/usr/local/bin/sync-memory --quiet",
        'consolidate "nightly run" >> /tmp/log 2>&1',
        "standup",
        "warmup",
    ]
    assert [e.line for e in table.entries] == [4, 5, 7, 8]
    assert table.entries[0].env == {"SHELL": "/bin/sh", "MAILTO": ""}
    assert table.entries[2].env["PATH"] == "/opt/bin:/usr/bin:/bin"
    assert [e.command for e in table.at_reboot] == ["warmup"]
    assert len(table.timed) == 3
    with pytest.raises(InvalidArgument, match="line 2"):
        CronTable.parse("* * * * * ok\n* * * * \n")
    with pytest.raises(InvalidArgument, match="@reboot"):
        next_fire("@reboot", 0)


def test_system_crontab_has_a_user_column() -> None:
    table = CronTable.parse("17 * * * * root cd / && run-parts /etc/cron.hourly\n", system=True)
    (entry,) = table.entries
    assert entry.user == "root" and entry.command == "cd / && run-parts /etc/cron.hourly"


def test_source_fires_in_time_order() -> None:
    source = CronSource.from_text(CRONTAB)
    start = ns(2030, 1, 4, 23, 0)  # a Friday evening
    fires = list(source.fires(start, until_ns=ns(2030, 1, 7, 9, 0)))
    times = [f.time_ns for f in fires]
    assert times == sorted(times)
    assert [when(f.time_ns) for f in fires[:3]] == [
        dt.datetime(2030, 1, 4, 23, 30, tzinfo=UTC),
        dt.datetime(2030, 1, 5, 0, 0, tzinfo=UTC),
        dt.datetime(2030, 1, 5, 0, 0, tzinfo=UTC),
    ]
    # Same minute: crontab order.
    assert [f.line for f in fires[1:3]] == [4, 5]
    assert fires[-1].entry.command == "standup"
    assert sum(f.entry.command == "standup" for f in fires) == 1  # not on the weekend
    # Fri 23:30, all of Sat and Sun (2 x 48 half hours), Mon 00:00 to 09:00 inclusive.
    assert len([f for f in fires if f.line == 4]) == 1 + 2 * 48 + 19
    nxt = source.next_fires(start)
    assert [f.line for f in nxt] == [4, 5, 7]


def test_source_from_file(short_dir: Path) -> None:
    path = short_dir / "crontab"
    path.write_text(CRONTAB)
    assert len(CronSource.from_file(path).table.entries) == 4


@pytest.mark.docker
async def test_job_execd_at_fire_time_sees_that_date(
    manager: SandboxManager, sandbox_image: str, short_dir: Path
) -> None:
    start = ns(2030, 1, 4, 23, 0)
    spec = manager.spec_for(image=sandbox_image, run="cron", tenant="acme", run_dir=short_dir)
    sb = await manager.create(spec, short_dir, sim_ns=start, probe=False)
    source = CronSource.from_text("0 9 * * mon-fri date -u +%Y-%m-%dT%H:%M:%S_%a\n")
    (fire,) = source.next_fires(start)
    # What the scheduler does at the fire time: jump the clock, exec the job.
    await sb.publish_time(fire.time_ns)
    result = await sb.exec(["sh", "-c", fire.entry.command], env=dict(fire.entry.env))
    stamp = result.text.strip()
    assert stamp.startswith("2030-01-07T09:00:0"), stamp  # Monday, within seconds
    assert stamp.endswith("_Mon")
