"""Verifiers: candidate freezing, checks and evidence."""

from proctor.verifiers._candidate import DEFAULT_IGNORE as DEFAULT_IGNORE
from proctor.verifiers._candidate import TreeHasher as TreeHasher
from proctor.verifiers._candidate import freeze as freeze
from proctor.verifiers._candidate import matches as matches
from proctor.verifiers._candidate import tree_digest as tree_digest
from proctor.verifiers._checks import CommandCheck as CommandCheck
from proctor.verifiers._checks import contract_version as contract_version
from proctor.verifiers._evidence import Evidence as Evidence
from proctor.verifiers._more_checks import Check as Check
from proctor.verifiers._more_checks import CheckContext as CheckContext
from proctor.verifiers._more_checks import FileCheck as FileCheck
from proctor.verifiers._more_checks import JudgeCheck as JudgeCheck
from proctor.verifiers._more_checks import JudgeFindings as JudgeFindings
from proctor.verifiers._more_checks import PythonCheck as PythonCheck
from proctor.verifiers._more_checks import ScopeCheck as ScopeCheck

__all__ = (
    "DEFAULT_IGNORE",
    "Check",
    "CheckContext",
    "CommandCheck",
    "Evidence",
    "FileCheck",
    "JudgeCheck",
    "JudgeFindings",
    "PythonCheck",
    "ScopeCheck",
    "TreeHasher",
    "contract_version",
    "freeze",
    "matches",
    "tree_digest",
)
