"""Resident execution against layer at a time (docs/resident.md): bytes over the host link
per inference, link time against compute time, whole-model utilization and the cycle
model's error, each measured on the twin in the same run as its peer.

- ``link_bytes_per_inference_ratio_*``: payload bytes the link carries per inference in
  steady state (a second batch, the image already loaded) over the model's own input and
  output bytes (int8 elements); the peer is the same model layer at a time,
  ``("sim", {"resident": False})``, on the same twin.
- ``end_to_end_over_compute_resnet8_xdma``: ResNet-8 at batch 8 resident; the bytes and
  cycles the twin counted, priced with ``costs.LinkModel``'s XDMA figures (two DMA
  transfers and the run's register accesses) and the "pcie" provider's default clock.
- ``whole_model_utilization_resident``: useful Conv/Dense MACs over 64 MAC units times the
  twin's cycles of that run (peer: the same figure layer at a time).
- ``cycle_model_error_resident``: |model - twin| / twin of a resident run's cycles
  (``DeviceImage.run_cycles``, the player's overheads included), worst of the two models.
- ``uart_images_per_second_digits``: the digits CNN resident on the ulx3s-85f preset's
  serial twin at 3 Mbaud, in device time (the twin's cycles at its 50 MHz); recorded as
  missing, with the reason, when that preset has no resident block.
"""

import tempfile
from pathlib import Path

import numpy as np

from bench.common import metric, random_feeds, write_results
from contract.config_file import PRESETS
from models.zoo import DIGITS_QDQ, random_models
from sw_driver import InferenceSession
from sw_driver import graph as g
from sw_driver.providers import costs
from sw_driver.providers.pcie import DEFAULT_CLOCK_HZ
from sw_driver.providers.sim import SimProvider
from sw_driver.resident.runner import RUN_CSR_ACCESSES
from sw_driver.shapes import infer_shapes

CONFIG = PRESETS["default"]
BATCH = 8
BAUD = 3_000_000
SERIAL_TWIN_HZ = 50e6
TARGETS = {"link_bytes_per_inference_ratio": 1.25, "uart_images_per_second_digits": 2000,
           "end_to_end_over_compute_resnet8_xdma": 1.10,
           "whole_model_utilization_resident": 0.90, "cycle_model_error_resident": 0.05}


def _io_bytes(session):
    """The model's input and output int8 elements of one inference."""
    return sum(int(np.prod(i.shape[1:])) for i in (*session.get_inputs(),
                                                   *session.get_outputs()))


def _useful_macs(session, batch):
    graph = session._graph
    shapes = infer_shapes(graph, batch)
    return sum(costs.macs(layer, shapes[layer.inputs[0]]) for layer in graph.layers
               if isinstance(layer, (g.Conv, g.Dense)))


def _run(session, batch, seed):
    """Bytes, device cycles and the resident segments' rows of one steady-state batch."""
    session.run(None, random_feeds(session, batch, seed))  # the first run loads the image
    session.run(None, random_feeds(session, batch, seed + 1))
    rows = [r for r in session.profile() if r["provider"] != "cpu"]
    return (sum(r.get("bytes", 0) for r in rows), sum(r.get("cycles", 0) for r in rows),
            [r for r in rows if "segment" in r])


def measure(name, path, resident, layered, *, batch):
    """``{figure: value}`` of one model, resident and layer at a time, at ``batch``."""
    res = InferenceSession(path, providers=[resident, "cpu"])
    lat = InferenceSession(path, providers=[layered, "cpu"])
    r_bytes, r_cycles, seg_rows = _run(res, batch, 1)
    l_bytes, l_cycles, _ = _run(lat, batch, 1)
    model = sum(res._segments[row["layer"]].image.run_cycles(batch) for row in seg_rows)
    seg_cycles = sum(row["cycles"] for row in seg_rows)
    return {"io_bytes": _io_bytes(res), "resident_bytes": r_bytes / batch,
            "layered_bytes": l_bytes / batch, "resident_cycles": r_cycles,
            "layered_cycles": l_cycles, "segment_cycles": seg_cycles, "model_cycles": model,
            "segments": len(seg_rows), "macs": _useful_macs(res, batch), "name": name}


def uart_figure(path):
    """Digits images/s on the ulx3s-85f-resident serial twin (the 85F's engine with the
    resident block), resident; or why it cannot run."""
    config = PRESETS.get("ulx3s-85f-resident")
    if config is None or not getattr(config, "resident_words", 0):
        return metric("uart_images_per_second_digits", None, "images/s (device time)",
                      target=f">= {TARGETS['uart_images_per_second_digits']}",
                      note="not measured: no ulx3s-85f-resident preset with a resident "
                           "block, so the serial twin would run layer at a time")
    from sw_driver.providers import UartTwinProvider

    provider = UartTwinProvider(config, baudrate=BAUD)
    try:
        session = InferenceSession(path, providers=[provider, "cpu"])
        _, cycles, seg_rows = _run(session, BATCH, 7)
    finally:
        provider.close()
    if not seg_rows:
        return metric("uart_images_per_second_digits", None, "images/s (device time)",
                      note=f"not measured: the digits CNN did not run resident "
                           f"({'; '.join(provider.resident_notes)})")
    return metric("uart_images_per_second_digits",
                  round(BATCH * SERIAL_TWIN_HZ / cycles), "images/s (device time)",
                  target=f">= {TARGETS['uart_images_per_second_digits']}",
                  note=f"batch {BATCH}, {cycles:,} twin cycles at 50 MHz with bytes paced "
                       f"at {BAUD / 1e6:g} Mbaud")


def main():
    zoo = Path(tempfile.mkdtemp(prefix="bench-resident-"))
    paths = {"digits": str(DIGITS_QDQ), "resnet8": str(random_models.built("resnet8", zoo))}
    resident = SimProvider(CONFIG)
    layered = SimProvider(CONFIG, resident=False)
    results = {name: measure(name, path, resident, layered, batch=BATCH)
               for name, path in paths.items()}
    metrics = []
    for name, r in results.items():
        ratio = r["resident_bytes"] / r["io_bytes"]
        metrics.append(metric(
            f"link_bytes_per_inference_ratio_{name}", round(ratio, 3), "x model I/O bytes",
            peer="layer at a time", peer_value=round(r["layered_bytes"] / r["io_bytes"], 1),
            target=f"<= {TARGETS['link_bytes_per_inference_ratio']}",
            note=f"{r['resident_bytes']:,.0f} bytes resident, {r['layered_bytes']:,.0f} layer "
                 f"at a time, {r['io_bytes']} bytes of model input and output; "
                 f"{r['segments']} resident segment(s), batch {BATCH}, second run"))
    r = results["resnet8"]
    link = costs.LinkModel()
    link_s = (2 * link.transfer_seconds + BATCH * r["resident_bytes"] / link.bytes_per_second
              + RUN_CSR_ACCESSES * link.csr_seconds)
    compute_s = r["resident_cycles"] / DEFAULT_CLOCK_HZ
    metrics.append(metric(
        "end_to_end_over_compute_resnet8_xdma", round((link_s + compute_s) / compute_s, 4),
        "x compute time", target=f"<= {TARGETS['end_to_end_over_compute_resnet8_xdma']}",
        note=f"batch {BATCH}: link {link_s * 1e6:,.0f} us on XDMA's LinkModel, compute "
             f"{compute_s * 1e3:.2f} ms ({r['resident_cycles']:,} twin cycles at "
             f"{DEFAULT_CLOCK_HZ / 1e6:g} MHz)"))
    units = CONFIG.rows * CONFIG.cols
    metrics.append(metric(
        "whole_model_utilization_resident",
        round(r["macs"] / (units * r["resident_cycles"]), 4), "fraction",
        peer="layer at a time", peer_value=round(r["macs"] / (units * r["layered_cycles"]), 4),
        target=f">= {TARGETS['whole_model_utilization_resident']}",
        note=f"ResNet-8 batch {BATCH}: {r['macs']:,} Conv/Dense MACs over {units} MAC units "
             f"and {r['resident_cycles']:,} cycles (the CPU's layers excluded)"))
    errors = {name: abs(r["model_cycles"] - r["segment_cycles"]) / r["segment_cycles"]
              for name, r in results.items()}
    metrics.append(metric(
        "cycle_model_error_resident", round(max(errors.values()), 4), "fraction",
        target=f"<= {TARGETS['cycle_model_error_resident']}",
        note="; ".join(f"{name}: model {results[name]['model_cycles']:,} against twin "
                       f"{results[name]['segment_cycles']:,} cycles" for name in results)))
    metrics.append(uart_figure(paths["digits"]))
    return write_results("resident", metrics, config=CONFIG.as_dict(), batch=BATCH,
                         xdma_clock_hz=DEFAULT_CLOCK_HZ)


if __name__ == "__main__":
    main()
