"""Where a job runs: a job lost with its worker is retried on another device when there is one."""

from collections import deque

from specpilot.search.execution import Job
from specpilot.search.execution import pick


def _device_of(placement):
    return lambda worker: placement.get(worker)


def test_a_fresh_job_takes_the_first_placed_idle_worker():
    placement = {"w0": None, "w1": ("node", ("1",))}  # w0 still waits for a GPU
    job = Job("a", {})
    assert pick(deque([job]), ["w0", "w1"], _device_of(placement),
                {("node", ("1",))}) == (job, "w1")


def test_a_retry_waits_for_another_device_while_the_pool_has_one():
    lost_on = ("node", ("0",))
    placement = {"w0-new": lost_on, "w1": ("node", ("1",))}
    retry, fresh = Job("a", {}, attempt=2, avoid=lost_on), Job("b", {})
    devices = {lost_on, ("node", ("1",))}
    # only the replacement on the lost device is idle: the retry waits, the fresh job goes there
    assert pick(deque([retry, fresh]), ["w0-new"], _device_of(placement), devices) == \
        (fresh, "w0-new")
    assert pick(deque([retry]), ["w0-new"], _device_of(placement), devices) is None
    # the other device frees up: the retry runs there
    assert pick(deque([retry]), ["w0-new", "w1"], _device_of(placement), devices) == \
        (retry, "w1")


def test_a_retry_may_reuse_the_device_of_a_single_device_pool():
    lost_on = ("node", ("0",))
    retry = Job("a", {}, attempt=2, avoid=lost_on)
    assert pick(deque([retry]), ["w0-new"], _device_of({"w0-new": lost_on}), {lost_on}) == \
        (retry, "w0-new")
