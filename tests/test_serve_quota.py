"""Device quotas per tenant (tessera/serve/queueing.py): hard shares never exceeded, soft
ones borrowing idle time and giving it back; on a fake clock, so exact."""

import asyncio

import pytest

from tessera.serve import ServeConfigError, load_config
from tessera.serve.queueing import DeviceQueue
from tests.serve_helpers import FakeClock, write_config


def running_tenants(queue, tickets):
    return [t.tenant for t in tickets if t.started and not t.finished]


def test_hard_quota_waits_even_on_an_idle_device():
    clock = FakeClock()
    queue = DeviceQueue(1, 3, 10, quotas={"a": (0.5, True)}, clock=clock)
    first = queue.enqueue(0, 0.3, tenant="a")
    second = queue.enqueue(0, 0.3, tenant="a")
    assert first.started and not second.started
    queue.finish(first)  # 0.3 s of 1 s used < 0.5: the second may start
    assert second.started and queue.used_share("a") == pytest.approx(0.6)
    third = queue.enqueue(0, 0.3, tenant="a")
    queue.finish(second)
    assert not third.started and queue.running == 0  # idle, yet a is over its hard share
    clock.now += 0.5
    queue.poke()
    assert not third.started  # both charges are still inside the 1 s window
    clock.now += 0.51  # both charges (made at t=0) leave the window
    queue.poke()
    assert third.started and queue.used_share("a") == pytest.approx(0.3)  # its own


def test_hard_quota_wakes_itself_in_the_event_loop():
    async def scenario():
        queue = DeviceQueue(1, 3, 10, quotas={"a": (0.1, True)}, window=0.05)
        first = queue.enqueue(0, 0.05, tenant="a")
        second = queue.enqueue(0, 0.05, tenant="a")
        queue.finish(first)
        assert not second.started
        await asyncio.wait_for(queue.acquire(second), 5)  # started by the timer
        return second

    assert asyncio.run(scenario()).started


def test_soft_quota_borrows_idle_time_and_gives_it_back():
    clock = FakeClock()
    quotas = {"a": (0.5, False), "b": (0.5, False)}
    queue = DeviceQueue(1, 3, 10, quotas=quotas, clock=clock)
    # b alone: it runs past its share on the idle device (borrowing a's half).
    tickets = [queue.enqueue(2, 0.3, tenant="b")]
    for _ in range(3):
        tickets.append(queue.enqueue(2, 0.3, tenant="b"))
        queue.finish(tickets[-2])
    assert tickets[-1].started and queue.used_share("b") == pytest.approx(1.2)
    # a comes back, at a lower priority than b's waiting request: a goes first (within its
    # share), b waits although it is high priority; the borrowed time is returned.
    waiting_b = queue.enqueue(0, 0.3, tenant="b")
    a = queue.enqueue(2, 0.3, tenant="a")
    queue.finish(tickets[-1])
    assert a.started and not waiting_b.started
    queue.finish(a)
    assert waiting_b.started  # nobody within a share waits: b borrows again


def test_tenants_without_quota_and_classes_within_quota():
    clock = FakeClock()
    queue = DeviceQueue(1, 3, 10, quotas={"a": (0.2, False)}, clock=clock)
    busy = queue.enqueue(1, 0.5, tenant="a")  # a at 0.5 > 0.2: borrowing from now on
    over = queue.enqueue(0, 0.1, tenant="a")
    free_low, free_high = (queue.enqueue(2, 0.1, tenant="x"),
                           queue.enqueue(1, 0.1, tenant="y"))
    queue.finish(busy)
    assert free_high.started  # within (no quota) before borrowing; then by class
    queue.finish(free_high)
    assert free_low.started
    queue.finish(free_low)
    assert over.started


def test_quota_config(tmp_path):
    base = write_config(tmp_path).read_text()
    text = base.replace('priority = "high"',
                        'priority = "high"\nquota = {cpu = 0.25}\nisolation = "hard"')
    config = load_config(write_config(tmp_path, text=text))
    assert config.tenants["a"].quota == (("cpu", 0.25),)
    assert config.tenants["a"].isolation == "hard" and config.tenants["b"].isolation == "soft"
    for bad, message in (("quota = {gpu = 0.5}", "quota names device 'gpu', which is not "
                                                 "declared; devices: ['cpu']"),
                         ("quota = {cpu = 1.5}", "quota.cpu must be a share of the device's "
                                                 "time in (0, 1], not 1.5"),
                         ("quota = {cpu = 0}", "in (0, 1], not 0"),
                         ('isolation = "firm"', "isolation must be one of ['soft', 'hard'], "
                                                "not 'firm'")):
        text = base.replace('priority = "high"', f'priority = "high"\n{bad}')
        with pytest.raises(ServeConfigError, match=r"\[tenants\.a\]") as info:
            load_config(write_config(tmp_path, text=text))
        assert message in str(info.value)
