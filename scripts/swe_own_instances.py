# The issues are written as users write them, one line a paragraph, and one is about
# full-width letters: no line-length or ambiguous-character rule for this file.
# ruff: noqa: E501, RUF001
"""sclate's own SWE-bench instances: three tiny Python repositories with real bugs,
written for sclate, in the SWE-bench 5.x ("Verified" parquet) schema.

    python scripts/swe_own_instances.py            # (re)write adapters/swebench/own/
    python scripts/swe_own_instances.py --check    # gold resolves, no patch does not

Generation needs only the standard library and ``git``. The repositories' sources
live in this file as text; each repository is built as a real git repository, one
commit per step of its history, with fixed authors, committers and dates and with
git's user and system configuration shut out, so its commit ids are the same on
every run. For each issue the history holds a base commit (the commit the instance
starts from) and a fix commit (the merged pull request: the gold patch plus the
tests). ``patch`` and ``test_patch`` are ``git diff base fix`` split into non-test
files and ``tests/``, without ``index`` lines, as SWE-bench stores them. Later
issues of a repository start after the earlier fixes and a few other commits.

Written:

* ``adapters/swebench/own/repos/<name>.bundle``: ``git bundle create --all`` of each
  repository. A bundle whose refs (commit ids) already match is left as it is, so
  another git or zlib version, whose pack bytes may differ, does not rewrite it.
* ``adapters/swebench/own/instances.jsonl``: one instance a line, sorted by
  (repo, created_at), with Verified's columns in Verified's order.

``--check`` validates the instances the way upstream validates a dataset (see
docs/swebench-notes.md §6): for each instance, in a clone of its bundle reset to
``base_commit`` with the later history pruned, it applies the gold patch, runs the
instance's eval script with bash and grades the merged stdout+stderr with swebench
5.0.2's ``make_test_spec`` and ``get_eval_report``; then the same with no patch. It
needs swebench (it re-runs itself with ``.venv-swebench/bin/python`` when the
current interpreter lacks it) and a Python with pytest for the tests (``--python``).
The eval script's ``cd /testbed`` and ``safe.directory /testbed`` lines are pointed
at the temporary clone; nothing else in the script changes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "adapters" / "swebench" / "own"
OWNER = "sclate"
VERSION = "0.1"
TEST_DIR = "tests/"
TEST_CMD = "python -m pytest -rA -p no:cacheprovider"
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
COLUMNS = (
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
    "difficulty",
    "eval_script",
    "log_parser",
    "eval_type",
    "image",
)
"""The columns of SWE-bench Verified's 5.x parquet, in its order."""

EASY = "<15 min fix"
MEDIUM = "15 min - 1 hour"


# -- how a history is written down -------------------------------------------------------------


@dataclass(frozen=True)
class Person:
    name: str
    email: str


@dataclass(frozen=True)
class Write:
    """Create or overwrite a file with ``text``."""

    path: str
    text: str


@dataclass(frozen=True)
class Edit:
    """Replace the one occurrence of ``old`` in a file with ``new``."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Commit:
    when: str  # ISO, UTC: author and committer date
    author: Person
    message: str
    changes: tuple[Write | Edit, ...]


@dataclass(frozen=True)
class Issue:
    """An instance: the issue filed against the current head (its base commit) and the
    pull request that fixed it (``fix``: the gold patch plus the tests, as one commit)."""

    number: int
    created_at: str
    problem_statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    difficulty: str
    fix: Commit
    hints_text: str = ""


@dataclass(frozen=True)
class Repo:
    name: str
    history: tuple[Commit | Issue, ...]


def _t(text: str) -> str:
    """Source text written flush left after an opening quote and a newline."""
    return text.removeprefix("\n")


GITIGNORE = "__pycache__/\n*.pyc\n.pytest_cache/\n*.egg-info/\n"


def _pyproject(name: str, description: str) -> str:
    return (
        f'[project]\nname = "{name}"\nversion = "0.1.0"\ndescription = "{description}"\n'
        'requires-python = ">=3.11"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
    )


# -- sclate/ledger -----------------------------------------------------------------------------
#
# Amounts are integer cents. ledger-1 (2026-03-02) and ledger-2 (2026-03-09, exactly a week
# later) are the pair where the second is easier after the first. What carries over:
# ledger-1's fix establishes the project's way of turning a fractional amount into cents,
# `money._decimal` (exact Decimal; a non-number raises ValueError, not decimal.InvalidOperation,
# which test_parse_rejects_garbage insists on) and `money._round_cents` (half a cent rounds away
# from zero, as on invoices, not half to even as round() does). Between the two issues a
# contributor adds Money.percent() and repeats ledger-1's float + int() mistake. Its new tests
# need the same half-up rounding (0.5 cent -> 1 cent, where round() gives 0; -2.5 -> -3) and its
# existing test_percent_rejects_garbage_rate the same ValueError mapping: an agent that learned
# both in ledger-1 reuses the two helpers and gets ledger-2 right at once; one that did not is
# likely to reach for round() or a bare Decimal() and fail a test.

ANA = Person("Ana Lima", "ana.lima@sclate.dev")
BEN = Person("Ben Okafor", "ben.okafor@sclate.dev")
CHLOE = Person("Chloé Martin", "chloe.martin@sclate.dev")

LEDGER_MONEY = _t(r'''
"""Money amounts.

An amount is held as a whole number of cents (``Money.cents``), never as a
float, so that sums are exact: ``Money.parse("0.10") + Money.parse("0.20")``
is exactly ``Money.parse("0.30")``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Money:
    """An amount of money in one currency, as integer cents."""

    cents: int

    def __post_init__(self) -> None:
        if not isinstance(self.cents, int) or isinstance(self.cents, bool):
            raise TypeError(f"cents must be an int, not {type(self.cents).__name__}")

    @classmethod
    def parse(cls, text: str) -> Money:
        """Parse a decimal amount such as ``"12.34"``, ``"-0.5"`` or ``"1,299.00"``.

        Amounts with more than two decimals are rounded to the nearest cent.
        """
        cleaned = text.strip().replace(",", "")
        if not cleaned:
            raise ValueError("empty amount")
        return cls(int(float(cleaned) * 100))

    @classmethod
    def zero(cls) -> Money:
        return cls(0)

    def __add__(self, other: Money) -> Money:
        if not isinstance(other, Money):
            return NotImplemented
        return Money(self.cents + other.cents)

    def __sub__(self, other: Money) -> Money:
        if not isinstance(other, Money):
            return NotImplemented
        return Money(self.cents - other.cents)

    def __neg__(self) -> Money:
        return Money(-self.cents)

    def __mul__(self, quantity: int) -> Money:
        if not isinstance(quantity, int) or isinstance(quantity, bool):
            return NotImplemented
        return Money(self.cents * quantity)

    __rmul__ = __mul__

    def __str__(self) -> str:
        sign = "-" if self.cents < 0 else ""
        whole, cents = divmod(abs(self.cents), 100)
        return f"{sign}{whole}.{cents:02d}"
''')

LEDGER_TEST_MONEY = _t(r"""
import pytest

from ledger import Money


def test_parse_simple():
    assert Money.parse("12.34") == Money(1234)


def test_parse_whole_amount():
    assert Money.parse("12") == Money(1200)


def test_parse_thousands_separator():
    assert Money.parse("1,299.00") == Money(129900)


@pytest.mark.parametrize("text", ["abc", "12..5", "--1"])
def test_parse_rejects_garbage(text):
    with pytest.raises(ValueError):
        Money.parse(text)


def test_parse_empty():
    with pytest.raises(ValueError):
        Money.parse("  ")


def test_add_and_subtract():
    assert Money(150) + Money(275) == Money(425)
    assert Money(150) - Money(275) == Money(-125)


def test_multiply_by_quantity():
    assert Money(199) * 3 == Money(597)
    assert 3 * Money(199) == Money(597)


def test_cents_must_be_int():
    with pytest.raises(TypeError):
        Money(1.5)


@pytest.mark.parametrize(("cents", "text"), [(0, "0.00"), (5, "0.05"), (-5, "-0.05"), (123456, "1234.56")])
def test_str(cents, text):
    assert str(Money(cents)) == text
""")

LEDGER_BOOK = _t(r'''
"""A ledger: dated entries posted to named accounts."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from ledger.money import Money


@dataclass(frozen=True)
class Entry:
    date: dt.date
    account: str
    amount: Money
    memo: str = ""


@dataclass
class Ledger:
    entries: list[Entry] = field(default_factory=list)

    def post(self, date: dt.date, account: str, amount: Money, memo: str = "") -> Entry:
        """Record ``amount`` (negative for money going out) on ``account``."""
        if not account:
            raise ValueError("account name is empty")
        entry = Entry(date, account, amount, memo)
        self.entries.append(entry)
        return entry

    def balance(self, account: str, until: dt.date | None = None) -> Money:
        """The sum of ``account``'s entries up to and including the day ``until``
        (of all its entries when ``until`` is None)."""
        total = Money.zero()
        for entry in self.entries:
            if entry.account != account:
                continue
            if until is not None and entry.date >= until:
                continue
            total += entry.amount
        return total
''')

LEDGER_TEST_BOOK = _t(r"""
import datetime as dt

import pytest

from ledger import Ledger, Money


def test_post_and_balance():
    book = Ledger()
    book.post(dt.date(2026, 1, 5), "cash", Money(10000))
    book.post(dt.date(2026, 1, 9), "cash", Money(-2550), "groceries")
    assert book.balance("cash") == Money(7450)


def test_balance_of_unknown_account_is_zero():
    assert Ledger().balance("nowhere") == Money(0)


def test_balance_until_skips_later_entries():
    book = Ledger()
    book.post(dt.date(2026, 1, 5), "cash", Money(10000))
    book.post(dt.date(2026, 1, 20), "cash", Money(-2550))
    assert book.balance("cash", until=dt.date(2026, 1, 10)) == Money(10000)


def test_post_requires_account():
    with pytest.raises(ValueError):
        Ledger().post(dt.date(2026, 1, 5), "", Money(1))
""")

LEDGER_README = _t(r"""
# ledger

Exact money amounts and a dated ledger, standard library only.

Amounts are `Money` values holding a whole number of cents (`Money(1999)` is
19.99), never floats, so sums are exact:

```python
>>> from ledger import Money
>>> str(Money.parse("19.99") + Money.parse("0.01"))
'20.00'
```

Run the tests with `python -m pytest`.
""")

LEDGER = Repo(
    "ledger",
    (
        Commit(
            "2026-02-16T09:12:00Z",
            ANA,
            "Money: amounts as integer cents, parse and format",
            (
                Write(".gitignore", GITIGNORE),
                Write("pyproject.toml", _pyproject("ledger", "Exact money amounts and a dated ledger")),
                Write("README.md", LEDGER_README),
                Write(
                    "ledger/__init__.py",
                    '"""ledger: exact money amounts and a dated ledger."""\n\n'
                    'from ledger.money import Money\n\n__all__ = ["Money"]\n',
                ),
                Write("ledger/money.py", LEDGER_MONEY),
                Write("tests/test_money.py", LEDGER_TEST_MONEY),
            ),
        ),
        Commit(
            "2026-02-19T14:30:00Z",
            ANA,
            "Ledger: post dated entries, balance per account",
            (
                Write(
                    "ledger/__init__.py",
                    '"""ledger: exact money amounts and a dated ledger."""\n\n'
                    "from ledger.book import Entry, Ledger\nfrom ledger.money import Money\n\n"
                    '__all__ = ["Entry", "Ledger", "Money"]\n',
                ),
                Write("ledger/book.py", LEDGER_BOOK),
                Write("tests/test_book.py", LEDGER_TEST_BOOK),
            ),
        ),
        Commit(
            "2026-02-23T11:05:00Z",
            BEN,
            "Add Ledger.transfer: two entries that sum to zero",
            (
                Edit(
                    "ledger/book.py",
                    "        return entry\n\n    def balance(",
                    _t('''
        return entry

    def transfer(self, date: dt.date, source: str, target: str, amount: Money, memo: str = "") -> None:
        """Move ``amount`` from ``source`` to ``target``: two entries that sum to zero."""
        if amount.cents <= 0:
            raise ValueError("a transfer moves a positive amount")
        self.post(date, source, -amount, memo)
        self.post(date, target, amount, memo)

    def balance('''),
                ),
                Edit(
                    "tests/test_book.py",
                    "def test_post_requires_account():",
                    _t("""
def test_transfer_moves_money_and_sums_to_zero():
    book = Ledger()
    book.post(dt.date(2026, 1, 5), "cash", Money(10000))
    book.transfer(dt.date(2026, 1, 6), "cash", "savings", Money(4000), "save")
    assert book.balance("cash") == Money(6000)
    assert book.balance("savings") == Money(4000)
    assert sum((e.amount for e in book.entries), Money.zero()) == Money(10000)


def test_transfer_rejects_non_positive_amount():
    with pytest.raises(ValueError):
        Ledger().transfer(dt.date(2026, 1, 6), "cash", "savings", Money(0))


def test_post_requires_account():"""),
                ),
            ),
        ),
        Commit(
            "2026-02-26T17:20:00Z",
            ANA,
            "README: the ledger",
            (
                Edit(
                    "README.md",
                    "Run the tests",
                    _t("""
A `Ledger` holds dated entries per account:

```python
>>> import datetime as dt
>>> from ledger import Ledger, Money
>>> book = Ledger()
>>> book.post(dt.date(2026, 3, 1), "cash", Money.parse("250.00"), "opening")
>>> book.transfer(dt.date(2026, 3, 2), "cash", "savings", Money.parse("100.00"))
>>> str(book.balance("cash"))
'150.00'
```

Run the tests"""),
                ),
            ),
        ),
        Issue(
            1,
            "2026-03-02T10:15:00Z",
            _t("""
Money.parse loses a cent on common prices like 19.99

Parsing prices from our product CSV gives amounts a cent short:

```python
>>> from ledger import Money
>>> Money.parse("19.99")
Money(cents=1998)
>>> str(Money.parse("0.29"))
'0.28'
>>> Money.parse("-0.29")
Money(cents=-28)
```

Expected `Money(cents=1999)`, `'0.29'` and `Money(cents=-29)`. It is not every amount (`12.34` comes out right), which is how it slipped through: our invoice totals were off by a few cents per hundred lines.

Related: the docstring says amounts with more than two decimals are rounded to the nearest cent, but `Money.parse("2.675")` gives 2.67 and `Money.parse("0.005")` gives 0.00. Our supplier's price lists have three decimals, and they, like every invoice I have seen, round half a cent up: 2.675 is 2.68, 0.005 is 0.01 (and -0.005 is -0.01).

ledger 0.1.0, Python 3.11.
"""),
            (
                "tests/test_money.py::test_parse_is_exact[19.99-1999]",
                "tests/test_money.py::test_parse_is_exact[0.29-29]",
                "tests/test_money.py::test_parse_is_exact[1.15-115]",
                "tests/test_money.py::test_parse_is_exact[-0.29--29]",
                "tests/test_money.py::test_parse_rounds_half_a_cent_up[2.675-268]",
                "tests/test_money.py::test_parse_rounds_half_a_cent_up[0.005-1]",
                "tests/test_money.py::test_parse_rounds_half_a_cent_up[-0.005--1]",
            ),
            (
                "tests/test_money.py::test_parse_simple",
                "tests/test_money.py::test_parse_whole_amount",
                "tests/test_money.py::test_parse_thousands_separator",
                "tests/test_money.py::test_parse_rejects_garbage[abc]",
                "tests/test_money.py::test_parse_rejects_garbage[12..5]",
                "tests/test_money.py::test_parse_rejects_garbage[--1]",
                "tests/test_money.py::test_parse_empty",
                "tests/test_money.py::test_add_and_subtract",
                "tests/test_money.py::test_multiply_by_quantity",
                "tests/test_money.py::test_cents_must_be_int",
                "tests/test_money.py::test_str[0-0.00]",
                "tests/test_money.py::test_str[5-0.05]",
                "tests/test_money.py::test_str[-5--0.05]",
                "tests/test_money.py::test_str[123456-1234.56]",
                "tests/test_money.py::test_parse_is_exact[1,099.50-109950]",
                "tests/test_money.py::test_parse_rounds_half_a_cent_up[0.004-0]",
                "tests/test_money.py::test_parsed_amounts_add_up",
            ),
            MEDIUM,
            Commit(
                "2026-03-02T16:40:00Z",
                ANA,
                "Parse amounts exactly and round half a cent up (#1)\n\n"
                "float(text) * 100 is 1998.9999999999998 for 19.99; int() then drops a cent.",
                (
                    Edit(
                        "ledger/money.py",
                        "from dataclasses import dataclass\n",
                        _t('''
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation


def _decimal(value: object) -> Decimal:
    """``value`` as an exact, finite Decimal; ValueError (not decimal's
    InvalidOperation) when it is not a number."""
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"not a number: {value!r}") from None
    if not number.is_finite():
        raise ValueError(f"not a finite number: {value!r}")
    return number


def _round_cents(cents: Decimal) -> int:
    """A fractional number of cents rounded to a whole cent. Half a cent rounds
    away from zero, as on invoices (not to even, as ``round()`` does)."""
    return int(cents.quantize(Decimal(1), rounding=ROUND_HALF_UP))
'''),
                    ),
                    Edit(
                        "ledger/money.py",
                        "        return cls(int(float(cleaned) * 100))\n",
                        "        return cls(_round_cents(_decimal(cleaned) * 100))\n",
                    ),
                    Edit(
                        "ledger/money.py",
                        "        Amounts with more than two decimals are rounded to the nearest cent.\n",
                        "        Amounts with more than two decimals are rounded to the nearest cent,\n"
                        "        half a cent away from zero: ``"
                        '"2.675"`` is 2.68, ``"-0.005"`` is -0.01.\n',
                    ),
                    Edit(
                        "tests/test_money.py",
                        'def test_parse_thousands_separator():\n    assert Money.parse("1,299.00") == Money(129900)\n',
                        _t("""
def test_parse_thousands_separator():
    assert Money.parse("1,299.00") == Money(129900)


@pytest.mark.parametrize(
    ("text", "cents"),
    [("19.99", 1999), ("0.29", 29), ("1.15", 115), ("-0.29", -29), ("1,099.50", 109950)],
)
def test_parse_is_exact(text, cents):
    assert Money.parse(text) == Money(cents)


@pytest.mark.parametrize(("text", "cents"), [("2.675", 268), ("0.005", 1), ("-0.005", -1), ("0.004", 0)])
def test_parse_rounds_half_a_cent_up(text, cents):
    assert Money.parse(text) == Money(cents)


def test_parsed_amounts_add_up():
    assert Money.parse("0.10") + Money.parse("0.20") == Money.parse("0.30")
"""),
                    ),
                ),
            ),
        ),
        Commit(
            "2026-03-04T10:00:00Z",
            CHLOE,
            "Add Money.percent() for tax and discount lines",
            (
                Edit(
                    "ledger/money.py",
                    "    __rmul__ = __mul__\n",
                    _t('''
    __rmul__ = __mul__

    def percent(self, rate: int | float | str | Decimal) -> Money:
        """``rate`` percent of this amount, to the cent: ``price.percent("8.25")``
        is the sales tax on ``price``, ``price.percent(10)`` a 10 % discount."""
        return Money(int(self.cents * float(rate) / 100))
'''),
                ),
                Write(
                    "tests/test_percent.py",
                    _t(r"""
import pytest

from ledger import Money


def test_percent_of_round_amount():
    assert Money(10000).percent(20) == Money(2000)


def test_discount_line():
    assert Money(5000).percent(10) == Money(500)


def test_zero_rate_and_zero_amount():
    assert Money(1234).percent(0) == Money(0)
    assert Money(0).percent(19) == Money(0)


def test_percent_accepts_strings():
    assert Money(20000).percent("12.5") == Money(2500)


def test_percent_rejects_garbage_rate():
    with pytest.raises(ValueError):
        Money(1000).percent("ten")
"""),
                ),
            ),
        ),
        Commit(
            "2026-03-06T15:45:00Z",
            ANA,
            "README: tax and discount lines",
            (
                Edit(
                    "README.md",
                    "A `Ledger` holds",
                    _t("""
Percentages are rounded to the cent:

```python
>>> str(Money.parse("200.00").percent("12.5"))
'25.00'
```

A `Ledger` holds"""),
                ),
            ),
        ),
        Issue(
            2,
            "2026-03-09T10:15:00Z",
            _t("""
Money.percent() is a cent short on tax lines

Sales tax computed with `percent()` disagrees with the register:

```python
>>> from ledger import Money
>>> Money.parse("19.99").percent("8.25")
Money(cents=164)
>>> Money.parse("29.99").percent(7.5)
Money(cents=224)
>>> Money(50).percent(5)
Money(cents=2)
```

19.99 × 8.25 % is 1.649175, so the tax line should be 1.65 (`Money(cents=165)`); 29.99 × 7.5 % is 2.24925, which should be 2.25; and 5 % of 0.50 is 2.5 cents, which should come out as 3 cents, the way `Money.parse` rounds. Refunds are off too: `Money(-50).percent(5)` gives -2 cents instead of -3.
"""),
            (
                "tests/test_percent.py::test_percent_rounds_to_the_nearest_cent[1999-8.25-165]",
                "tests/test_percent.py::test_percent_rounds_to_the_nearest_cent[50-5-3]",
                "tests/test_percent.py::test_percent_rounds_to_the_nearest_cent[2999-7.5-225]",
                "tests/test_percent.py::test_percent_rounds_to_the_nearest_cent[-50-5--3]",
                "tests/test_percent.py::test_percent_rounds_to_the_nearest_cent[1000-0.05-1]",
                "tests/test_percent.py::test_tax_on_a_parsed_price",
            ),
            (
                "tests/test_percent.py::test_percent_of_round_amount",
                "tests/test_percent.py::test_discount_line",
                "tests/test_percent.py::test_zero_rate_and_zero_amount",
                "tests/test_percent.py::test_percent_accepts_strings",
                "tests/test_percent.py::test_percent_rejects_garbage_rate",
                "tests/test_percent.py::test_percent_rounds_to_the_nearest_cent[1000-0.1-1]",
            ),
            EASY,
            Commit(
                "2026-03-09T13:10:00Z",
                ANA,
                "percent(): exact, half a cent away from zero, like parse (#2)",
                (
                    Edit(
                        "ledger/money.py",
                        "        return Money(int(self.cents * float(rate) / 100))\n",
                        "        return Money(_round_cents(self.cents * _decimal(rate) / 100))\n",
                    ),
                    Edit(
                        "tests/test_percent.py",
                        "def test_percent_accepts_strings():",
                        _t("""
@pytest.mark.parametrize(
    ("cents", "rate", "expected"),
    [(1999, "8.25", 165), (50, 5, 3), (2999, 7.5, 225), (-50, 5, -3), (1000, "0.05", 1), (1000, 0.1, 1)],
)
def test_percent_rounds_to_the_nearest_cent(cents, rate, expected):
    assert Money(cents).percent(rate) == Money(expected)


def test_tax_on_a_parsed_price():
    assert str(Money.parse("19.99").percent("8.25")) == "1.65"


def test_percent_accepts_strings():"""),
                    ),
                ),
            ),
        ),
        Commit(
            "2026-03-11T09:00:00Z",
            BEN,
            "Ledger.accounts(): the accounts with entries, sorted",
            (
                Edit(
                    "ledger/book.py",
                    "    def balance(",
                    _t('''
    def accounts(self) -> list[str]:
        """The names of the accounts that have entries, sorted."""
        return sorted({entry.account for entry in self.entries})

    def balance('''),
                ),
                Edit(
                    "tests/test_book.py",
                    "def test_post_requires_account():",
                    _t("""
def test_accounts_sorted_and_unique():
    book = Ledger()
    book.post(dt.date(2026, 1, 5), "savings", Money(1))
    book.post(dt.date(2026, 1, 5), "cash", Money(1))
    book.post(dt.date(2026, 1, 6), "savings", Money(1))
    assert book.accounts() == ["cash", "savings"]


def test_post_requires_account():"""),
                ),
            ),
        ),
        Issue(
            3,
            "2026-03-13T08:45:00Z",
            _t("""
balance(until=...) leaves out the entries of the until day itself

Month-end balances are wrong whenever something was posted on the last day of the month:

```python
import datetime as dt
from ledger import Ledger, Money

book = Ledger()
book.post(dt.date(2026, 1, 31), "cash", Money(10000), "opening")
book.post(dt.date(2026, 2, 28), "cash", Money(-1000), "rent share")
print(book.balance("cash", until=dt.date(2026, 2, 28)))
```

This prints `100.00`. I expected `90.00`: the rent went out on the 28th, and our bank's February statement, which closes on the 28th, shows it. On the opening day itself, `book.balance("cash", until=dt.date(2026, 1, 31))` gives `0.00` rather than `100.00`.
"""),
            (
                "tests/test_balance_dates.py::test_balance_includes_the_until_day",
                "tests/test_balance_dates.py::test_balance_on_the_first_entry_day",
            ),
            (
                "tests/test_balance_dates.py::test_balance_before_any_entry",
                "tests/test_balance_dates.py::test_balance_between_entries",
                "tests/test_balance_dates.py::test_balance_without_until",
            ),
            EASY,
            Commit(
                "2026-03-13T12:00:00Z",
                BEN,
                "balance(until=day) includes the entries of that day (#3)",
                (
                    Edit(
                        "ledger/book.py",
                        "if until is not None and entry.date >= until:",
                        "if until is not None and entry.date > until:",
                    ),
                    Write(
                        "tests/test_balance_dates.py",
                        _t(r"""
import datetime as dt

from ledger import Ledger, Money


def _book():
    book = Ledger()
    book.post(dt.date(2026, 1, 31), "cash", Money(10000), "opening")
    book.post(dt.date(2026, 2, 14), "cash", Money(-2500), "flowers")
    book.post(dt.date(2026, 2, 28), "cash", Money(-1000), "rent share")
    book.post(dt.date(2026, 3, 1), "cash", Money(-500), "coffee")
    return book


def test_balance_includes_the_until_day():
    assert _book().balance("cash", until=dt.date(2026, 2, 28)) == Money(6500)


def test_balance_on_the_first_entry_day():
    assert _book().balance("cash", until=dt.date(2026, 1, 31)) == Money(10000)


def test_balance_before_any_entry():
    assert _book().balance("cash", until=dt.date(2026, 1, 30)) == Money(0)


def test_balance_between_entries():
    assert _book().balance("cash", until=dt.date(2026, 2, 20)) == Money(7500)


def test_balance_without_until():
    assert _book().balance("cash") == Money(6000)
"""),
                    ),
                ),
            ),
            hints_text="The docstring of Ledger.balance says the day `until` is included.",
        ),
    ),
)


# -- sclate/slugkit ----------------------------------------------------------------------------

DMITRI = Person("Dmitri Volkov", "dmitri.volkov@sclate.dev")

SLUG_V1 = _t(r'''
"""URL slugs: lower-case ASCII letters and digits, words joined by a separator."""

from __future__ import annotations

import re

_NOT_ALNUM = re.compile(r"[^a-z0-9]+")


def slugify(text: str, separator: str = "-") -> str:
    """A slug for ``text``: ``slugify("Hello, World!") == "hello-world"``.

    Each run of characters other than letters and digits becomes one
    ``separator``; there is none at either end.
    """
    if not separator:
        raise ValueError("separator must not be empty")
    return _NOT_ALNUM.sub(separator, text.lower()).strip(separator)
''')

SLUG_TEST_V1 = _t(r"""
import pytest

from slugkit import slugify


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        pytest.param("Hello, World!", "hello-world", id="punctuation"),
        pytest.param("  many   spaces  ", "many-spaces", id="spaces"),
        pytest.param("Release 2.0", "release-2-0", id="digits"),
        pytest.param("already-a-slug", "already-a-slug", id="idempotent"),
        pytest.param("", "", id="empty"),
    ],
)
def test_slugify(text, slug):
    assert slugify(text) == slug


def test_custom_separator():
    assert slugify("Hello, World!", separator="_") == "hello_world"


def test_empty_separator_rejected():
    with pytest.raises(ValueError):
        slugify("x", separator="")
""")

SLUGKIT = Repo(
    "slugkit",
    (
        Commit(
            "2026-02-09T10:00:00Z",
            DMITRI,
            "slugify(): lower case, ASCII letters and digits, one separator between words",
            (
                Write(".gitignore", GITIGNORE),
                Write("pyproject.toml", _pyproject("slugkit", "URL slugs from titles")),
                Write(
                    "README.md",
                    "# slugkit\n\nURL slugs from titles, standard library only.\n\n"
                    '```python\n>>> from slugkit import slugify\n>>> slugify("Hello, World!")\n'
                    "'hello-world'\n```\n",
                ),
                Write(
                    "slugkit/__init__.py",
                    '"""slugkit: URL slugs from titles."""\n\n'
                    'from slugkit.slug import slugify\n\n__all__ = ["slugify"]\n',
                ),
                Write("slugkit/slug.py", SLUG_V1),
                Write("tests/test_slug.py", SLUG_TEST_V1),
            ),
        ),
        Commit(
            "2026-02-11T16:20:00Z",
            DMITRI,
            "slugify(max_length=...): cut at a word boundary",
            (
                Edit(
                    "slugkit/slug.py",
                    'def slugify(text: str, separator: str = "-") -> str:',
                    'def slugify(text: str, separator: str = "-", max_length: int | None = None) -> str:',
                ),
                Edit(
                    "slugkit/slug.py",
                    "    ``separator``; there is none at either end.\n",
                    "    ``separator``; there is none at either end. With ``max_length`` the\n"
                    "    slug is cut to at most that many characters, after the last whole word\n"
                    "    that fits (a single word longer than that is cut inside the word).\n",
                ),
                Edit(
                    "slugkit/slug.py",
                    "    return _NOT_ALNUM.sub(separator, text.lower()).strip(separator)\n",
                    _t("""
    slug = _NOT_ALNUM.sub(separator, text.lower()).strip(separator)
    if max_length is not None:
        slug = _truncate(slug, max_length, separator)
    return slug


def _truncate(slug: str, max_length: int, separator: str) -> str:
    if max_length < 1:
        raise ValueError("max_length must be at least 1")
    if len(slug) <= max_length:
        return slug
    cut = slug.rfind(separator, 0, max_length)
    if cut == -1:
        return slug[:max_length]
    return slug[:cut]
"""),
                ),
                Edit(
                    "tests/test_slug.py",
                    "def test_empty_separator_rejected():",
                    _t("""
def test_max_length_cuts_at_a_word_boundary():
    assert slugify("The quick brown fox", max_length=12) == "the-quick"


def test_max_length_cuts_a_long_word():
    assert slugify("Supercalifragilistic", max_length=5) == "super"


def test_max_length_leaves_short_slugs_alone():
    assert slugify("Short", max_length=50) == "short"


def test_max_length_must_be_positive():
    with pytest.raises(ValueError):
        slugify("abc def", max_length=0)


def test_empty_separator_rejected():"""),
                ),
            ),
        ),
        Commit(
            "2026-02-17T09:40:00Z",
            ANA,
            "Add unique_slug(): title, title-2, title-3, ...",
            (
                Edit(
                    "slugkit/slug.py",
                    "\n\ndef _truncate(",
                    _t('''


def unique_slug(text: str, taken: Collection[str], separator: str = "-") -> str:
    """A slug for ``text`` that is not in ``taken``: the plain slug if it is free,
    else the first free of ``slug-2``, ``slug-3``, ..."""
    base = slugify(text, separator)
    if base not in taken:
        return base
    n = 2
    while f"{base}{separator}{n}" in taken:
        n += 1
    return f"{base}{separator}{n}"


def _truncate('''),
                ),
                Edit(
                    "slugkit/slug.py",
                    "import re\n",
                    "import re\nfrom collections.abc import Collection\n",
                ),
                Write(
                    "slugkit/__init__.py",
                    '"""slugkit: URL slugs from titles."""\n\n'
                    'from slugkit.slug import slugify, unique_slug\n\n__all__ = ["slugify", "unique_slug"]\n',
                ),
                Write(
                    "tests/test_unique.py",
                    _t(r"""
from slugkit import unique_slug


def test_free_slug_is_used_as_is():
    assert unique_slug("My Post", taken=set()) == "my-post"


def test_taken_slug_gets_a_number():
    assert unique_slug("My Post", taken={"my-post"}) == "my-post-2"
    assert unique_slug("My Post", taken={"my-post", "my-post-2"}) == "my-post-3"
"""),
                ),
            ),
        ),
        Commit(
            "2026-02-18T12:00:00Z",
            DMITRI,
            "README: max_length and unique_slug",
            (
                Edit(
                    "README.md",
                    "'hello-world'\n```\n",
                    "'hello-world'\n>>> slugify(\"The quick brown fox\", max_length=12)\n'the-quick'\n"
                    '>>> from slugkit import unique_slug\n>>> unique_slug("Hello, World!", taken={"hello-world"})\n'
                    "'hello-world-2'\n```\n",
                ),
            ),
        ),
        Issue(
            1,
            "2026-02-23T14:05:00Z",
            _t("""
slugify mangles accented letters

`slugify` splits words at every accented letter instead of keeping the letter:

```python
>>> from slugkit import slugify
>>> slugify("Crème Brûlée")
'cr-me-br-l-e'
>>> slugify("Déjà vu")
'd-j-vu'
```

I expected `'creme-brulee'` and `'deja-vu'`, the way other slug libraries (and WordPress) do it. Titles typed with a Japanese input method come out empty: `slugify("Ｏｒｄｅｒ ２０２６")` (full-width letters and digits) gives `''` instead of `'order-2026'`.

`unique_slug` has the same problem: `unique_slug("Café", taken={"cafe"})` returns `'caf'`, which is not even recognisable as a variant of the existing `cafe` (`'cafe-2'` expected).
"""),
            (
                "tests/test_slug.py::test_slugify[accents]",
                "tests/test_unicode.py::test_accented_letters_keep_their_base_letter",
                "tests/test_unicode.py::test_fullwidth_letters_and_digits",
                "tests/test_unicode.py::test_unique_slug_with_accents",
            ),
            (
                "tests/test_slug.py::test_slugify[punctuation]",
                "tests/test_slug.py::test_slugify[spaces]",
                "tests/test_slug.py::test_slugify[digits]",
                "tests/test_slug.py::test_slugify[idempotent]",
                "tests/test_slug.py::test_slugify[empty]",
                "tests/test_slug.py::test_max_length_cuts_at_a_word_boundary",
                "tests/test_slug.py::test_max_length_cuts_a_long_word",
                "tests/test_slug.py::test_max_length_leaves_short_slugs_alone",
                "tests/test_slug.py::test_max_length_must_be_positive",
                "tests/test_slug.py::test_custom_separator",
                "tests/test_slug.py::test_empty_separator_rejected",
                "tests/test_unicode.py::test_symbols_only",
            ),
            MEDIUM,
            Commit(
                "2026-02-24T10:30:00Z",
                DMITRI,
                "Transliterate accented and full-width letters to ASCII (#1)",
                (
                    Edit(
                        "slugkit/slug.py",
                        "import re\n",
                        "import re\nimport unicodedata\n",
                    ),
                    Edit(
                        "slugkit/slug.py",
                        "    slug = _NOT_ALNUM.sub(separator, text.lower()).strip(separator)\n",
                        "    slug = _NOT_ALNUM.sub(separator, _ascii(text).lower()).strip(separator)\n",
                    ),
                    Edit(
                        "slugkit/slug.py",
                        "\n\ndef _truncate(",
                        _t('''


def _ascii(text: str) -> str:
    """``text`` in ASCII: accented letters lose their accents (é is e followed by a
    combining accent once decomposed) and compatibility forms such as full-width
    letters and digits become their plain forms (NFKD); what is left is dropped."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def _truncate('''),
                    ),
                    Edit(
                        "tests/test_slug.py",
                        '        pytest.param("", "", id="empty"),\n',
                        '        pytest.param("", "", id="empty"),\n'
                        '        pytest.param("Déjà vu", "deja-vu", id="accents"),\n',
                    ),
                    Write(
                        "tests/test_unicode.py",
                        _t(r"""
from slugkit import slugify, unique_slug


def test_accented_letters_keep_their_base_letter():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_fullwidth_letters_and_digits():
    assert slugify("Ｏｒｄｅｒ ２０２６") == "order-2026"


def test_symbols_only():
    assert slugify("★ ☆ ★") == ""


def test_unique_slug_with_accents():
    assert unique_slug("Café", taken={"cafe"}) == "cafe-2"
"""),
                    ),
                ),
            ),
        ),
        Commit(
            "2026-02-27T15:10:00Z",
            ANA,
            "python -m slugkit: slugs of the arguments, or of stdin's lines",
            (
                Write(
                    "slugkit/__main__.py",
                    _t(r'''
"""``python -m slugkit [--separator S] [--max-length N] [TEXT ...]``: print the slug
of each TEXT, or of each line of standard input when there is none."""

from __future__ import annotations

import argparse
import sys

from slugkit import slugify


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slugkit", description="Print URL slugs.")
    parser.add_argument("text", nargs="*")
    parser.add_argument("--separator", default="-")
    parser.add_argument("--max-length", type=int)
    args = parser.parse_args(argv)
    lines = args.text or [line.rstrip("\n") for line in sys.stdin]
    for line in lines:
        print(slugify(line, separator=args.separator, max_length=args.max_length))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''),
                ),
                Write(
                    "tests/test_cli.py",
                    _t(r"""
import io

from slugkit.__main__ import main


def test_cli_arguments(capsys):
    assert main(["Hello World", "Second one"]) == 0
    assert capsys.readouterr().out == "hello-world\nsecond-one\n"


def test_cli_stdin(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("First Line\nSecond Line\n"))
    assert main([]) == 0
    assert capsys.readouterr().out == "first-line\nsecond-line\n"


def test_cli_max_length(capsys):
    main(["--max-length", "5", "Hello World"])
    assert capsys.readouterr().out == "hello\n"
"""),
                ),
            ),
        ),
        Issue(
            2,
            "2026-03-04T11:20:00Z",
            _t("""
max_length drops a word that fits exactly

With `max_length`, a word that ends exactly at the limit is dropped:

```python
>>> from slugkit import slugify
>>> slugify("The quick brown fox", max_length=9)
'the'
>>> slugify("The quick brown fox", max_length=10)
'the-quick'
```

`the-quick` is 9 characters long, so I expected it for `max_length=9` as well. The command line does the same: `python -m slugkit --max-length 11 "Hello world again"` prints `hello` rather than `hello-world` (11 characters). Any separator is affected: `slugify("hello big world", separator="_", max_length=9)` gives `'hello'` instead of `'hello_big'`.
"""),
            (
                "tests/test_slug.py::test_max_length_keeps_a_word_ending_at_the_limit",
                "tests/test_slug.py::test_max_length_with_another_separator",
            ),
            (
                "tests/test_slug.py::test_slugify[punctuation]",
                "tests/test_slug.py::test_slugify[spaces]",
                "tests/test_slug.py::test_slugify[digits]",
                "tests/test_slug.py::test_slugify[idempotent]",
                "tests/test_slug.py::test_slugify[empty]",
                "tests/test_slug.py::test_slugify[accents]",
                "tests/test_slug.py::test_max_length_cuts_at_a_word_boundary",
                "tests/test_slug.py::test_max_length_cuts_a_long_word",
                "tests/test_slug.py::test_max_length_leaves_short_slugs_alone",
                "tests/test_slug.py::test_max_length_must_be_positive",
                "tests/test_slug.py::test_max_length_one_past_a_word",
                "tests/test_slug.py::test_custom_separator",
                "tests/test_slug.py::test_empty_separator_rejected",
            ),
            EASY,
            Commit(
                "2026-03-05T09:15:00Z",
                DMITRI,
                "max_length: keep a word that ends exactly at the limit (#2)",
                (
                    Edit(
                        "slugkit/slug.py",
                        "    cut = slug.rfind(separator, 0, max_length)\n",
                        "    # A separator right after the limit means the word before it fits.\n"
                        "    cut = slug.rfind(separator, 0, max_length + len(separator))\n",
                    ),
                    Edit(
                        "tests/test_slug.py",
                        "def test_max_length_must_be_positive():",
                        _t("""
def test_max_length_keeps_a_word_ending_at_the_limit():
    assert slugify("The quick brown fox", max_length=9) == "the-quick"


def test_max_length_one_past_a_word():
    assert slugify("The quick brown fox", max_length=10) == "the-quick"


def test_max_length_with_another_separator():
    assert slugify("hello big world", separator="_", max_length=9) == "hello_big"


def test_max_length_must_be_positive():"""),
                    ),
                ),
            ),
        ),
    ),
)


# -- sclate/tinyini ----------------------------------------------------------------------------

INES = Person("Inês Duarte", "ines.duarte@sclate.dev")

INI_PARSER = _t(r'''
"""A small INI parser.

::

    ; a comment
    [server]
    host = example.org
    port: 8080          # an inline comment

Section and key names are case-insensitive and stored in lower case. Values
are strings. A line starting with ``#`` or ``;`` is a comment; so is the rest
of a line from a ``#`` or ``;`` that follows whitespace, which lets values
such as ``#ff0000`` or ``a;b`` through unchanged.
"""

from __future__ import annotations

import re

_SECTION = re.compile(r"\[\s*(?P<name>[^\]]+?)\s*\]")
_OPTION = re.compile(r"(?P<key>[^=:\s][^=:]*?)\s*[=:]\s*(?P<value>.*)")


class ParseError(ValueError):
    """A line that is none of: a section header, an option, a comment, blank."""

    def __init__(self, lineno: int, message: str) -> None:
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


class Config:
    """Parsed sections, ``{section: {key: value}}``, in file order."""

    def __init__(self, sections: dict[str, dict[str, str]]) -> None:
        self._sections = sections

    def sections(self) -> list[str]:
        return list(self._sections)

    def options(self, section: str) -> dict[str, str]:
        return dict(self._sections.get(section.lower(), {}))

    def get(self, section: str, key: str, fallback: str | None = None) -> str | None:
        """The value of ``key`` in ``section``; ``fallback`` if either is missing."""
        return self._sections.get(section.lower(), {}).get(key.lower()) or fallback


def _strip_inline_comment(value: str) -> str:
    for marker in "#;":
        if marker in value:
            value = value[: value.index(marker)]
    return value.strip()


def parse(text: str) -> Config:
    """Parse the text of an INI file; ParseError names the first bad line."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        section = _SECTION.fullmatch(stripped)
        if section:
            current = sections.setdefault(section["name"].lower(), {})
            continue
        if current is None:
            raise ParseError(lineno, "option outside of any section")
        option = _OPTION.fullmatch(stripped)
        if option is None:
            raise ParseError(lineno, f"expected 'key = value', got {stripped!r}")
        current[option["key"].lower()] = _strip_inline_comment(option["value"])
    return Config(sections)
''')

INI_TEST_PARSER = _t(r'''
import pytest

from tinyini import ParseError, parse

SAMPLE = """\
; deployment settings
[Server]
Host = example.org
port: 8080

[paths]
data = /var/lib/app   # where the data lives
"""


def test_sections_in_file_order():
    assert parse(SAMPLE).sections() == ["server", "paths"]


def test_sections_and_keys_are_case_insensitive():
    config = parse(SAMPLE)
    assert config.get("SERVER", "host") == "example.org"
    assert config.get("server", "HOST") == "example.org"


def test_colon_separator():
    assert parse(SAMPLE).get("server", "port") == "8080"


def test_inline_comment_is_dropped():
    assert parse(SAMPLE).get("paths", "data") == "/var/lib/app"


def test_comment_lines_and_blank_lines():
    assert parse("# top\n\n[a]\n; note\nx = 1\n").options("a") == {"x": "1"}


def test_missing_key_gives_fallback():
    config = parse(SAMPLE)
    assert config.get("server", "user") is None
    assert config.get("server", "user", fallback="www") == "www"
    assert config.get("nosuch", "host", fallback="localhost") == "localhost"


def test_option_outside_a_section():
    with pytest.raises(ParseError) as err:
        parse("x = 1\n")
    assert err.value.lineno == 1


def test_bad_line_reports_its_number():
    with pytest.raises(ParseError) as err:
        parse("[a]\nx = 1\nnot an option\n")
    assert err.value.lineno == 3
''')

TINYINI = Repo(
    "tinyini",
    (
        Commit(
            "2026-01-26T11:00:00Z",
            INES,
            "INI parser: sections, options, comments",
            (
                Write(".gitignore", GITIGNORE),
                Write("pyproject.toml", _pyproject("tinyini", "A small INI parser")),
                Write(
                    "README.md",
                    "# tinyini\n\nA small INI parser, standard library only. See the docstring of "
                    "`tinyini/parser.py` for the syntax.\n\n"
                    '```python\n>>> import tinyini\n>>> config = tinyini.parse("[server]\\nport = 8080\\n")\n'
                    '>>> config.get("server", "port")\n\'8080\'\n```\n',
                ),
                Write(
                    "tinyini/__init__.py",
                    '"""tinyini: a small INI parser."""\n\n'
                    'from tinyini.parser import Config, ParseError, parse\n\n__all__ = ["Config", "ParseError", "parse"]\n',
                ),
                Write("tinyini/parser.py", INI_PARSER),
                Write("tests/test_parser.py", INI_TEST_PARSER),
            ),
        ),
        Commit(
            "2026-01-29T15:30:00Z",
            INES,
            "Continuation lines: an indented line continues the value above",
            (
                Edit(
                    "tinyini/parser.py",
                    "    port: 8080          # an inline comment\n",
                    "    port: 8080          # an inline comment\n    motd = Welcome,\n      friend.\n",
                ),
                Edit(
                    "tinyini/parser.py",
                    "are strings. A line",
                    "are strings; an indented line continues the value above it, joined with\na newline. A line",
                ),
                Edit(
                    "tinyini/parser.py",
                    "    current: dict[str, str] | None = None\n",
                    "    current: dict[str, str] | None = None\n    key: str | None = None\n",
                ),
                Edit(
                    "tinyini/parser.py",
                    "            continue\n        section = _SECTION",
                    _t("""
            continue
        if line[0].isspace() and current is not None and key is not None:
            current[key] += "\\n" + _strip_inline_comment(stripped)
            continue
        section = _SECTION"""),
                ),
                Edit(
                    "tinyini/parser.py",
                    '            current = sections.setdefault(section["name"].lower(), {})\n',
                    '            current = sections.setdefault(section["name"].lower(), {})\n            key = None\n',
                ),
                Edit(
                    "tinyini/parser.py",
                    '        current[option["key"].lower()] = _strip_inline_comment(option["value"])\n',
                    '        key = option["key"].lower()\n        current[key] = _strip_inline_comment(option["value"])\n',
                ),
                Write(
                    "tests/test_continuation.py",
                    _t(r"""
from tinyini import parse


def test_indented_line_continues_the_value():
    config = parse("[motd]\ntext = Welcome,\n  friend.\n")
    assert config.get("motd", "text") == "Welcome,\nfriend."


def test_comment_inside_a_continued_value_is_skipped():
    config = parse("[motd]\ntext = one\n  # not part of it\n  two\n")
    assert config.get("motd", "text") == "one\ntwo"


def test_indented_option_after_a_section_is_an_option():
    config = parse("[a]\n  x = 1\n")
    assert config.get("a", "x") == "1"
"""),
                ),
            ),
        ),
        Commit(
            "2026-02-03T10:20:00Z",
            BEN,
            "Config.get_int and Config.get_bool",
            (
                Edit(
                    "tinyini/parser.py",
                    "\n\ndef _strip_inline_comment(",
                    _t('''

    def get_int(self, section: str, key: str, fallback: int | None = None) -> int | None:
        """The value of ``key`` in ``section`` as an int; ``fallback`` if missing."""
        value = self.get(section, key)
        if value is None:
            return fallback
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"[{section}] {key}: not an integer: {value!r}") from None

    def get_bool(self, section: str, key: str, fallback: bool | None = None) -> bool | None:
        """The value as a bool (1/yes/true/on, 0/no/false/off, any case); ``fallback`` if missing."""
        value = self.get(section, key)
        if value is None:
            return fallback
        try:
            return _BOOLEANS[value.lower()]
        except KeyError:
            raise ValueError(f"[{section}] {key}: not a boolean: {value!r}") from None


def _strip_inline_comment('''),
                ),
                Edit(
                    "tinyini/parser.py",
                    "\n\nclass ParseError(",
                    _t("""
_BOOLEANS = {"1": True, "yes": True, "true": True, "on": True, "0": False, "no": False, "false": False, "off": False}


class ParseError("""),
                ),
                Write(
                    "tests/test_config.py",
                    _t(r'''
import pytest

from tinyini import parse

CONFIG = parse(
    """\
[server]
port = 8080
workers = 0
debug = Yes
verbose = off
name = api
"""
)


def test_get_int():
    assert CONFIG.get_int("server", "port") == 8080


def test_get_int_zero():
    assert CONFIG.get_int("server", "workers") == 0


def test_get_int_missing_gives_fallback():
    assert CONFIG.get_int("server", "threads", fallback=4) == 4


def test_get_int_rejects_text():
    with pytest.raises(ValueError, match="not an integer"):
        CONFIG.get_int("server", "name")


@pytest.mark.parametrize(("key", "expected"), [("debug", True), ("verbose", False)])
def test_get_bool(key, expected):
    assert CONFIG.get_bool("server", key) is expected


def test_get_bool_rejects_text():
    with pytest.raises(ValueError, match="not a boolean"):
        CONFIG.get_bool("server", "name")
'''),
                ),
            ),
        ),
        Commit(
            "2026-02-05T17:45:00Z",
            INES,
            "load(path): parse a file (UTF-8, a byte-order mark is ignored)",
            (
                Edit(
                    "tinyini/parser.py",
                    "import re\n",
                    "import os\nimport re\n",
                ),
                Edit(
                    "tinyini/parser.py",
                    "    return Config(sections)\n",
                    _t('''
    return Config(sections)


def load(path: str | os.PathLike[str]) -> Config:
    """Parse the file at ``path`` (UTF-8; a leading byte-order mark is ignored)."""
    with open(path, encoding="utf-8-sig") as f:
        return parse(f.read())
'''),
                ),
                Write(
                    "tinyini/__init__.py",
                    '"""tinyini: a small INI parser."""\n\n'
                    "from tinyini.parser import Config, ParseError, load, parse\n\n"
                    '__all__ = ["Config", "ParseError", "load", "parse"]\n',
                ),
                Write(
                    "tests/test_load.py",
                    _t(r"""
from tinyini import load


def test_load_reads_utf8(tmp_path):
    path = tmp_path / "app.ini"
    path.write_text("[app]\nname = Café\n", encoding="utf-8")
    assert load(path).get("app", "name") == "Café"


def test_load_ignores_a_byte_order_mark(tmp_path):
    path = tmp_path / "app.ini"
    path.write_bytes("\ufeff[app]\nname = x\n".encode())
    assert load(str(path)).sections() == ["app"]
"""),
                ),
            ),
        ),
        Issue(
            1,
            "2026-02-10T09:30:00Z",
            _t('''
Values containing # or ; are cut off

The module docstring says an inline comment starts with `#` or `;` *after whitespace*, so a `#` or `;` inside a value should be kept. It is not:

```python
>>> import tinyini
>>> config = tinyini.parse("""
... [site]
... url = https://example.org/docs#install
... accent = #ff0000
... password = s3cr;t
... """)
>>> config.get("site", "url")
'https://example.org/docs'
>>> print(config.get("site", "accent"))
None
>>> config.get("site", "password")
's3cr'
```

Expected `'https://example.org/docs#install'`, `'#ff0000'` and `'s3cr;t'`. Real comments after whitespace (`path = /tmp/x ; scratch space`) are dropped correctly and should stay that way.
'''),
            (
                "tests/test_parser.py::test_hash_and_semicolon_inside_values[fragment]",
                "tests/test_parser.py::test_hash_and_semicolon_inside_values[leading-hash]",
                "tests/test_parser.py::test_hash_and_semicolon_inside_values[semicolon]",
            ),
            (
                "tests/test_parser.py::test_sections_in_file_order",
                "tests/test_parser.py::test_sections_and_keys_are_case_insensitive",
                "tests/test_parser.py::test_colon_separator",
                "tests/test_parser.py::test_inline_comment_is_dropped",
                "tests/test_parser.py::test_comment_lines_and_blank_lines",
                "tests/test_parser.py::test_missing_key_gives_fallback",
                "tests/test_parser.py::test_option_outside_a_section",
                "tests/test_parser.py::test_bad_line_reports_its_number",
                "tests/test_parser.py::test_hash_and_semicolon_inside_values[semicolon-comment]",
                "tests/test_parser.py::test_hash_and_semicolon_inside_values[tab-comment]",
            ),
            MEDIUM,
            Commit(
                "2026-02-11T14:00:00Z",
                INES,
                "Inline comments start only after whitespace (#1)",
                (
                    Edit(
                        "tinyini/parser.py",
                        _t("""
def _strip_inline_comment(value: str) -> str:
    for marker in "#;":
        if marker in value:
            value = value[: value.index(marker)]
    return value.strip()
"""),
                        _t("""
def _strip_inline_comment(value: str) -> str:
    value = value.strip()
    comment = _INLINE_COMMENT.search(value)
    return value[: comment.start()].rstrip() if comment else value
"""),
                    ),
                    Edit(
                        "tinyini/parser.py",
                        '_OPTION = re.compile(r"(?P<key>[^=:\\s][^=:]*?)\\s*[=:]\\s*(?P<value>.*)")\n',
                        '_OPTION = re.compile(r"(?P<key>[^=:\\s][^=:]*?)\\s*[=:]\\s*(?P<value>.*)")\n'
                        '_INLINE_COMMENT = re.compile(r"\\s[#;]")\n',
                    ),
                    Edit(
                        "tests/test_parser.py",
                        "def test_comment_lines_and_blank_lines():",
                        _t(r"""
@pytest.mark.parametrize(
    ("line", "value"),
    [
        pytest.param("url = https://example.org/docs#install", "https://example.org/docs#install", id="fragment"),
        pytest.param("accent = #ff0000", "#ff0000", id="leading-hash"),
        pytest.param("password = s3cr;t", "s3cr;t", id="semicolon"),
        pytest.param("path = /tmp/x ; scratch space", "/tmp/x", id="semicolon-comment"),
        pytest.param("path = /tmp/x\t# after a tab", "/tmp/x", id="tab-comment"),
    ],
)
def test_hash_and_semicolon_inside_values(line, value):
    key = line.split()[0]
    assert parse("[a]\n" + line + "\n").get("a", key) == value


def test_comment_lines_and_blank_lines():"""),
                    ),
                ),
            ),
        ),
        Commit(
            "2026-02-16T10:10:00Z",
            BEN,
            "Config.has(section, key)",
            (
                Edit(
                    "tinyini/parser.py",
                    "\n    def get_int(",
                    _t('''

    def has(self, section: str, key: str) -> bool:
        """Whether ``section`` sets ``key``, whatever its value."""
        return self.get(section, key) is not None

    def get_int('''),
                ),
                Edit(
                    "tests/test_config.py",
                    "def test_get_int():",
                    _t("""
def test_has():
    assert CONFIG.has("server", "port")
    assert CONFIG.has("SERVER", "Port")
    assert not CONFIG.has("server", "threads")
    assert not CONFIG.has("client", "port")


def test_get_int():"""),
                ),
            ),
        ),
        Issue(
            2,
            "2026-02-19T16:00:00Z",
            _t("""
An option set to an empty value is treated as missing

```python
>>> import tinyini
>>> config = tinyini.parse("[auth]\\nuser = admin\\npassword =\\n")
>>> config.has("auth", "password")
False
>>> config.get("auth", "password", fallback="changeme")
'changeme'
```

The file sets `password` explicitly, to the empty string (a local development database has no password), so I expected `True` and `''`, as `configparser` gives. Our service falls back to the default password instead and cannot log in.
"""),
            (
                "tests/test_config.py::test_empty_value_is_an_empty_string",
                "tests/test_config.py::test_empty_value_is_present",
            ),
            (
                "tests/test_config.py::test_has",
                "tests/test_config.py::test_get_int",
                "tests/test_config.py::test_get_int_zero",
                "tests/test_config.py::test_get_int_missing_gives_fallback",
                "tests/test_config.py::test_get_int_rejects_text",
                "tests/test_config.py::test_get_bool[debug-True]",
                "tests/test_config.py::test_get_bool[verbose-False]",
                "tests/test_config.py::test_get_bool_rejects_text",
                "tests/test_config.py::test_missing_option_still_falls_back",
            ),
            EASY,
            Commit(
                "2026-02-20T11:25:00Z",
                INES,
                "An empty value is a value, not a missing option (#2)",
                (
                    Edit(
                        "tinyini/parser.py",
                        "        return self._sections.get(section.lower(), {}).get(key.lower()) or fallback\n",
                        "        value = self._sections.get(section.lower(), {}).get(key.lower())\n"
                        "        return fallback if value is None else value\n",
                    ),
                    Edit(
                        "tests/test_config.py",
                        "def test_has():",
                        _t(r"""
EMPTY = parse("[auth]\nuser = admin\npassword =\ntoken:\n")


def test_empty_value_is_an_empty_string():
    assert EMPTY.get("auth", "password") == ""
    assert EMPTY.get("auth", "token", fallback="none") == ""


def test_empty_value_is_present():
    assert EMPTY.has("auth", "password")


def test_missing_option_still_falls_back():
    assert EMPTY.get("auth", "realm", fallback="default") == "default"


def test_has():"""),
                    ),
                ),
            ),
        ),
    ),
)

REPOS = (LEDGER, SLUGKIT, TINYINI)


# -- building the repositories -----------------------------------------------------------------


def _git_env(home: Path) -> dict[str, str]:
    """git with no user or system configuration, UTC, C locale."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
        "TZ": "UTC",
    }


GIT_OPTIONS = (
    "-c",
    "init.defaultBranch=main",
    "-c",
    "core.autocrlf=false",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "pack.threads=1",
)


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["git", *GIT_OPTIONS, *args],
        cwd=cwd,
        env=env if env is not None else _git_env(cwd),
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


def _git_date(iso: str) -> str:
    when = dt.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    return f"@{int(when.timestamp())} +0000"


def _apply(tree: Path, change: Write | Edit) -> None:
    path = tree / change.path
    if isinstance(change, Write):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(change.text.encode())
        return
    text = path.read_bytes().decode()
    if text.count(change.old) != 1:
        raise ValueError(f"{change.path}: the text to replace occurs {text.count(change.old)} times: {change.old!r}")
    path.write_bytes(text.replace(change.old, change.new).encode())


def _commit(tree: Path, home: Path, commit: Commit) -> str:
    for change in commit.changes:
        _apply(tree, change)
    env = _git_env(home) | {
        "GIT_AUTHOR_NAME": commit.author.name,
        "GIT_AUTHOR_EMAIL": commit.author.email,
        "GIT_AUTHOR_DATE": _git_date(commit.when),
        "GIT_COMMITTER_NAME": commit.author.name,
        "GIT_COMMITTER_EMAIL": commit.author.email,
        "GIT_COMMITTER_DATE": _git_date(commit.when),
    }
    _git(tree, "add", "--all", env=env)
    _git(tree, "commit", "--quiet", "--no-verify", "-m", commit.message, env=env)
    return _git(tree, "rev-parse", "HEAD", env=env).strip()


def _diff(tree: Path, home: Path, base: str, head: str, *pathspec: str) -> str:
    """``git diff base head`` as SWE-bench stores it: ``diff --git`` headers, no ``index`` lines."""
    raw = _git(
        tree,
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-renames",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        base,
        head,
        "--",
        *pathspec,
        env=_git_env(home),
    )
    out: list[str] = []
    in_header = False
    for line in raw.splitlines(keepends=True):
        if line.startswith("diff --git "):
            in_header = True
        elif line.startswith("@@"):
            in_header = False
        if in_header and line.startswith("index "):
            continue
        out.append(line)
    return "".join(out)


# -- the eval script (swebench.utils semantics, reimplemented so generation needs no swebench) --


def patch_files(patch: str) -> list[str]:
    """Every file a patch touches (the ``b/`` side of its ``diff --git`` lines), in order."""
    return [m.group(1) for m in re.finditer(r"^diff --git a/\S+ b/(\S+)$", patch, re.MULTILINE)]


def modified_files(patch: str) -> list[str]:
    """``swebench.utils.get_modified_files``: files that exist before the patch."""
    return [m.group(1) for m in re.finditer(r"^--- a/(\S+)$", patch, re.MULTILINE)]


def new_files(patch: str) -> list[str]:
    """Files the patch creates (``--- /dev/null``)."""
    return [m.group(1) for m in re.finditer(r"^--- /dev/null\n\+\+\+ b/(\S+)$", patch, re.MULTILINE)]


def heredoc_delimiter(content: str) -> str:
    """``swebench.utils.generate_heredoc_delimiter``."""
    delimiter = f"EOF_{hashlib.blake2b(content.encode()).hexdigest()[:12]}"
    while delimiter in content:
        delimiter = f"EOF_{hashlib.blake2b(content.encode() + delimiter.encode()).hexdigest()[:12]}"
    return delimiter


def eval_script(base: str, test_patch: str) -> str:
    """Upstream's eval script shape (4.1.0 ``make_eval_script_list_py``, as in Verified's
    ``eval_script`` column) minus conda and the install re-run, for an image where /testbed is
    the checkout and ``python`` has pytest. Hardened as in docs/swebench-notes.md §7.4: the
    files the test patch creates are removed first (an agent's own version would make
    ``git apply`` refuse the whole patch) and a failed apply stops the script with the marker
    grading rejects. The test command is the line right before the end marker, where 5.x's
    ``make_test_spec`` records its exit code."""
    modified = modified_files(test_patch)
    created = new_files(test_patch)
    reset = f"git checkout {base} {' '.join(modified)}" if modified else ""
    delimiter = heredoc_delimiter(test_patch)
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        "cd /testbed",
        "git config --global --add safe.directory /testbed",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {base}",
    ]
    if reset:
        lines.append(reset)
    if created:
        lines.append(f"rm -f {' '.join(created)}")
    lines += [
        f"git apply -v - <<'{delimiter}' || {{ echo '{APPLY_PATCH_FAIL}'; exit 1; }}\n{test_patch}\n{delimiter}",
        f": '{START_TEST_OUTPUT}'",
        f"{TEST_CMD} {' '.join(patch_files(test_patch))}",
        f": '{END_TEST_OUTPUT}'",
    ]
    if reset:
        lines.append(reset)
    return "\n".join(lines) + "\n"


# -- generation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    """A built repository: its instance rows and, for the check, each instance's fix commit."""

    repo: Repo
    path: Path
    rows: list[dict[str, str]]
    fixes: dict[str, str]


def build(repo: Repo, workdir: Path) -> Built:
    tree = workdir / repo.name
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    tree.mkdir()
    _git(tree, "init", "--quiet", env=_git_env(home))
    first = ""
    rows: list[dict[str, str]] = []
    fixes: dict[str, str] = {}
    for step in repo.history:
        if isinstance(step, Commit):
            head = _commit(tree, home, step)
            first = first or head
            continue
        base = _git(tree, "rev-parse", "HEAD", env=_git_env(home)).strip()
        last_commit_date = _git(tree, "log", "-1", "--format=%cI", env=_git_env(home)).strip()
        if not (last_commit_date.replace("+00:00", "Z") < step.created_at < step.fix.when):
            raise ValueError(f"{repo.name}-{step.number}: base, created_at and fix are not in time order")
        fix = _commit(tree, home, step.fix)
        patch = _diff(tree, home, base, fix, ".", f":(exclude){TEST_DIR}")
        test_patch = _diff(tree, home, base, fix, TEST_DIR)
        if not patch or not test_patch:
            raise ValueError(f"{repo.name}-{step.number}: the fix needs both a code and a test change")
        instance_id = f"{OWNER}__{repo.name}-{step.number}"
        fixes[instance_id] = fix
        row: dict[str, str] = {
            "repo": f"{OWNER}/{repo.name}",
            "instance_id": instance_id,
            "base_commit": base,
            "patch": patch,
            "test_patch": test_patch,
            "problem_statement": step.problem_statement,
            "hints_text": step.hints_text,
            "created_at": step.created_at,
            "version": VERSION,
            "FAIL_TO_PASS": json.dumps(list(step.fail_to_pass)),
            "PASS_TO_PASS": json.dumps(list(step.pass_to_pass)),
            "environment_setup_commit": first,
            "difficulty": step.difficulty,
            "eval_script": eval_script(base, test_patch),
            "log_parser": "parse_log_pytest",
            "eval_type": "pass_and_fail",
            "image": f"sweb.eval.x86_64.{instance_id.lower()}:latest",
        }
        rows.append(row)
    return Built(repo, tree, rows, fixes)


def bundle_heads(bundle: Path) -> str:
    """The refs and commit ids a bundle holds, as ``git bundle list-heads`` prints them."""
    return _git(bundle.parent, "bundle", "list-heads", str(bundle), env=_git_env(bundle.parent))


def generate(out: Path, workdir: Path) -> list[Built]:
    """Build every repository under ``workdir`` and write the bundles and instances.jsonl to ``out``."""
    (out / "repos").mkdir(parents=True, exist_ok=True)
    built = [build(repo, workdir) for repo in REPOS]
    for b in built:
        fresh = workdir / f"{b.repo.name}.bundle"
        _git(b.path, "bundle", "create", "--quiet", str(fresh), "--all", env=_git_env(workdir / "home"))
        target = out / "repos" / f"{b.repo.name}.bundle"
        if not target.exists() or bundle_heads(target) != bundle_heads(fresh):
            shutil.copyfile(fresh, target)
    rows = sorted((row for b in built for row in b.rows), key=lambda r: (r["repo"], r["created_at"]))
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    (out / "instances.jsonl").write_bytes(text.encode())
    return built


# -- the check ---------------------------------------------------------------------------------


def _testbed(bundle: Path, base: str, where: Path, home: Path) -> Path:
    """What the image recipe does: a clone at ``base_commit`` with no remote and nothing of the
    later history left (no other branch, no tag, no reflog, unreachable objects pruned)."""
    env = _git_env(home)
    tree = where / "testbed"
    _git(where, "clone", "--quiet", str(bundle), str(tree), env=env)
    _git(tree, "reset", "--quiet", "--hard", base, env=env)
    _git(tree, "remote", "remove", "origin", env=env)
    for ref in _git(tree, "for-each-ref", "--format=%(refname)", env=env).split():
        if ref != "refs/heads/main":
            _git(tree, "update-ref", "-d", ref, env=env)
    _git(tree, "reflog", "expire", "--expire=now", "--all", env=env)
    _git(tree, "gc", "--quiet", "--prune=now", env=env)
    return tree


def _run_eval(script: str, tree: Path, home: Path, python: Path, log: Path) -> None:
    """Run the eval script with bash in ``tree`` instead of /testbed; stdout and stderr merged."""
    lines = script.split("\n")
    for i, line in enumerate(lines):
        if line == "cd /testbed":
            lines[i] = f"cd {tree}"
        elif line == "git config --global --add safe.directory /testbed":
            lines[i] = f"git config --global --add safe.directory {tree}"
    path = tree.parent / "eval.sh"
    path.write_text("\n".join(lines))
    env = _git_env(home) | {
        "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    with log.open("wb") as f:
        subprocess.run(["bash", str(path)], stdout=f, stderr=subprocess.STDOUT, env=env, check=False, timeout=600)


AGENT_TEST = "def test_written_by_the_agent():\n    assert True\n"
"""What --check's "agent" run puts in each file the test patch creates, before the eval script
runs: the script must remove it, apply the test patch and run the real tests."""

_SUMMARY = re.compile(r"^(?:PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", re.MULTILINE)


def _run(
    row: dict[str, str], spec: Any, label: str, bundle: Path, where: Path, python: Path
) -> tuple[dict[str, Any], str]:
    """One evaluation as the harness does it: testbed at base_commit, the prediction applied
    (gold: the gold patch; empty: nothing; agent: gold plus its own copies of the new test
    files), the eval script run, its log graded. Returns the report and the log."""
    from swebench.harness.grading import get_eval_report  # type: ignore[import-not-found]

    where.mkdir(parents=True)
    home = where / "home"
    home.mkdir()
    tree = _testbed(bundle, row["base_commit"], where, home)
    if _git(tree, "rev-list", "--all", "--not", row["base_commit"], env=_git_env(home)).strip():
        raise RuntimeError("the testbed holds commits after base_commit")
    prediction = "" if label == "empty" else row["patch"]
    if prediction:
        (where / "patch.diff").write_text(prediction)
        _git(tree, "apply", "-v", str(where / "patch.diff"), env=_git_env(home))
    if label == "agent":
        for name in new_files(row["test_patch"]):
            (tree / name).write_text(AGENT_TEST)
    log = where / "test_output.txt"
    _run_eval(spec.eval_script, tree, home, python, log)
    pred = {"instance_id": row["instance_id"], "model_name_or_path": label, "model_patch": prediction}
    return get_eval_report(spec, pred, str(log), include_tests_status=True)[row["instance_id"]], log.read_text()


def _red_commits(bundle: Path, python: Path, where: Path) -> tuple[int, list[str]]:
    """Runs a repository's whole test suite at every commit of its history (it should be green
    throughout: the tests that show a bug arrive with its fix). Returns the number of commits
    and the ones whose suite fails."""
    home = where / "home"
    home.mkdir(parents=True)
    env = _git_env(home)
    tree = where / "history"
    _git(where, "clone", "--quiet", str(bundle), str(tree), env=env)
    commits = _git(tree, "rev-list", "--reverse", "HEAD", env=env).split()
    red = []
    for commit in commits:
        _git(tree, "checkout", "--quiet", commit, env=env)
        tests = subprocess.run(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=tree,
            env=env | {"PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            check=False,
        )
        if tests.returncode != 0:
            red.append(commit)
    return len(commits), red


def check(out: Path, python: Path, keep: Path | None) -> int:
    from swebench.harness.utils import make_test_spec  # type: ignore[import-not-found]
    from swebench.utils import generate_heredoc_delimiter, get_modified_files  # type: ignore[import-not-found]

    version = subprocess.run(
        [str(python), "-m", "pytest", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(f"tests run by {python} ({version}); logs graded by swebench's make_test_spec + get_eval_report\n")
    rows = [json.loads(line) for line in (out / "instances.jsonl").read_text().splitlines()]
    problems: list[str] = []
    table: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory(prefix="swe-own-check-") as tmp:
        scratch = keep or Path(tmp)
        fresh = scratch / "generated"
        generate(fresh, Path(tmp) / "build")
        if (fresh / "instances.jsonl").read_bytes() != (out / "instances.jsonl").read_bytes():
            problems.append(f"{out / 'instances.jsonl'} is not what this script generates: regenerate it")
        for bundle in sorted((fresh / "repos").glob("*.bundle")):
            if bundle_heads(bundle) != bundle_heads(out / "repos" / bundle.name):
                problems.append(f"{out / 'repos' / bundle.name} is not what this script generates: regenerate it")
        greens = []
        for bundle in sorted((out / "repos").glob("*.bundle")):
            count, red = _red_commits(bundle.absolute(), python, scratch / "history" / bundle.stem)
            greens.append(f"{bundle.stem} {count - len(red)}/{count}")
            problems += [f"{bundle.stem}: the test suite fails at commit {commit}" for commit in red]
        print(f"whole test suite green at every commit: {', '.join(greens)}\n")
        for row in rows:
            iid = row["instance_id"]
            bad: list[str] = []
            if get_modified_files(row["test_patch"]) != modified_files(row["test_patch"]):
                bad.append("modified files differ from swebench's get_modified_files")
            if generate_heredoc_delimiter(row["test_patch"]) != heredoc_delimiter(row["test_patch"]):
                bad.append("heredoc delimiter differs from swebench's")
            spec = make_test_spec(row)
            f2p, p2p = set(json.loads(row["FAIL_TO_PASS"])), set(json.loads(row["PASS_TO_PASS"]))
            bundle = (out / "repos" / f"{row['repo'].split('/')[1]}.bundle").absolute()
            cols = [iid]
            labels = ["gold", "empty"] + (["agent"] if new_files(row["test_patch"]) else [])
            for label in ("gold", "empty", "agent"):
                if label not in labels:
                    cols.append("-")
                    continue
                try:
                    report, log = _run(row, spec, label, bundle, scratch / iid / label, python)
                except (RuntimeError, subprocess.SubprocessError) as err:
                    bad.append(f"{label}: {err}")
                    cols.append("error")
                    continue
                if "tests_status" not in report:
                    bad.append(f"{label}: the log could not be graded (test patch not applied or no test output)")
                    cols.append(f"resolved={report['resolved']}, log not graded")
                    continue
                status = report["tests_status"]
                f2p_ok, p2p_ok = status["FAIL_TO_PASS"]["success"], status["PASS_TO_PASS"]["success"]
                if label == "empty":
                    cols.append(
                        f"resolved={report['resolved']} F2P {len(f2p) - len(f2p_ok)}/{len(f2p)} fail, "
                        f"P2P {len(p2p_ok)}/{len(p2p)} pass"
                    )
                    if report["resolved"] or f2p_ok or status["PASS_TO_PASS"]["failure"]:
                        bad.append(f"empty: every F2P test must fail, every P2P test pass: {json.dumps(status)}")
                    continue
                cols.append(f"resolved={report['resolved']} F2P {len(f2p_ok)}/{len(f2p)}, P2P {len(p2p_ok)}/{len(p2p)}")
                if not report["resolved"]:
                    bad.append(f"{label}: not resolved: {json.dumps(status)}")
                ran = set(_SUMMARY.findall(log))
                if label == "gold" and ran != f2p | p2p:
                    bad.append(
                        f"gold: the tests run are not exactly F2P + P2P: unlisted {sorted(ran - f2p - p2p)}, "
                        f"not run {sorted((f2p | p2p) - ran)}"
                    )
                if label == "agent" and "test_written_by_the_agent" in log:
                    bad.append("agent: the agent's own copy of a new test file was run")
            cols.append("ok" if not bad else "FAIL")
            table.append(tuple(cols))
            problems += [f"{iid}: {b}" for b in bad]
    header = ("instance", "gold patch", "no patch", "gold + agent's own new test files", "")
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    for r in [header, *table]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for p in problems:
        print(f"\n{p}", file=sys.stderr)
    print(f"\n{len(rows)} instances, {len(problems)} problems")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="validate the instances in --out (gold and no patch)")
    parser.add_argument(
        "--python",
        type=Path,
        default=ROOT / ".venv" / "bin" / "python",
        help="--check: the Python (with pytest) the eval scripts run as `python` (default: %(default)s)",
    )
    parser.add_argument("--keep", type=Path, help="--check: keep testbeds and logs in this (new) directory")
    args = parser.parse_args(argv)
    if not args.check:
        with tempfile.TemporaryDirectory(prefix="swe-own-") as tmp:
            generate(args.out, Path(tmp))
        print(f"wrote {args.out / 'instances.jsonl'} and {args.out / 'repos'}")
        return 0
    try:
        import swebench  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        other = ROOT / ".venv-swebench" / "bin" / "python"
        if not other.exists() or Path(sys.executable) == other:
            print("--check needs swebench 5.0.2: run it with a Python that has it", file=sys.stderr)
            return 2
        os.execv(other, [str(other), __file__, *(argv if argv is not None else sys.argv[1:])])
    return check(args.out, args.python.absolute(), args.keep)


if __name__ == "__main__":
    raise SystemExit(main())
