"""The PS's announcement of a broadcast (controller/client/phases.py), with a stand-in controller."""

from __future__ import annotations

import threading
import time

import pytest

from controller.client.phases import Announcement


class Controller:
    """Answers announcements with the rates in `answers` (one per call, the last repeated);
    an Exception instance is raised instead."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[bool] = []
        self.lock = threading.Lock()

    def __call__(self, active: bool):
        with self.lock:
            self.calls.append(active)
            answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_rate_is_set_before_the_broadcast_renewed_and_followed_and_the_end_announced():
    ctl = Controller(9e6, 9e6, 4e6, 4e6)
    applied = []
    with Announcement(ctl, applied.append, renew_s=0.02) as a:
        assert applied == [9e6]  # before the first byte
        time.sleep(0.2)
    assert ctl.calls[0] is True and ctl.calls[-1] is False
    assert ctl.calls.count(True) >= 4  # renewed while it lasted
    assert applied == [9e6, 4e6]  # each change applied once
    assert [r for _, r in a.rates] == [9e6, 4e6] and a.failures == 0


def test_a_failed_announcement_keeps_the_last_rate_and_is_counted():
    ctl = Controller(5e6, ConnectionResetError("gone"), None, float("nan"), True, "9e6", 5e6)
    applied = []
    with Announcement(ctl, applied.append, renew_s=0.01) as a:
        time.sleep(0.1)
    assert applied == [5e6]
    assert a.failures == 5 and a.error


def test_a_bad_renewal_period_is_refused():
    for bad in (0, -1, 61):
        with pytest.raises(ValueError, match="renew_s"):
            Announcement(lambda active: 1.0, lambda r: None, renew_s=bad)
