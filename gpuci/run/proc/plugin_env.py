"""gpuci's plugin in an interpreter through its environment, never its command line.

The suite interpreter is the user's plain pytest run, byte for byte: `python -m pytest
PATHS ARGS`, nothing added. So gpuci's plugin comes in through `PYTEST_PLUGINS` (pytest
reads it beside `-p`, even under `PYTEST_DISABLE_PLUGIN_AUTOLOAD`), after the user's own
plugins there, and it learns where to write through `GPUCI_*` variables: its journal, and
for the suite interpreter the JUnit file gpuci keeps of it (`GPUCI_JUNIT`), written beside
the user's own `--junitxml`, which stays what plain pytest writes.

Once loaded (`pytest_configure`), the plugin puts `PYTEST_PLUGINS` back as the user had
it: a test that starts pytest itself (in process, as pytester does, or in a subprocess)
sees the user's environment, and its pytest neither loads gpuci's plugin nor writes into
gpuci's journal.

Both sides live here: the parent's (`with_plugin`) and the child's (`restore_user_plugins`,
`write_junit`), which must stay cheap: `_pytest.junitxml` is imported only where asked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

PLUGIN = "gpuci.pytest_plugin"
PLUGINS_ENV = "PYTEST_PLUGINS"  # pytest's own: comma-separated modules it imports as plugins
RANDOMLY = "randomly"  # pytest-randomly's plugin name
JUNIT_ENV = "GPUCI_JUNIT"  # where the suite interpreter's plugin writes gpuci's JUnit file
PLAIN_ENV = "GPUCI_PLAIN_RUN"  # set in the suite interpreter: the plugin changes nothing there


def with_plugin(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with gpuci's plugin last in PYTEST_PLUGINS (the user's kept, before it)."""
    env = {k: v for k, v in environ.items() if k not in (JUNIT_ENV, PLAIN_ENV)}
    env[PLUGINS_ENV] = ",".join([*_user_plugins(env.get(PLUGINS_ENV, "")), PLUGIN])
    return env


def plain_run() -> bool:
    """Whether this interpreter is the plain pytest run, where the plugin only watches."""
    return os.environ.get(PLAIN_ENV) == "1"


def restore_user_plugins() -> None:
    """PYTEST_PLUGINS as the user set it (unset where gpuci's plugin was all it held)."""
    value = os.environ.get(PLUGINS_ENV)
    if value is None:
        return
    user = _user_plugins(value)
    if user:
        os.environ[PLUGINS_ENV] = ",".join(user)
    else:
        del os.environ[PLUGINS_ENV]


def write_junit(config: Any) -> None:
    """Where GPUCI_JUNIT names a file, write this interpreter's JUnit there as pytest's
    `--junitxml` would (the suite's ini settings: name, family, logging), silently: the
    terminal output stays plain pytest's."""
    path = os.environ.get(JUNIT_ENV)
    if not path or hasattr(config, "workerinput"):  # an xdist worker: its controller writes
        return
    from _pytest.junitxml import LogXML

    class QuietLogXML(LogXML):
        def pytest_terminal_summary(self, terminalreporter: Any) -> None:  # type: ignore[override]
            """No `generated xml file` line: the plain run's output is pytest's own."""

    config.pluginmanager.register(
        QuietLogXML(
            path,
            config.option.junitprefix,
            config.getini("junit_suite_name"),
            config.getini("junit_logging"),
            config.getini("junit_duration_report"),
            config.getini("junit_family"),
            config.getini("junit_log_passing_tests"),
        ),
        "gpuci-junit",
    )


def randomly_seed(config: Any) -> dict[str, int]:
    """`{"randomly_seed": N}`: the seed pytest-randomly drew in this interpreter (or was
    given), where it is loaded; else {}."""
    seed = getattr(config.option, "randomly_seed", None)
    if not config.pluginmanager.has_plugin(RANDOMLY) or not isinstance(seed, int):
        return {}
    return {"randomly_seed": seed}


def _user_plugins(value: str) -> list[str]:
    return [p for p in (part.strip() for part in value.split(",")) if p and p != PLUGIN]
