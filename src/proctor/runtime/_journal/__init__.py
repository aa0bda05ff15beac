"""
The journal: the durable record of tasks, runs, steps, effects, evidence, spend and children.

Two backends implement one interface (:class:`JournalLike`, in ``base``): the
embedded default, one SQLite file (``sqlite``), and PostgreSQL for many hosts
(``postgres``). They never import each other; what they share lives once:
records and the interface (``base``), row codecs and argument checks
(``rows``), both dialects' schemas side by side (``schema``) and the crash hook
(``crash``). Each backend's SQL is a module of its own (``sqlite_sql``,
``postgres_sql``), and the SQLite backend's plumbing below aiosqlite is
``sqlite_io``. Only ``open`` knows both backends.
"""

from proctor.runtime._journal.base import EFFECT_STATES as EFFECT_STATES
from proctor.runtime._journal.base import SPEND_KINDS as SPEND_KINDS
from proctor.runtime._journal.base import Claimed as Claimed
from proctor.runtime._journal.base import EffectRow as EffectRow
from proctor.runtime._journal.base import JournalLike as JournalLike
from proctor.runtime._journal.base import ProcessRow as ProcessRow
from proctor.runtime._journal.base import RunRow as RunRow
from proctor.runtime._journal.base import SpendRow as SpendRow
from proctor.runtime._journal.base import Synchronous as Synchronous
from proctor.runtime._journal.open import is_postgres_url as is_postgres_url
from proctor.runtime._journal.open import open_journal as open_journal
from proctor.runtime._journal.schema import SCHEMA_VERSION as SCHEMA_VERSION
from proctor.runtime._journal.sqlite import Journal as Journal

__all__ = (
    "EFFECT_STATES",
    "SCHEMA_VERSION",
    "SPEND_KINDS",
    "Claimed",
    "EffectRow",
    "Journal",
    "JournalLike",
    "ProcessRow",
    "SpendRow",
    "RunRow",
    "Synchronous",
    "is_postgres_url",
    "open_journal",
)
