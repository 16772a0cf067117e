"""Q27 with real worker processes: SIGTERM drains and exits 0; SIGKILL loses no job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

import pytest
from sqlalchemy import URL

from alkstore_sa import AsyncWorker, Job, QueueOpts, Store, Worker

from .._workers import KINDS, handler, start_worker, wait_for

pytestmark = pytest.mark.chaos

# A worker process: its handler says "started <id>", works for WORK seconds,
# says "finished <id>".  argv: kind, url, work seconds, worker id.
CHILD = """
import asyncio, sys, time
from alkstore_sa import AsyncStore, AsyncWorker, QueueOpts, Store, Worker
kind, url, work, wid = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
opts = QueueOpts(visibility_timeout=1)
def say(*words):
    print(*words, flush=True)
if kind == "sync":
    def job(j):
        say("started", j.id); time.sleep(work); say("finished", j.id)
    with Store.from_url(url) as s:
        Worker({s.queue("procs", opts): job}, poll_interval=0.1, worker_id=wid).run()
else:
    async def job(j):
        say("started", j.id); await asyncio.sleep(work); say("finished", j.id)
    async def main():
        async with AsyncStore.from_url(url) as s:
            await AsyncWorker({s.queue("procs", opts): job}, poll_interval=0.1, worker_id=wid).run()
    asyncio.run(main())
say("exited")
"""


def _spawn(kind: str, url: URL, work: float, worker_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            kind,
            url.render_as_string(hide_password=False),
            str(work),
            worker_id,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def _read_line(stream: IO[str] | None, timeout: float = 20.0) -> str:
    assert stream is not None
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert out, "no line from the worker process"
    return out[0].strip()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("kind", KINDS)
def test_q27_signal_finishes_the_job_and_exits_0(
    kind: str, sig: signal.Signals, database_url: URL, store: Store
) -> None:
    q = store.queue("procs", QueueOpts(visibility_timeout=1))
    job_id = q.enqueue(b"")
    proc = _spawn(kind, database_url, 1.0, "graceful")
    try:
        assert _read_line(proc.stdout) == f"started {job_id}"
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert out.split() == ["finished", str(job_id), "exited"]
    assert q.get_job(job_id) is None  # acked before the process exited


@pytest.mark.parametrize("kind", KINDS)
def test_q27_sigkilled_worker_job_is_completed_by_another_after_the_timeout(
    kind: str, database_url: URL, store: Store
) -> None:
    opts = QueueOpts(visibility_timeout=1)
    q = store.queue("procs", opts)
    job_id = q.enqueue(b"")
    proc = _spawn(kind, database_url, 60.0, "doomed")
    try:
        assert _read_line(proc.stdout) == f"started {job_id}"
        held = q.get_job(job_id)
        assert held is not None and (held.status, held.worker_id) == ("processing", "doomed")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
    finally:
        proc.kill()
        proc.wait()
    done: list[tuple[Job, float]] = []
    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind,
        database_url,
        lambda s: cls(
            {s.queue("procs", opts): handler(kind, lambda j: done.append((j, time.monotonic())))},
            poll_interval=0.1,
            worker_id="survivor",
        ),
    )
    try:
        wait_for(lambda: q.get_job(job_id) is None, timeout=10)
    finally:
        running.stop()
    [(job, at)] = done
    assert (job.id, job.attempts, job.worker_id) == (job_id, 2, "survivor")
    assert at - killed_at < 5  # picked up once the 1 s claim lapsed, by the re-poll
