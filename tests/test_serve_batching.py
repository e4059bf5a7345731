"""Batch shaping: a model's ``max_queue_delay_ms`` holds a request back for a
fuller batch, ``preferred_batch_sizes`` cuts batches at the sizes asked for, as in Triton's
dynamic batcher; an SLO caps the hold."""

import asyncio

import httpx2
import pytest

from sw_driver import InferenceSession
from tessera.serve import load_config
from tessera.serve.admission import SLO_MARGIN, Admission
from tessera.serve.app import create_app
from tessera.serve.queueing import DeviceQueue
from tests.serve_helpers import (
    AUTH_A,
    DIGITS,
    FakeClock,
    digits_input,
    hold_runs,
    json_request,
    output_array,
    write_config,
)


def _queue(clock):
    return DeviceQueue(workers=1, ranks=3, max_queue=16, clock=clock)


def test_a_held_request_waits_for_its_batch_to_fill():
    clock = FakeClock()

    async def scenario():
        queue = _queue(clock)
        first = queue.enqueue(1, 1.0, key="k", hold=0.5, fill=4)
        others = [queue.enqueue(1, 1.0, key="k", hold=0.5, fill=4) for _ in range(2)]
        assert not first.started and queue.running == 0  # 3 of 4 images: held
        last = queue.enqueue(1, 1.0, key="k", hold=0.5, fill=4)
        assert first.started and queue.running == 1  # the fourth ends the hold
        assert queue.gather(first, max_images=8) == [*others, last]
        return queue

    queue = asyncio.run(scenario())
    assert queue.waiting == 0


def test_a_hold_ends_at_its_time_with_what_has_come():
    clock = FakeClock()

    async def scenario():
        queue = _queue(clock)
        first = queue.enqueue(1, 1.0, key="k", hold=0.5, fill=4)
        second = queue.enqueue(1, 1.0, key="k", hold=0.5, fill=4)
        clock.now += 0.49
        queue.poke()
        assert not first.started
        clock.now += 0.02
        queue.poke()
        assert first.started
        assert queue.gather(first, max_images=8) == [second]

    asyncio.run(scenario())


def test_a_hold_wakes_the_queue_by_itself():
    """No later arrival: the event loop's timer ends the hold (real clock)."""
    async def scenario():
        queue = DeviceQueue(workers=1, ranks=3, max_queue=4)
        ticket = queue.enqueue(1, 1.0, key="k", hold=0.02, fill=4)
        assert not ticket.started
        await asyncio.wait_for(queue.acquire(ticket), 5)
        assert ticket.started

    asyncio.run(scenario())


def test_other_requests_are_not_held():
    """A request of another key without a hold (here higher priority) starts at once
    during a hold; one with no key never holds."""
    clock = FakeClock()

    async def scenario():
        queue = DeviceQueue(workers=2, ranks=3, max_queue=16, clock=clock)
        held = queue.enqueue(2, 1.0, key="k", hold=0.5, fill=4)
        urgent = queue.enqueue(0, 1.0, key="j")
        unkeyed = queue.enqueue(1, 1.0, hold=0.5, fill=4)
        assert urgent.started and unkeyed.started and not held.started

    asyncio.run(scenario())


@pytest.mark.parametrize("images, preferred, expected", [
    ((1, 1, 1, 2), (2, 4), 3),  # with the leader's 1 image: 2, 3, 4, 6; cut at 4
    ((1, 1, 1, 2), (2, 6), 4),  # 6 reached: all four
    ((2, 2, 2), (2, 4), 3),  # 3, 5, 7: no preferred size, so all that fit
    ((1, 1, 2), (), 3),  # no preferred sizes: all that fit
])
def test_gather_cuts_at_the_largest_preferred_size(images, preferred, expected):
    async def scenario():
        queue = _queue(FakeClock())
        leader = queue.enqueue(1, 1.0, key="k", preferred=preferred)
        waiting = [queue.enqueue(1, 1.0, images=n, key="k", preferred=preferred)
                   for n in images]
        assert queue.gather(leader, max_images=8) == waiting[:expected]

    asyncio.run(scenario())


def test_admission_holds_within_the_slo(tmp_path):
    clock = FakeClock()
    config = load_config(write_config(tmp_path))
    admission = Admission(config.devices, config.tenants, clock=clock)
    admission.add_model("digits", 0.010, max_batch=8, max_queue_delay=0.5, preferred=(4, 8))
    admission.add_model("digits_b", 0.010, max_batch=8, max_queue_delay=0.5)
    best_effort, _ = admission.admit("digits_b", None, 1, None, "low", key="b", tenant="b")
    # No SLO: the whole delay, until max_batch (8) images wait.
    assert (best_effort.hold_until - clock.now, best_effort.fill) == (pytest.approx(0.5), 8)
    assert not best_effort.started
    slo = 0.2
    bound, _ = admission.admit("digits", None, 1, slo, "high", key="a", tenant="a")
    # An SLO of 200 ms: held at most 0.2 x (1 - margin) - its 10 ms run, until the smallest
    # preferred size (4) waits.
    assert bound.hold_until - clock.now == pytest.approx(slo * (1 - SLO_MARGIN) - 0.010)
    assert bound.fill == 4
    # 18 ms: admitted (5 ms of the held request's share ahead over 2 workers, 10 ms its
    # own), but 18 x 0.75 leaves no slack for a hold.
    tight, _ = admission.admit("digits", None, 1, 0.018, "high", key="a", tenant="a")
    assert tight is not None and tight.hold_until == 0.0


def test_held_requests_run_as_one_batch_bit_identical(tmp_path, rng):
    """Four requests sent to an idle server with a long max queue delay run as one batch
    of four (the fourth ends the hold), each answer identical to a direct session run."""
    text = write_config(tmp_path).read_text().replace(
        "workers = 2", "workers = 1").replace(
        'providers = ["cpu"]', 'providers = ["cpu"]\nmax_batch = 4\nmax_queue_delay_ms = 1000')
    app = create_app(load_config(write_config(tmp_path, text=text)))
    model, calls = app.state.models["digits"], []
    session = model.session

    class Counted:
        def __getattr__(self, name):
            return getattr(session, name)

        def run(self, names, feeds):
            calls.append(feeds["input"].shape[0])
            return session.run(names, feeds)

    model.session = Counted()
    inputs = [digits_input(rng, 1) for _ in range(4)]

    async def scenario():
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
            posts = [client.post("/v2/models/digits/infer", headers=AUTH_A,
                                 json=json_request(x)) for x in inputs]
            answers = await asyncio.wait_for(asyncio.gather(*posts), 30)
            stats = await client.get("/v2/models/digits/stats", headers=AUTH_A)
            return answers, stats.json()

    answers, stats = asyncio.run(scenario())
    assert calls == [4]
    assert (stats["max_queue_delay_ms"], stats["preferred_batch_sizes"]) == (1000.0, [])
    reference = InferenceSession(str(DIGITS))
    for x, answer in zip(inputs, answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert output_array(answer.json()).tobytes() == \
            reference.run(None, {"input": x})[0].tobytes()


def test_queue_gauges(tmp_path, rng):
    """``/metrics`` shows the runs in progress and the requests waiting per class."""
    text = write_config(tmp_path).read_text().replace("workers = 2", "workers = 1")
    app = create_app(load_config(write_config(tmp_path, text=text)))
    release = hold_runs(app.state.models["digits"])
    queue = app.state.admission.queues["cpu"]

    async def scenario():
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
            posts = [asyncio.create_task(client.post(
                "/v2/models/digits/infer", headers=AUTH_A,
                json=json_request(digits_input(rng, 1)))) for _ in range(3)]
            while queue.waiting < 2:
                await asyncio.sleep(0.001)
            during = (await client.get("/metrics")).text
            release.set()
            answers = await asyncio.wait_for(asyncio.gather(*posts), 30)
            return during, (await client.get("/metrics")).text, answers

    during, after, answers = asyncio.run(scenario())
    assert all(a.status_code == 200 for a in answers)
    for line in ('tessera_queue_running{device="cpu"} 1.0',
                 'tessera_queue_waiting{device="cpu",priority="high"} 2.0',
                 'tessera_queue_waiting{device="cpu",priority="low"} 0.0'):
        assert line in during, line
    assert 'tessera_queue_running{device="cpu"} 0.0' in after
    assert 'tessera_queue_waiting{device="cpu",priority="high"} 0.0' in after
