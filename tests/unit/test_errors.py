"""eobatch.errors: the one error taxonomy (wait, retry, terminal), and the CLI's exit status of each
kind (``errors.exit_code``)."""

from __future__ import annotations

import pytest

from eobatch import errors


@pytest.mark.parametrize("kind,code", [("wait", 3), ("terminal", 5), ("retry", 7)])
def test_every_kind_has_one_exit_status(kind, code):
    cls = {"wait": errors.WaitError, "terminal": errors.TerminalError, "retry": errors.RetryableError}[kind]
    assert errors.exit_code(cls("x")) == code
    assert errors.exit_code(errors.UsageError("x")) == 2
    assert errors.exit_code(RuntimeError("a bug")) == 1
