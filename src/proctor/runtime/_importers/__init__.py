"""
Importers: other agents' recorded runs as proctor trajectories (format v1).

One module per family of formats: ``swe`` (SWE-agent, mini-swe-agent),
``openhands``, ``sessions`` (Claude Code, Codex CLI, gemini-cli), ``evallog``
(Inspect AI), what they share in ``base``, and ``detect`` (telling a file's
format, dispatching). Pure and synchronous: each importer reads one file (or
an OpenHands conversation directory) and returns the header and events; it
writes nothing. Malformed input raises
:class:`~proctor._errors.TranscriptError`, naming the file, the line or event,
and what was expected.
"""

from proctor.runtime._importers.base import FORMATS as FORMATS
from proctor.runtime._importers.base import Converted as Converted
from proctor.runtime._importers.base import dump_jsonl as dump_jsonl
from proctor.runtime._importers.base import shell_may_change as shell_may_change
from proctor.runtime._importers.detect import IMPORTERS as IMPORTERS
from proctor.runtime._importers.detect import detect_format as detect_format
from proctor.runtime._importers.detect import import_file as import_file

__all__ = (
    "FORMATS",
    "IMPORTERS",
    "Converted",
    "detect_format",
    "dump_jsonl",
    "import_file",
    "shell_may_change",
)
