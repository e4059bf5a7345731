"""Speed of the Verilator twin against cocotb driving the same netlist cycle by cycle.

The layer: a 3x3 convolution, 32 -> 32 channels at 16x16 (the issue's reference layer), on
an 8x8 array. Both sides simulate the same Verilog, the twin's netlist (the accelerator top
with registered inputs, flattened by Yosys; ``twin.netlist``), doing the same work,
the layer's pass programs: the twin through the driver (``Accelerator.conv2d`` over
``SimTransport``, its C++ harness clocking), cocotb with Python on every cycle
(``sim/tb_twin_bench.py``, which drives the ports as the harness does). Both are checked
against the golden model, and the speedup (:func:`speedup`) is refused unless the two
netlists' SHA-256 agree. It is a ratio of simulated cycles per second: the two runs'
cycle counts differ a little (a cocotb CSR read takes a cycle more), so wall time per layer
would not compare like with like.

One layer takes about 0.05 s on the twin, so a single timing scatters by +-25 % on a shared
machine. The benchmark therefore runs ``ROUNDS`` interleaved rounds, each timing
``TWIN_LAYERS`` back-to-back layers on the twin (its plain build, then its profile-guided
build) and then one layer under cocotb (a fresh simulation, timed by the testbench around
the layer only), so load from other processes falls on both sides alike. It reports the
median ratio over the rounds and its spread (lowest, highest); the same ratio in cycles per
CPU second (on a shared machine wall time also counts waiting for a core); the load
average; and the twin's host overhead: the share of the layers' wall time spent outside the
twin's ``run`` calls (driver, packing, CSR and DMA calls). OPENBLAS_NUM_THREADS=1.
"""

import hashlib
import json
import os
import statistics
import tempfile
import time

import numpy as np

from bench.common import metric, require_counters, write_results
from bench.conv_cases import BENCH_LAYER, bench_layer, golden
from contract.config import ArrayConfig, ConvEngineConfig
from sw_driver.accelerator import Accelerator
from sw_driver.transport.sim import SimTransport
from twin.dma import Twin
from twin.netlist import TwinNetlist
from twin.runner import BUILD_ROOT, run_testbench

CONFIG = ConvEngineConfig(array=ArrayConfig(rows=8, cols=8), act_depth=8192,
                          weight_depth=2048, max_col_tiles=16)
ROUNDS = 7
TWIN_LAYERS = 10
SEED = 1
#: The training run of the profile-guided build (``twin.dma.build_twin``).
TRAIN = "bench.twin_train"


def netlist_digest(path):
    """SHA-256 of a netlist file: what :func:`speedup` compares."""
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def speedup(twin, cocotb):
    """How many times more simulated cycles per second ``twin`` ran than ``cocotb``.

    Each is a run: ``{"cycles", "seconds", "netlist"}`` (simulated cycles, the seconds they
    took, the SHA-256 of the netlist simulated). Wall time per layer would credit or charge
    the twin for cycles the other run did not simulate, so cycles per second are compared.

    Raises
    ------
    ValueError
        The runs simulated different netlists (a speedup between two designs says nothing
        about the simulators), or a run has no cycles or no time.
    """
    for name, run in (("twin", twin), ("cocotb", cocotb)):
        if not (run["cycles"] > 0 and run["seconds"] > 0):
            raise ValueError(f"the {name} run has {run['cycles']} cycles in "
                             f"{run['seconds']} s: nothing to compare")
    if twin["netlist"] != cocotb["netlist"]:
        raise ValueError(f"the twin simulated netlist {twin['netlist'][:12]}, cocotb "
                         f"{cocotb['netlist'][:12]}: a speedup compares one netlist")
    return (twin["cycles"] / twin["seconds"]) / (cocotb["cycles"] / cocotb["seconds"])


class TimedTwin:
    """The twin's ``run`` with the wall time spent inside it added up: what is left of a
    layer's wall time is host work."""

    def __init__(self, twin):
        self.twin, self.seconds = twin, 0.0
        self._run = twin.run
        twin.run = self.run

    def run(self, budget, **options):
        started = time.perf_counter()
        try:
            return self._run(budget, **options)
        finally:
            self.seconds += time.perf_counter() - started


def open_twin(train):
    transport = SimTransport(Twin(CONFIG, train=train))
    return transport, Accelerator(transport), TimedTwin(transport.twin)


def twin_round(accelerator, timer, layer, want):
    """``TWIN_LAYERS`` layers back to back: cycles/s over them, and the host's share."""
    cycles, timer.seconds = 0, 0.0
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(TWIN_LAYERS):
        got = accelerator.conv2d(layer["x"], layer["w"], layer["bias"], layer["multiplier"],
                                 layer["shift"], x_zero_point=layer["zx"],
                                 y_zero_point=layer["zy"], lo=layer["lo"], hi=layer["hi"],
                                 stride=layer["stride"], padding=layer["padding"])
        if not np.array_equal(got, want):
            raise AssertionError("twin result differs from the golden model")
        cycles += accelerator.last_counters.cycles
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return {"cycles_per_second": cycles / wall, "cpu_cycles_per_second": cycles / cpu,
            "host_overhead": 1.0 - timer.seconds / wall,
            "seconds": wall / TWIN_LAYERS, "cpu_seconds": cpu / TWIN_LAYERS,
            "cycles": cycles / TWIN_LAYERS,
            "netlist": netlist_digest(accelerator.transport.twin.netlist)}


def spread(values):
    """(median, lowest, highest) of per-round figures."""
    return statistics.median(values), min(values), max(values)


def cocotb_layer():
    build = TwinNetlist(CONFIG)
    with tempfile.TemporaryDirectory() as tmp:
        report_path = os.path.join(tmp, "report.json")
        env = {"TESSERA_REPORT": report_path, **CONFIG.env()}
        run_testbench("sim.tb_twin_bench", build, seed=SEED, name="bench-twin",
                      extra_env=env)
        with open(report_path) as f:
            report = json.load(f)
    netlist = BUILD_ROOT.resolve() / build.name / f"{build.top_name}.v"
    return {"cycles_per_second": report["cycles"] / report["seconds"],
            "cpu_cycles_per_second": report["cycles"] / report["cpu_seconds"],
            "netlist": netlist_digest(netlist), **report}


def main():
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    require_counters(CONFIG, "bench_twin")
    layer = bench_layer(SEED)
    want = golden(layer)
    twins = {"plain": open_twin(None), "pgo": open_twin(TRAIN)}
    built = "profile-guided" if twins["pgo"][0].twin.profile_guided else \
        "plain (the profile-guided build failed, see its log)"
    load_start = os.getloadavg()
    rounds = []
    for _ in range(ROUNDS):
        entry = {name: twin_round(accelerator, timer, layer, want)
                 for name, (_, accelerator, timer) in twins.items()}
        entry["cocotb"] = cocotb_layer()
        rounds.append(entry)
    load_end = os.getloadavg()
    for transport, _, _ in twins.values():
        transport.close()

    def per_round(name, key="cycles_per_second"):
        return [entry[name][key] for entry in rounds]

    cocotb = per_round("cocotb")
    ratio = {name: [speedup(entry[name], entry["cocotb"]) for entry in rounds]
             for name in twins}

    def cpu_time(run):
        return {**run, "seconds": run["cpu_seconds"]}

    cpu_ratio = [speedup(cpu_time(entry["pgo"]), cpu_time(entry["cocotb"])) for entry in rounds]
    cpu_best, cpu_low, cpu_high = spread(cpu_ratio)
    best, low, high = spread(ratio["pgo"])
    plain, plain_low, plain_high = spread(ratio["plain"])
    label = (f"conv {BENCH_LAYER['kernel']}x{BENCH_LAYER['kernel']} {BENCH_LAYER['c_in']}->"
             f"{BENCH_LAYER['c_out']} {BENCH_LAYER['size'][0]}x{BENCH_LAYER['size'][1]}")
    twin_note = f"median of {ROUNDS} rounds of {TWIN_LAYERS} layers, host work included"
    metrics = [
        metric("twin_cycles_per_second", round(statistics.median(per_round("pgo"))),
               "cycles/s", target=1_000_000, note=f"{built} build; {twin_note}"),
        metric("twin_plain_cycles_per_second", round(statistics.median(per_round("plain"))),
               "cycles/s", note=f"plain build; {twin_note}"),
        metric("cocotb_cycles_per_second", round(statistics.median(cocotb)), "cycles/s",
               note=f"median of {ROUNDS} simulations, one layer each"),
        metric("twin_speedup_over_cocotb", round(best, 1), "x",
               peer="cocotb driving the same netlist (the twin's) through the same layer "
                    "cycle by cycle, same rounds",
               peer_value=round(statistics.median(cocotb)), target=40,
               note=f"simulated cycles per second, twin over cocotb; median of {ROUNDS} "
                    f"interleaved rounds' ratios; {built} twin"),
        metric("twin_speedup_over_cocotb_lowest", round(low, 1), "x"),
        metric("twin_speedup_over_cocotb_highest", round(high, 1), "x"),
        metric("twin_plain_speedup_over_cocotb", round(plain, 1), "x",
               peer="cocotb, same rounds", peer_value=round(statistics.median(cocotb)),
               note=f"plain build; rounds {plain_low:.1f} to {plain_high:.1f}"),
        metric("twin_speedup_over_cocotb_cpu_time", round(cpu_best, 1), "x",
               peer="cocotb, same rounds, CPU time",
               peer_value=round(statistics.median(per_round("cocotb",
                                                            "cpu_cycles_per_second"))),
               note=f"cycles per CPU second, less disturbed by other jobs than wall time; "
                    f"rounds {cpu_low:.1f} to {cpu_high:.1f}"),
        metric("twin_host_overhead", round(statistics.median(per_round("pgo",
                                                                       "host_overhead")), 4),
               "fraction of the layer's wall time", target=0.10,
               note="outside the twin's run calls"),
        metric("twin_layer_seconds", round(statistics.median(per_round("pgo", "seconds")), 4),
               "s"),
        metric("twin_layer_cycles", round(rounds[0]["pgo"]["cycles"]), "cycles",
               note="PERF_CYCLES over the layer's passes: loading, compute, results"),
        metric("cocotb_layer_cycles", rounds[0]["cocotb"]["cycles"], "cycles",
               note="the same, on the same netlist (a CSR read takes a cycle more)"),
        metric("cocotb_layer_seconds",
               round(statistics.median(per_round("cocotb", "seconds")), 2), "s"),
    ]
    return write_results("twin", metrics, config=CONFIG.as_dict(), layer=label,
                         compared=("simulated cycles per second of the same netlist "
                                   "running the same pass programs"),
                         netlist={"sha256": rounds[0]["cocotb"]["netlist"],
                                  "what": "twin.netlist.TwinNetlist"},
                         rounds=ROUNDS, twin_layers_per_round=TWIN_LAYERS,
                         load_average={"start": [round(v, 2) for v in load_start],
                                       "end": [round(v, 2) for v in load_end]},
                         ratios={**{name: [round(r, 1) for r in values]
                                    for name, values in ratio.items()},
                                 "pgo_cpu_time": [round(r, 1) for r in cpu_ratio]})


if __name__ == "__main__":
    main()
