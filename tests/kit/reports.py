"""A tier's logs in the report of a failing test that used it.

tests/controlplane and tests/node each run long-lived processes whose log tails are what a
failure needs; the pytest hook that attaches them is the same for both, only which tests and
which logs differ.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest

# the hook's own signature, as pytest calls it: (item, call) -> a wrapped generator
MakeReport = Callable[[pytest.Item, pytest.CallInfo[None]], Generator[None, object, object]]


def log_tails_on_failure(section: str, logs_for: Callable[[pytest.Item], str | None]) -> MakeReport:
    """A `pytest_runtest_makereport` wrapper: a failed test's report gets a `section` with
    `logs_for(item)` where that gives logs (None: the test did not use the tier, or it is down).
    Assign it to the plugin module's `pytest_runtest_makereport`."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, object, object]:
        report = yield
        if isinstance(report, pytest.TestReport) and report.failed:
            logs = logs_for(item)
            if logs is not None:
                report.sections.append((section, logs))
        return report

    return pytest_runtest_makereport
