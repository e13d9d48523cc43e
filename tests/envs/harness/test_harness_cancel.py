"""A harness rollout cancelled mid-episode (Ctrl-C's abort) ends quietly: the harness thread's
late HarnessStopped is retrieved, so asyncio prints no "Future exception was never retrieved"."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

from gymfleet.envs.harness.bridge import HarnessStopped
from gymfleet.envs.harness.env import HarnessEnv


async def test_a_cancelled_harness_rollout_leaves_no_unretrieved_exception() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    started, finished = threading.Event(), threading.Event()

    def harness(task: str, url: str, bridge: Any) -> str:  # blocks in its loop until the rollout ends
        started.set()
        try:
            bridge._closed.wait(10)
            raise HarnessStopped("the rollout ended: no more commands run")
        finally:
            finished.set()

    env = HarnessEnv(task_env="gymfleet/TerminalEasy-v0", task_kwargs={"sandbox": "local"}, grading_reserve_s=0)
    env.harness_fn = harness
    run = asyncio.create_task(env.run_harness("task", "http://127.0.0.1:9/s/x/v1", timeout_s=30))
    assert await asyncio.to_thread(started.wait, 5)
    run.cancel()
    try:
        await run
    except asyncio.CancelledError:
        pass
    assert await asyncio.to_thread(finished.wait, 5)
    for _ in range(3):  # the thread's settle callback runs on the loop, then the future is dropped
        await asyncio.sleep(0.01)
    del run
    gc.collect()
    await asyncio.sleep(0)
    # only this rollout's exception counts: gc may also finalise tasks other tests left behind
    ours = [c for c in reported if isinstance(c.get("exception"), HarnessStopped)]
    assert not [c for c in ours if "never retrieved" in str(c.get("message", ""))], ours
