"""tests/gpu_share.py, the lock GPU tests take under pytest-xdist: shared tests run together, a `gpu_alone` test runs
with no other, and one waiting to run alone is not overtaken by shared tests that arrive after it."""

import threading
import time

from gpu_share import gpu_share


def _hold(folder, alone, log, name, entered, release):
    with gpu_share(folder, alone):
        log.append(f"+{name}")
        entered.set()
        release.wait(30)
        log.append(f"-{name}")


def _start(folder, alone, log, name):
    entered, release = threading.Event(), threading.Event()
    t = threading.Thread(target=_hold, args=(folder, alone, log, name, entered, release), daemon=True)
    t.start()
    return t, entered, release


def test_shared_tests_overlap(tmp_path):
    log = []
    a = _start(tmp_path, False, log, "a")
    b = _start(tmp_path, False, log, "b")
    assert a[1].wait(10) and b[1].wait(10)  # both inside at once
    for t, _, release in (a, b):
        release.set()
        t.join(10)
    assert sorted(log[:2]) == ["+a", "+b"]


def test_an_alone_test_waits_for_the_running_ones_and_goes_before_later_ones(tmp_path):
    log = []
    s1 = _start(tmp_path, False, log, "s1")
    assert s1[1].wait(10)
    alone = _start(tmp_path, True, log, "alone")
    time.sleep(0.3)
    assert not alone[1].is_set()  # s1 still holds the card
    s2 = _start(tmp_path, False, log, "s2")  # arrives while the alone test waits
    time.sleep(0.3)
    assert not s2[1].is_set()  # not let in ahead of it
    s1[2].set()
    assert alone[1].wait(10)
    time.sleep(0.3)
    assert not s2[1].is_set()  # nor beside it
    alone[2].set()
    assert s2[1].wait(10)
    s2[2].set()
    for t, _, _ in (s1, alone, s2):
        t.join(10)
    assert log == ["+s1", "-s1", "+alone", "-alone", "+s2", "-s2"]
