"""dcgm-exporter's text format, written here for the GPUs and fields a test names."""

from __future__ import annotations


def dcgm_page(gpus: dict[str, dict[str, float]], host: str = "node-1") -> str:
    """A page in dcgm-exporter's format: HELP/TYPE lines, then one series per GPU and
    field with its label set (gpu, UUID, pci_bus_id, device, modelName, Hostname, driver)."""
    fields = sorted({f for values in gpus.values() for f in values})
    lines = []
    for f in fields:
        lines += [f"# HELP {f} gputop test page.", f"# TYPE {f} gauge"]
        for i, (uuid, values) in enumerate(gpus.items()):
            if f not in values:
                continue
            labels = (
                f'gpu="{i}",UUID="{uuid}",pci_bus_id="00000000:{i + 7:02X}:00.0",'
                f'device="nvidia{i}",modelName="NVIDIA A100-SXM4-80GB",Hostname="{host}",'
                'DCGM_FI_DRIVER_VERSION="550.54.15"'
            )
            lines.append(f"{f}{{{labels}}} {values[f]}")
    return "\n".join(lines) + "\n"
