"""The job executor against real processes: outcomes, memory, limits, overdraft, interruption, cleanup."""

from __future__ import annotations

import random
import signal
import time

import psutil
import pytest
from node_support import MiB, allocate, executor, gone, py, run, spec, wait_for_output

from pooltree.errors import ConfigError, PooltreeError
from pooltree.node import JobExecutor, JobState
from pooltree.node.job import ABORT_BY_SCHEDULER, MEMORY_LIMIT_EXCEEDED, RESOURCE_OVERDRAFT, USER_JOB_FAILED
from pooltree.node.signalling import JobSignals

INTERRUPTIBLE = py(
    "import signal, sys, time\n"
    "signal.signal(signal.SIGUSR1, lambda *a: (print('bye', flush=True), sys.exit(0)))\n"
    "print('ready', flush=True)\n"
    "time.sleep(30)\n"
)
STUBBORN = py(
    "import signal, time\nsignal.signal(signal.SIGUSR1, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(30)\n"
)


def test_completed_job_captures_stdout_stderr_and_environment(tmp_path):
    async def scenario():
        async with executor(tmp_path) as ex:
            command = 'echo hi; echo err >&2; echo "$YT_JOB_ID $YT_OPERATION_ID $YT_JOB_INDEX $MY_VAR"; pwd'
            await ex.start(spec("job-a", command, environment={"MY_VAR": "v"}, job_index=4))
            result = await ex.wait("job-a", 10)
            return result, ex.stdout("job-a"), ex.stderr("job-a"), ex.sandbox_slots

    result, stdout, stderr, in_slot = run(scenario())
    assert result.state is JobState.COMPLETED
    assert result.exit_code == 0 and result.error is None
    lines = stdout.decode().splitlines()
    assert lines[0] == "hi"
    assert lines[1] == "job-a op-1 4 v"
    sandbox = (
        tmp_path / "slots" / (".slot-0" if in_slot else "job-a") / "sandbox"
    )  # a slot's (slots.py) or its own
    assert lines[2] == str(sandbox)
    assert stderr == b"err\n"
    assert result.stderr_size == 4
    assert not sandbox.exists(), "sandbox is removed after the job (a slot's when the node stops)"
    stats = result.statistics
    for name in (
        "user_job/max_memory",
        "user_job/memory_reserve",
        "job_proxy/max_memory",
        "job_proxy/memory_reserve",
        "job_proxy/estimated_memory",
        "user_job/cumulative_memory_reserve",
        "job_proxy/cumulative_estimated_memory",
        "time/total",
        "time/exec",
    ):
        assert name in stats
    assert "user_job/memory_limit" not in stats
    assert 0 < stats["job_proxy/max_memory"] < 64 * 1024
    assert result.finish_time >= result.start_time


def test_keep_sandbox_keeps_files(tmp_path):
    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-k", "echo data > out.txt", keep_sandbox=True))
            return await ex.wait("job-k", 10)

    assert run(scenario()).state is JobState.COMPLETED
    assert (tmp_path / "slots" / "job-k" / "sandbox" / "out.txt").read_text() == "data\n"


def test_failed_job_reports_exit_code(tmp_path):
    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-f", "echo oops >&2; exit 3"))
            return await ex.wait("job-f", 10), ex.stderr("job-f")

    result, stderr = run(scenario())
    assert result.state is JobState.FAILED
    assert result.exit_code == 3
    assert result.error["code"] == USER_JOB_FAILED
    inner = result.error["inner_errors"][0]
    assert inner["code"] == 10000 and inner["attributes"]["exit_code"] == 3
    assert "exited with code 3" in inner["message"]
    assert stderr == b"oops\n"


def test_job_killed_by_signal_reports_the_signal(tmp_path):
    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-s", "kill -TERM $$"))
            return await ex.wait("job-s", 10)

    result = run(scenario())
    assert result.state is JobState.FAILED
    inner = result.error["inner_errors"][0]
    assert inner["code"] == 10001 and inner["attributes"]["signal_name"] == "SIGTERM"


def test_memory_is_measured_over_the_whole_process_tree(tmp_path):
    # Two child processes hold 40 MiB each; the sum must show in max_memory.
    child = allocate(40, 1.5)
    command = f"{child} & {child} & wait"

    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-tree", command))
            return await ex.wait("job-tree", 15)

    result = run(scenario())
    assert result.state is JobState.COMPLETED
    assert result.statistics["user_job/max_memory"] >= 80 * MiB
    assert result.statistics["user_job/cumulative_max_memory"] > 0


def test_memory_limit_exceeded_fails_the_job(tmp_path):
    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-m", allocate(200, 10), memory_limit=100 * MiB, memory_reserve=50 * MiB))
            started = time.monotonic()
            result = await ex.wait("job-m", 15)
            return result, time.monotonic() - started

    result, elapsed = run(scenario())
    assert result.state is JobState.FAILED
    assert result.error["code"] == MEMORY_LIMIT_EXCEEDED
    assert result.error["message"] == "Memory limit exceeded"
    assert result.error["attributes"]["limit"] == 100 * MiB
    assert result.error["attributes"]["usage"] > 100 * MiB
    assert result.statistics["user_job/memory_limit"] == 100 * MiB
    assert result.statistics["user_job/max_memory"] > 100 * MiB
    assert elapsed < 8, "the job is killed, not left to finish its sleep"


def test_overdraft_aborts_jobs_above_reserve_on_a_full_node(tmp_path):
    async def scenario():
        async with executor(tmp_path, node_memory_limit=50 * MiB) as ex:
            for job_id in ("job-o1", "job-o2"):
                await ex.start(
                    spec(job_id, allocate(80, 10), memory_limit=300 * MiB, memory_reserve=10 * MiB)
                )
            return [await ex.wait(job_id, 15) for job_id in ("job-o1", "job-o2")]

    for result in run(scenario()):
        assert result.state is JobState.ABORTED
        assert result.abort_reason == "resource_overdraft"
        assert result.error["code"] == RESOURCE_OVERDRAFT
        assert result.error["attributes"]["usage"] > 10 * MiB
        assert result.statistics["user_job/max_memory"] > 10 * MiB


def test_job_above_reserve_completes_on_a_roomy_node(tmp_path):
    async def scenario():
        async with executor(tmp_path, node_memory_limit=2048 * MiB) as ex:
            await ex.start(spec("job-r", allocate(80, 0.5), memory_limit=300 * MiB, memory_reserve=10 * MiB))
            return await ex.wait("job-r", 15)

    result = run(scenario())
    assert result.state is JobState.COMPLETED
    assert result.statistics["user_job/max_memory"] > 80 * MiB > result.statistics["user_job/memory_reserve"]


def test_interruption_with_handler_completes(tmp_path):
    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-i", INTERRUPTIBLE, interruption_signal="SIGUSR1"))
            await wait_for_output(ex, "job-i", b"ready")
            ex.interrupt("job-i", timeout=5, reason="preemption")
            assert ex.phase("job-i") == "interrupting"
            return await ex.wait("job-i", 10), ex.stdout("job-i")

    result, stdout = run(scenario())
    assert result.state is JobState.COMPLETED
    assert result.interruption_reason == "preemption"
    assert b"bye" in stdout


def test_shell_trap_works_when_the_node_was_started_with_sigint_ignored(tmp_path):
    """A node started in the background by a non-interactive shell inherits SIGINT ignored; a shell job started
    with a signal ignored cannot trap it. Jobs start with default dispositions, so the trap still works."""

    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(
                spec(
                    "job-t",
                    "trap 'echo bye; exit 0' INT; echo ready; sleep 30 & wait",
                    interruption_signal="SIGINT",
                )
            )
            await wait_for_output(ex, "job-t", b"ready")
            ex.interrupt("job-t", timeout=5, reason="preemption")
            return await ex.wait("job-t", 10), ex.stdout("job-t")

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result, stdout = run(scenario())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert result.state is JobState.COMPLETED, result.error
    assert result.interruption_reason == "preemption" and b"bye" in stdout


def test_interruption_ignored_is_aborted_after_timeout(tmp_path):
    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-x", STUBBORN, interruption_signal="SIGUSR1"))
            await wait_for_output(ex, "job-x", b"ready")
            started = time.monotonic()
            ex.interrupt("job-x", timeout=0.5, reason="graceful_preemption")
            result = await ex.wait("job-x", 10)
            return result, time.monotonic() - started

    result, elapsed = run(scenario())
    assert result.state is JobState.ABORTED
    assert result.abort_reason == "graceful_preemption"
    assert result.error["code"] == ABORT_BY_SCHEDULER
    assert result.error["attributes"]["interruption_timeout"] == 0.5
    assert 0.5 <= elapsed < 5
    # what the interruption left running, and whether the signal reached it: the stubborn program was signalled
    left = result.error["attributes"]["processes_left"]
    assert any("python" in line and line.endswith(", signalled)") for line in left), left


def test_an_interruption_timeout_kills_even_when_its_processes_cannot_be_listed(tmp_path, monkeypatch):
    """The abort error's list of what was left is a description: a scan that fails there still kills the job."""

    def broken(self, job, signalled):
        raise OSError("no /proc")

    monkeypatch.setattr(JobSignals, "still_running", broken)

    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-y", STUBBORN, interruption_signal="SIGUSR1"))
            await wait_for_output(ex, "job-y", b"ready")
            ex.interrupt("job-y", timeout=0.2, reason="preemption")
            return await ex.wait("job-y", 10)

    result = run(scenario())
    assert result.state is JobState.ABORTED and result.abort_reason == "preemption"
    assert result.error["attributes"]["processes_left"] == [
        "(the job's processes could not be listed: no /proc)"
    ]


def test_interrupt_without_signal_aborts_at_once(tmp_path):
    async def scenario():
        async with executor(tmp_path, abort_grace=5) as ex:
            await ex.start(spec("job-n", "sleep 30"))
            ex.interrupt("job-n", timeout=60, reason="preemption")
            return await ex.wait("job-n", 10)

    result = run(scenario())
    assert result.state is JobState.ABORTED and result.abort_reason == "preemption"


def test_abort_escalates_to_sigkill_after_grace(tmp_path):
    command = "trap '' TERM; echo ready; sleep 30 & wait; sleep 30"

    async def scenario():
        async with executor(tmp_path, abort_grace=0.3) as ex:
            await ex.start(spec("job-t", command))
            await wait_for_output(ex, "job-t", b"ready")
            ex.abort("job-t", "user_request")
            return await ex.wait("job-t", 10)

    result = run(scenario())
    assert result.state is JobState.ABORTED
    assert result.abort_reason == "user_request"
    assert result.error["attributes"]["abort_reason"] == "user_request"


def test_background_processes_do_not_outlive_the_job(tmp_path):
    # Durations no other process on the host uses (other test runs and sessions sleep 300 too).
    first, second = (f"{300 + random.random() * 60:.6f}" for _ in range(2))

    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-bg", f"sleep {first} & echo $!; (sleep {second} &) ; echo done"))
            return await ex.wait("job-bg", 10)

    result = run(scenario())
    assert result.state is JobState.COMPLETED
    # (the pid the job printed is its own PID namespace's when bubblewrap sandboxes it: look by command line)
    leftovers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] in (["sleep", first], ["sleep", second])
    ]
    assert not [p for p in leftovers if not gone(p.pid)]


def test_shutdown_kills_running_jobs(tmp_path):
    async def scenario():
        ex = executor(tmp_path, isolation="none")  # the printed pid must be the host's
        await ex.start(spec("job-d", "sleep 300 & echo $!; wait"))
        await wait_for_output(ex, "job-d", b"\n")
        pid = int(ex.stdout("job-d").split()[0])
        await ex.shutdown()
        with pytest.raises(PooltreeError):
            await ex.start(spec("job-late", "true"))
        return ex.result("job-d"), pid

    result, pid = run(scenario())
    assert result.state is JobState.ABORTED and result.abort_reason == "node_shutdown"
    assert gone(pid)


def test_stderr_is_cut_as_ytsaurus_cuts_it(tmp_path):
    """YTsaurus's job proxy keeps the first half of max_stderr_size, "\\n...skipped...\\n", the last half."""

    async def scenario():
        async with executor(tmp_path, stderr_limit=1000) as ex:
            await ex.start(spec("job-e", py("import sys; sys.stderr.write('a' * 4000 + 'b' * 1000)")))
            return await ex.wait("job-e", 10), ex.stderr("job-e", 2000)

    result, stderr = run(scenario())
    assert stderr == b"a" * 500 + b"\n...skipped...\n" + b"b" * 500
    assert result.stderr_size == len(stderr)


def test_duplicate_and_unknown_jobs_are_errors(tmp_path):
    async def scenario():
        async with executor(tmp_path) as ex:
            await ex.start(spec("job-1", "sleep 5"))
            with pytest.raises(PooltreeError, match="already known"):
                await ex.start(spec("job-1", "true"))
            with pytest.raises(PooltreeError, match="no running job"):
                ex.abort("nope", "user_request")
            with pytest.raises(ConfigError, match="timeout"):
                ex.interrupt("job-1", timeout=-1)

    run(scenario())


def test_start_failure_is_a_failed_result(tmp_path):
    async def scenario():
        async with executor(tmp_path) as ex:

            def broken_prepare(job_id, memory_limit):
                raise OSError(28, "No space left on device")

            ex.meter.prepare = broken_prepare
            await ex.start(spec("job-broken", "true"))
            return await ex.wait("job-broken", 5)

    result = run(scenario())
    assert result.state is JobState.FAILED
    assert result.error["code"] == 1120
    assert "No space left" in result.error["attributes"]["reason"]


def test_executor_rejects_bad_settings(tmp_path):
    with pytest.raises(ConfigError, match="memory_sample_period"):
        JobExecutor(tmp_path, memory_sample_period=0)
    with pytest.raises(ConfigError, match="stderr_limit"):
        JobExecutor(tmp_path, stderr_limit=0)
    with pytest.raises(ConfigError, match="memory_meter"):
        JobExecutor(tmp_path, memory_meter="magic")


def test_sample_period_bounds_detection_latency(tmp_path):
    # A job that reaches its limit after 0.3 s is stopped well before its 10 s sleep ends.
    command = py("import time; time.sleep(0.3); b = bytearray(b'x') * (150 * 1024 * 1024); time.sleep(10)")

    async def scenario():
        async with executor(tmp_path, memory_sample_period=0.1) as ex:
            await ex.start(spec("job-late-alloc", command, memory_limit=100 * MiB))
            started = time.monotonic()
            result = await ex.wait("job-late-alloc", 15)
            return result, time.monotonic() - started

    result, elapsed = run(scenario())
    assert result.state is JobState.FAILED and result.error["code"] == MEMORY_LIMIT_EXCEEDED
    assert elapsed < 5


def test_descendant_that_left_the_session_is_still_killed(tmp_path):
    # setsid moves the sleep into its own session and process group; the sampler saw it as a descendant.
    async def scenario():
        async with executor(tmp_path, isolation="none") as ex:  # the pid printed is the host's
            await ex.start(spec("job-escape", "setsid sleep 302 & echo $!; sleep 0.5"))
            result = await ex.wait("job-escape", 10)
            return result, int(ex.stdout("job-escape").split()[0])

    result, pid = run(scenario())
    assert result.state is JobState.COMPLETED
    assert gone(pid)


def test_an_interruption_asked_while_the_launch_is_being_reported_reaches_the_job(tmp_path):
    """The job may run (and print) before the node has taken its launch in (the launcher thread hands the
    process over to the event loop); an interruption asked then is sent once the launch is in, to the job's
    processes found then. It was sent to an empty list of processes: the job ran to its interruption timeout."""
    trap = "trap 'echo bye; exit 0' USR1; echo ready; sleep 30 & wait"

    async def scenario():
        async with executor(tmp_path) as ex:
            launch = ex._launching.launch

            def slow_to_report(job, extra):  # type: ignore[no-untyped-def]
                process = launch(job, extra)
                time.sleep(0.5)  # the job is running; the node has not taken the launch in yet
                return process

            ex._launching.launch = slow_to_report  # type: ignore[method-assign]
            await ex.start(spec("job-s", trap, interruption_signal="SIGUSR1"))
            await wait_for_output(ex, "job-s", b"ready")
            assert ex._running["job-s"].process is None, "the launch was taken in already: nothing tested"
            ex.interrupt("job-s", timeout=5, reason="preemption")
            return await ex.wait("job-s", 10), ex.stdout("job-s")

    result, stdout = run(scenario())
    assert result.state is JobState.COMPLETED, result.error
    assert result.interruption_reason == "preemption" and b"bye" in stdout
