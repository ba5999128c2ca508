"""Exporter conventions for fleets on a frame built here: dcgm-exporter's label names, the
verdict's included, and --host-label on every series."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gputop.export import GPU_LABELS, FrameCollector
from tests.exportutil import FRAME, scrape_collector

# dcgm-exporter's labels on every DCGM_* series (its own metric listing).
DCGM_GPU_LABELS = {"gpu", "UUID", "modelName", "Hostname"}


def test_gpu_series_use_dcgm_exporters_label_names_verdict_included() -> None:
    fams = scrape_collector(FRAME)
    assert set(GPU_LABELS) == DCGM_GPU_LABELS
    gpu_families = [n for n in fams if n.startswith("gputop_gpu_")]
    for name in [*gpu_families, "gputop_verdict"]:
        for s in fams[name]:
            assert DCGM_GPU_LABELS <= set(s.labels), (name, s.labels)
    starving = [s for s in fams["gputop_verdict"] if s.value == 1.0 and s.labels["gpu"] == "0"]
    util = next(s for s in fams["gputop_gpu_utilization_percent"] if s.labels["gpu"] == "0")
    # The same GPU labels: the verdict joins the other GPU series one to one.
    assert {k: starving[0].labels[k] for k in GPU_LABELS} == {k: util.labels[k] for k in GPU_LABELS}


def test_host_label_names_every_series() -> None:
    collector = FrameCollector("node-7")
    collector.update(FRAME)
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    text = generate_latest(reg).decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert samples
    assert {s.labels.get("Hostname") for s in samples} == {"node-7"}
