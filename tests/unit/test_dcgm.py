"""dcgm-exporter's text format parsed: ratios as percent, its blank value as None, MIG
instances skipped."""

from __future__ import annotations

from gputop.sources.dcgm import parse_metrics
from tests.dcgmutil import dcgm_page

BLANK = 9223372036854775794  # what DCGM prints for a field it could not fill


def test_parse_reads_ratios_as_percent_blank_as_none_and_skips_mig_instances() -> None:
    page = dcgm_page(
        {
            "GPU-a": {
                "DCGM_FI_PROF_SM_ACTIVE": 0.42,
                "DCGM_FI_PROF_SM_OCCUPANCY": 0.3,
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": BLANK,
                "DCGM_FI_DEV_GPU_UTIL": 97,
            },
            "GPU-b": {"DCGM_FI_DEV_GPU_UTIL": 50},
        }
    )
    page += (
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="3",GPU_I_PROFILE="1g.10gb"} 0.9\n'
    )
    got = parse_metrics(page)
    assert got == {"GPU-a": {"sm_active": 42.0, "sm_occupancy": 30.0, "tensor_active": None}}
