"""Verifiers: candidate freezing, checks and evidence."""

from proctor.verifiers._candidate import DEFAULT_IGNORE as DEFAULT_IGNORE
from proctor.verifiers._candidate import TreeHasher as TreeHasher
from proctor.verifiers._candidate import freeze as freeze
from proctor.verifiers._candidate import matches as matches
from proctor.verifiers._candidate import tree_digest as tree_digest
from proctor.verifiers._checks import CommandCheck as CommandCheck
from proctor.verifiers._checks import contract_version as contract_version
from proctor.verifiers._evidence import Evidence as Evidence

__all__ = (
    "DEFAULT_IGNORE",
    "CommandCheck",
    "Evidence",
    "TreeHasher",
    "contract_version",
    "freeze",
    "matches",
    "tree_digest",
)
