"""A device's run queue: ``workers`` runs at once, the waiting ones started by priority
class, then by deadline (earliest first: the request with the least SLO slack), then arrival.

Lives in the server's event loop (no locks): requests wait as asyncio futures, not as
threads, so a flood of low-priority requests cannot hold threads a high-priority one needs.
Each ticket carries its predicted seconds, so the queue also says how much predicted work
a new request of a given priority would wait behind: what is left of everything running
(a run is never preempted; its prediction less the time it has run, see ``OVERDUE_LEFT``)
plus what waits at its priority or a higher one (lower ones wait behind it).

Quotas: a tenant may hold a share of the device's time, measured over the last
``QUOTA_WINDOW`` seconds (each run charged at its start with its predicted seconds, split
over its requests). A tenant at or over a *hard* share starts nothing until its use decays,
even on an idle device; one over a *soft* share may borrow: its requests start only when
no request of a tenant within its share (or without a quota) is waiting, whatever their
priorities, so the capacity it borrowed comes back at the next run that starts (runs are
not preempted).

Batch shaping (a model's ``max_queue_delay_ms`` and ``preferred_batch_sizes``, as Triton's
dynamic batcher): a ticket may carry ``hold_until`` (this queue's clock) and ``fill``. When
it is first in line for a free slot and fewer than ``fill`` images of its key wait, it is
held, and the device with it, until more arrive or ``hold_until`` passes; then it starts
with what has come. :meth:`DeviceQueue.gather` cuts a batch at the largest preferred size
its requests add up to, else takes all that fit.
"""

import asyncio
import collections
import heapq
import itertools
import time
from dataclasses import dataclass, field

__all__ = ["OVERDUE_LEFT", "QUOTA_WINDOW", "DeviceQueue", "QueueFull", "Shed", "Ticket",
           "batch_key"]

#: Part of its prediction a run past it still counts as left: it is running, so its device
#: must not look idle. A quarter is a guess (runs here spread 40-70 % around their median),
#: not a measured figure.
OVERDUE_LEFT = 0.25
#: Seconds over which a tenant's share of a device's time is measured.
QUOTA_WINDOW = 1.0
#: A tenant's standing against its quota: within it, over a soft one (may borrow), over a
#: hard one (waits).
_WITHIN, _BORROWING, _BLOCKED = 0, 1, None


def batch_key(model, names, feeds):
    """Requests with equal keys can be concatenated along the batch: same model, outputs,
    and per-input shape beyond the batch and dtype."""
    return (model, tuple(names),
            tuple((k, v.shape[1:], v.dtype.str) for k, v in sorted(feeds.items())))


class QueueFull(Exception):
    """The device's queue is full of requests of this priority or a higher one."""


class Shed(Exception):
    """A waiting request gave its place to a higher-priority one (it never started)."""


@dataclass(eq=False)
class Ticket:
    """One admitted request: its priority rank (0 first), arrival order and predicted work.

    ``deadline`` is the latest time (the server's clock) its run may start and still meet
    its SLO, infinite without one; within a class the earliest deadline starts first.
    """

    rank: int
    seq: int
    work: float
    images: int = 1
    deadline: float = float("inf")
    tenant: str | None = None
    key: object = None  # requests with equal keys may run as one batch (None: never)
    device: str | None = None  # set by the admission: the device whose queue holds it
    started: bool = False
    started_at: float = 0.0  # when it started (the queue's clock)
    finished: bool = False
    shed: bool = False
    rider: bool = False  # runs inside another ticket's batch, on that ticket's slot
    hold_until: float = 0.0  # may wait for a fuller batch until then (the queue's clock)
    fill: int = 1  # images of its key waiting that end the hold at once
    preferred: tuple = ()  # batch sizes gather() cuts at (the model's preferred sizes)
    payload: object = field(default=None, repr=False)  # the caller's (the request's feeds)
    future: asyncio.Future | None = field(default=None, repr=False)
    outcome: asyncio.Future | None = field(default=None, repr=False)  # a rider's result


class DeviceQueue:
    """Run slots of one device, handed out by priority rank, then arrival.

    Parameters
    ----------
    workers : int
        Runs allowed at once.
    ranks : int
        Number of priority classes (rank 0 is served first).
    max_queue : int
        Requests that may wait (not counting the running ones). When it is full, a new
        request takes the place of the newest waiting one of a lower priority, which is
        shed; with none, the new one is refused (:class:`QueueFull`).
    quotas : dict, optional
        ``{tenant: (share, hard)}``: the tenant's share of this device's time (0 to 1) and
        whether it is hard; tenants not named have no limit.
    clock : callable
        Monotonic seconds, for the quotas (tests pass a fake one).
    """

    def __init__(self, workers, ranks, max_queue, *, quotas=None, clock=time.monotonic,
                 window=QUOTA_WINDOW):
        self.quotas, self._clock, self.window = dict(quotas or {}), clock, window
        self._charges = collections.deque()  # (time, tenant, seconds) of started runs
        self._used = collections.defaultdict(float)  # tenant -> seconds in the window
        self._wakeup, self._wakeup_at = None, 0.0
        #: Called with each ticket given a slot (not the riders), in the event loop: the
        #: server starts its run there (None: the ticket's owner does, after acquire).
        self.launch = None
        self.workers = workers
        self.max_queue = max_queue
        self.waiting = 0
        self.running = 0
        self.running_work = 0.0
        self._running = set()  # started tickets not finished (riders included)
        self.waiting_work = [0.0] * ranks
        self.waiting_by_rank = [0] * ranks
        self._heap = []
        self._seq = itertools.count()

    def predicted_wait(self, rank):
        """Predicted seconds before a new request of ``rank`` starts: what is left of the
        running work (each run's prediction less the time it has run, at least
        ``OVERDUE_LEFT`` of it) and the waiting work at ``rank`` or a higher class, over the
        workers."""
        now = self._clock()
        left = sum(max(t.work - (now - t.started_at), OVERDUE_LEFT * t.work)
                   for t in self._running)
        return (left + sum(self.waiting_work[:rank + 1])) / self.workers

    def used_share(self, tenant):
        """``tenant``'s share of this device's time over the last ``window`` seconds."""
        self._expire()
        return self._used[tenant] / (self.window * self.workers)

    def _expire(self):
        horizon = self._clock() - self.window
        while self._charges and self._charges[0][0] <= horizon:
            _, tenant, seconds = self._charges.popleft()
            self._used[tenant] -= seconds

    def _standing(self, ticket):
        quota = self.quotas.get(ticket.tenant)
        if quota is None or self.used_share(ticket.tenant) < quota[0]:
            return _WITHIN
        return _BLOCKED if quota[1] else _BORROWING

    def full_for(self, rank):
        """True when a request of ``rank`` would be refused now (:class:`QueueFull`): the
        queue is full and nothing of a lower priority waits to be shed for it."""
        return self.waiting >= self.max_queue and not any(self.waiting_by_rank[rank + 1:])

    def enqueue(self, rank, work, *, images=1, key=None, payload=None,
                deadline=float("inf"), tenant=None, device=None, hold=0.0, fill=1,
                preferred=()):
        """Queue a request; it starts at once when a slot is free and nobody is ahead
        (``hold`` seconds later at most when it waits for ``fill`` images of its key: see
        the module's "batch shaping"; ``preferred`` sizes go to :meth:`gather`).

        Raises
        ------
        QueueFull
            ``max_queue`` requests wait, none of them of a lower priority than ``rank``.
        """
        if self.waiting >= self.max_queue:
            waiting = [t for *_, t in self._heap if not (t.finished or t.started)]
            victim = max(waiting, key=lambda t: (t.rank, t.seq), default=None)
            if victim is None or victim.rank <= rank:
                raise QueueFull(f"{self.waiting} requests of this priority or a higher one "
                                f"wait already (max_queue = {self.max_queue})")
            victim.shed = True
            self.finish(victim)
            if victim.future is not None and not victim.future.done():
                victim.future.set_exception(Shed("a higher-priority request took its place "
                                                 "in the device's queue"))
        ticket = Ticket(rank, next(self._seq), work, images, deadline, tenant, key, device,
                        payload=payload, fill=fill, preferred=tuple(preferred),
                        hold_until=self._clock() + hold if hold > 0 and key is not None
                        else 0.0)
        try:  # every ticket's result, whichever run carries it
            ticket.outcome = asyncio.get_running_loop().create_future()
        except RuntimeError:
            pass  # no event loop: a synchronous caller (tests of the bookkeeping)
        self.waiting += 1
        self.waiting_by_rank[rank] += 1
        self.waiting_work[rank] += work
        heapq.heappush(self._heap, (rank, deadline, ticket.seq, ticket))
        self._dispatch()
        return ticket

    async def acquire(self, ticket):
        """Wait until ``ticket`` holds a slot (cancellation leaves the queue consistent)."""
        if ticket.shed:
            raise Shed("a higher-priority request took its place in the device's queue")
        if ticket.started:
            return
        ticket.future = asyncio.get_running_loop().create_future()
        try:
            await ticket.future
        except asyncio.CancelledError:
            if not ticket.started:  # a started run finishes (and frees its slot) itself
                self.finish(ticket)
            raise

    def finish(self, ticket):
        """Give the slot back (or leave the queue, if it never started); idempotent."""
        if ticket.finished:
            return
        ticket.finished = True
        if ticket.started:
            if not ticket.rider:
                self.running -= 1
            self.running_work = max(0.0, self.running_work - ticket.work)
            self._running.discard(ticket)
        else:
            self._leave_queue(ticket)
        self._dispatch()

    def _leave_queue(self, ticket):
        """Take ``ticket``'s request and its predicted work off the waiting counts."""
        self.waiting -= 1
        self.waiting_by_rank[ticket.rank] -= 1
        self.waiting_work[ticket.rank] = max(0.0, self.waiting_work[ticket.rank]
                                             - ticket.work)

    def _start(self, ticket):
        """``ticket`` leaves the queue and runs: its work counts as running, its waiter
        wakes."""
        ticket.started, ticket.started_at = True, self._clock()
        self._leave_queue(ticket)
        self.running_work += ticket.work
        self._running.add(ticket)
        if ticket.tenant in self.quotas:
            self._charges.append((self._clock(), ticket.tenant, ticket.work))
            self._used[ticket.tenant] += ticket.work
        if ticket.future is not None and not ticket.future.done():
            ticket.future.set_result(None)

    def _batchable(self, leader):
        """Waiting tickets that may ride in ``leader``'s batch, in queue order."""
        if leader.key is None:
            return []
        return [ticket for *_, ticket in sorted(self._heap, key=lambda entry: entry[:3])
                if ticket is not leader and not (ticket.finished or ticket.started)
                and ticket.key == leader.key
                and not (self.quotas and self._standing(ticket) is _BLOCKED)]

    def gather(self, leader, max_images, batch_work=None):
        """Waiting requests with ``leader``'s key to run in its batch, in queue order, while
        the batch stays within ``max_images``, cut at the largest of ``leader.preferred``
        that a prefix of them adds up to (all that fit when none does): they start now, on
        the leader's slot, and each gets an ``outcome`` future for the leader to resolve.

        ``batch_work(images)``, when given, is the predicted seconds of the whole run: the
        leader's work becomes that and the riders' zero, so the running work counts the
        batch once (not each request's time alone, which overstates a batch N-fold)."""
        chosen, images = [], leader.images
        for ticket in self._batchable(leader):
            if images + ticket.images > max_images:
                break
            images += ticket.images
            chosen.append(ticket)
        if leader.preferred:
            totals = list(itertools.accumulate((t.images for t in chosen),
                                               initial=leader.images))
            cuts = [i for i, total in enumerate(totals) if total in leader.preferred]
            if cuts:
                chosen, images = chosen[:cuts[-1]], totals[cuts[-1]]
        riders = chosen
        for ticket in riders:
            ticket.rider = True
            if ticket.outcome is None:
                ticket.outcome = asyncio.get_running_loop().create_future()
            self._start(ticket)
        if batch_work is not None:
            self.running_work -= leader.work + sum(t.work for t in riders)
            leader.work = batch_work(images)
            for ticket in riders:
                ticket.work = 0.0
            self.running_work = max(0.0, self.running_work + leader.work)
        return riders

    def _dispatch(self):
        while self.running < self.workers and self._heap:
            if self.quotas:
                ticket = self._next_within_quotas()
                if ticket is None:
                    return
            else:
                ticket = self._heap[0][-1]
                if ticket.finished or ticket.started:
                    heapq.heappop(self._heap)  # left the queue while waiting, or rode
                    continue
            if self._held(ticket):
                return
            if not self.quotas:
                heapq.heappop(self._heap)
            self.running += 1
            self._start(ticket)
            if self.launch is not None:
                self.launch(ticket)

    def _next_within_quotas(self):
        """The first waiting ticket by (standing, class, deadline, arrival), none over a
        hard quota; when only such ones wait, a wake-up is set for when use decays."""
        self._heap = [entry for entry in self._heap
                      if not (entry[-1].finished or entry[-1].started)]
        heapq.heapify(self._heap)
        best, blocked = None, False
        for entry in self._heap:
            standing = self._standing(entry[-1])
            if standing is _BLOCKED:
                blocked = True
            elif best is None or (standing, *entry[:3]) < best[0]:
                best = ((standing, *entry[:3]), entry[-1])
        if best is None and blocked:
            self._wake_later()
        return None if best is None else best[1]

    def _held(self, ticket):
        """True while ``ticket``, first in line for a free slot, waits for a fuller batch
        (fewer than ``fill`` images of its key wait, ``hold_until`` not passed); a
        wake-up is set for its end."""
        if ticket.hold_until <= 0.0 or ticket.hold_until <= self._clock():
            return False
        images = ticket.images + sum(t.images for t in self._batchable(ticket))
        if images >= ticket.fill:
            return False
        self._wake_at(ticket.hold_until)
        return True

    def _wake_later(self):
        """Dispatch again when the oldest charge leaves the window (in the event loop)."""
        self._wake_at(self._charges[0][0] + self.window + 1e-3)

    def _wake_at(self, when):
        """Dispatch again at ``when`` (this queue's clock), in the event loop; an earlier
        wake-up already set stays (it sets the next one itself)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous test): it calls poke() itself
        if self._wakeup is not None and not self._wakeup.cancelled():
            if self._wakeup_at <= when:
                return
            self._wakeup.cancel()
        self._wakeup_at = when
        self._wakeup = loop.call_later(max(0.0, when - self._clock()), self.poke)

    def poke(self):
        """Start what may start now (after time passed: quotas decay)."""
        self._wakeup = None
        self._dispatch()
