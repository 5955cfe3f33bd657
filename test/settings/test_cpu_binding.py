"""MSTAR_CPU_BIND's rule (``mstar.settings.checks.cpu_binding``) and its mechanics in a process
(``mstar.ipc.cpu_affinity``), torch-free. The served binding: test/processes/test_cpu_bind_serve.py."""

import itertools
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mstar.settings import WorkerSettings
from mstar.settings.checks.cpu_binding import cpu_binding

cpu_sets = st.sets(st.integers(0, 63), min_size=1, max_size=12)


def test_it_binds_only_one_engine_process_on_a_cpu_machine():
    checked = 0
    for on, workers, tp, executor, models, device, gpu, cpus in itertools.product(
            (True, False), (1, 2), (1, 2), ("mp", "ray"), (None, "a=/m/a,b=/m/b"),
            ("auto", "cpu", "cuda"), (False, True), ({0}, {0, 1}, {2, 5, 7})):
        settings = WorkerSettings(cpu_bind=on, device=device, num_workers=workers,
                                  tensor_parallel_size=tp, distributed_executor=executor,
                                  models=models)
        applies = (on and workers == 1 and tp == 1 and executor == "mp" and models is None
                   and len(cpus) >= 2 and (device == "cpu" or (device == "auto" and not gpu)))
        assert (cpu_binding(settings, cpus, gpu) is not None) == applies, settings
        checked += applies
    assert checked == 6  # {0, 1} and {2, 5, 7}, each on cpu, auto without a GPU and cpu with one


@given(cpus=cpu_sets.filter(lambda cpus: len(cpus) >= 2), threads=st.integers(0, 16))
def test_the_engine_keeps_its_cpus_and_the_front_one_it_leaves_or_its_last(cpus, threads):
    binding = cpu_binding(WorkerSettings(device="cpu", torch_num_threads=threads), cpus, False)
    ordered = sorted(cpus)
    used = min(threads or len(cpus), len(cpus))
    assert binding.engine == tuple(ordered[:used])  # one thread per CPU, in order
    if used < len(cpus):  # a CPU the engine leaves free
        assert binding.front == ordered[used]
    else:  # the last engine thread's, never the first's (it runs the step's Python)
        assert binding.front == binding.engine[-1] != binding.engine[0]


_PROBE = """
import multiprocessing, os, threading
from mstar.ipc.cpu_affinity import bind_process, process_cpus
from mstar.ipc.lifecycle import start_child

def report(queue):
    queue.put(sorted(os.sched_getaffinity(0)))

if __name__ == "__main__":
    home = process_cpus()
    bind_process({front})
    after = []
    thread = threading.Thread(target=lambda: after.append(os.sched_getaffinity(0)))
    thread.start(); thread.join()
    queue = multiprocessing.get_context("spawn").Queue()
    child = start_child(report, (queue,), "probe")
    child.join()
    tids = os.listdir("/proc/self/task")
    print(sorted(home), sorted(os.sched_getaffinity(0)), sorted(after[0]), queue.get(),
          sorted({{cpu for tid in tids for cpu in os.sched_getaffinity(int(tid))}}), sep=";")
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs at least 2 CPUs")
def test_a_bound_process_and_its_threads_stay_on_the_front_and_its_children_start_free(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    front = cpus[-1]
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE.format(front=front))
    out = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip().splitlines()[-1]
    home, main, later_thread, child, every_thread = (eval(part) for part in out.split(";"))
    assert home == cpus
    assert main == later_thread == every_thread == [front]
    assert child == cpus  # a child is not confined to the front's CPU
