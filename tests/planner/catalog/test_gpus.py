"""GPU catalog: data file validity, provenance, resolver, hand-checked figures, validator errors."""

from __future__ import annotations

import copy
import json
import re
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferplan.planner.catalog.gpus import (
    FIGURES,
    KERNEL_FIGURES,
    OPTIONAL_FIGURES,
    GpuCatalogError,
    GpuProductLabel,
    load_gpu_catalog,
    parse_gpu_catalog,
    parse_gpu_product,
    resolve_gpu,
)
from inferplan.planner.model.kernels import gpu_kernels, kernel_basis, kernel_meta, profiled_systems, system_tables
from inferplan.planner.names import CatalogLookupError


def _raw_file() -> dict[str, Any]:
    text = resources.files("inferplan.planner").joinpath("data/gpus.json").read_text(encoding="utf-8")
    return json.loads(text)


REQUIRED_KEYS = [
    "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-40GB", "A100-PCIe-80GB",
    "H100-SXM5-80GB", "H100-PCIe-80GB", "H100-NVL-94GB", "H200-SXM-141GB", "H200-NVL-141GB",
    "GH200-96GB-HBM3", "GH200-144GB-HBM3e", "H20-96GB", "B200", "B300-SXM6-AC", "GB200-NVL72", "L40S", "L40",
    "L4", "T4", "A10G", "A10", "A40", "RTX-A6000", "RTX-6000-Ada", "RTX-3080-10GB", "RTX-3090", "RTX-3090-Ti",
    "RTX-4080-16GB", "RTX-4090", "RTX-5090", "MI300X", "MI325X", "MI355X",
]  # fmt: skip

# GFD nvidia.com/gpu.product values, old-driver and in-the-wild names, AMD labeller names -> canonical key.
LABELS = {
    "NVIDIA-H100-80GB-HBM3": "H100-SXM5-80GB",
    "NVIDIA-A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA-A100-SXM4-40GB": "A100-SXM4-40GB",
    "NVIDIA-A100-80GB-PCIe": "A100-PCIe-80GB",
    "NVIDIA-A100-PCIE-40GB": "A100-PCIe-40GB",
    "NVIDIA-H100-PCIe": "H100-PCIe-80GB",
    "NVIDIA-H100-NVL": "H100-NVL-94GB",
    "NVIDIA-H200": "H200-SXM-141GB",
    "NVIDIA-H200-NVL": "H200-NVL-141GB",
    "NVIDIA-GH200-480GB": "GH200-96GB-HBM3",
    "NVIDIA-GH200-144G-HBM3e": "GH200-144GB-HBM3e",
    "NVIDIA-L40S": "L40S",
    "NVIDIA-L40": "L40",
    "NVIDIA-A40": "A40",
    "NVIDIA-RTX-A6000": "RTX-A6000",
    "NVIDIA-RTX-6000-Ada-Generation": "RTX-6000-Ada",
    "NVIDIA-GeForce-RTX-3090": "RTX-3090",
    "NVIDIA-GeForce-RTX-3090-Ti": "RTX-3090-Ti",
    "NVIDIA-GeForce-RTX-4090": "RTX-4090",
    "NVIDIA-GeForce-RTX-4080": "RTX-4080-16GB",
    "NVIDIA-GeForce-RTX-3080": "RTX-3080-10GB",
    "NVIDIA-GeForce-RTX-5090": "RTX-5090",
    "Tesla-T4": "T4",
    "NVIDIA-A10G": "A10G",
    "NVIDIA-A10": "A10",
    "NVIDIA-L4": "L4",
    "NVIDIA-B200": "B200",
    "NVIDIA-B300-SXM6-AC": "B300-SXM6-AC",
    "NVIDIA-GB200": "GB200-NVL72",
    "NVIDIA-H20": "H20-96GB",
    "A100-SXM4-40GB": "A100-SXM4-40GB",
    "NVIDIA-A100-PCIE-80GB": "A100-PCIe-80GB",
    "NVIDIA-H100-SXM5-80GB": "H100-SXM5-80GB",
    "AMD_Instinct_MI300X_OAM": "MI300X",
    "AMD-Instinct-MI300X": "MI300X",
    "AMD-Instinct-MI325X": "MI325X",
    "AMD_Instinct_MI355_OAM": "MI355X",
    "AMD-Instinct-MI355X": "MI355X",
}

MARKETING = {
    "H100": "H100-SXM5-80GB",
    "H100 SXM": "H100-SXM5-80GB",
    "H100 80GB": "H100-SXM5-80GB",
    "H100 PCIe": "H100-PCIe-80GB",
    "A100": "A100-SXM4-80GB",  # documented default variant
    "A100 80GB": "A100-SXM4-80GB",
    "A100 40GB": "A100-SXM4-40GB",
    "A100 PCIe": "A100-PCIe-80GB",
    "H200": "H200-SXM-141GB",
    "GH200": "GH200-96GB-HBM3",
    "RTX 4090": "RTX-4090",
    "GeForce RTX 4090": "RTX-4090",
    "4090": "RTX-4090",
    "RTX 3090 Ti": "RTX-3090-Ti",
    "RTX 6000 Ada": "RTX-6000-Ada",
    "A6000": "RTX-A6000",
    "MI300X": "MI300X",
    "MI325X": "MI325X",
    "L40S": "L40S",
    "L40": "L40",
    "L4": "L4",
    "T4": "T4",
    "A10": "A10",
    "A10G": "A10G",
    "B200": "B200",
    "B300": "B300-SXM6-AC",
    "HGX B300": "B300-SXM6-AC",
    "GB200": "GB200-NVL72",
    "GB200 NVL72": "GB200-NVL72",
    "H20": "H20-96GB",
    "H20 96GB": "H20-96GB",
    "MI355X": "MI355X",
}


# ---------------------------------------------------------------------------------------------------------
# The packaged catalog


def test_catalog_has_every_required_gpu() -> None:
    catalog = load_gpu_catalog()
    keys = [spec.key for spec in catalog]
    assert sorted(keys) == sorted(REQUIRED_KEYS)
    assert len(catalog) == len(REQUIRED_KEYS)
    assert load_gpu_catalog() is catalog  # cached


def test_every_figure_has_dated_provenance() -> None:
    """Every required and nullable figure, and the published kernel figures a GPU states (only those), has its
    sources, a status and the date of its first source."""
    catalog = load_gpu_catalog()
    stated_kernel_figures = 0
    for spec in catalog:
        provenance = catalog.provenance(spec.key)
        kernel = set(provenance) - set(FIGURES) - set(OPTIONAL_FIGURES)
        assert set(provenance) >= set(FIGURES) and kernel <= set(KERNEL_FIGURES), spec.key
        assert ("fp4_tflops" in provenance) == (spec.fp4_tflops is not None), spec.key
        assert kernel == {name for name, _ in spec.kernel_figures}, spec.key
        stated_kernel_figures += len(kernel)
        for field, figure in provenance.items():
            assert figure.sources, (spec.key, field)
            assert figure.status in ("sourced", "unverified"), (spec.key, field)
            assert figure.as_of == figure.sources[0].as_of, (spec.key, field)
            assert date.fromisoformat(figure.as_of) <= date(2026, 12, 31), (spec.key, field)
            for source in figure.sources:
                assert source.url or source.description, (spec.key, field, source.id)
    assert stated_kernel_figures >= 12  # MI300X and MI325X state all six


def test_published_kernel_figures_are_shares_of_the_catalogs_own_peaks() -> None:
    """Efficiencies are fractions of the GPU's rated figures (at most 1); all-reduce figures are positive and within
    the GPU's links; only GPUs without AIConfigurator tables of their own state them (their tables supersede them)."""
    for spec in load_gpu_catalog():
        figures = dict(spec.kernel_figures)
        if not figures:
            continue
        assert not spec.kernel_tables_own, spec.key
        for name, value in figures.items():
            assert value > 0, (spec.key, name)
            if name.endswith("_efficiency"):
                assert value <= 1.0, (spec.key, name)
        if "allreduce_busbw_gb_s" in figures:  # a bus cannot beat its links
            assert figures["allreduce_busbw_gb_s"] <= spec.interconnect_gb_s, spec.key
    assert set(dict(resolve_gpu("MI300X").kernel_figures)) == set(KERNEL_FIGURES)


def test_kernel_tables_cite_the_source_of_the_tables() -> None:
    """The GPUs that read AIConfigurator's tables rest on the catalog's `aiconfigurator-kernels` source, which
    points where data/kernels/meta.json says they were derived from."""
    data = _raw_file()
    source = data["sources"]["aiconfigurator-kernels"]
    assert source["url"] in kernel_meta()["source"]
    assert any(g.get("kernel_tables") for g in data["gpus"])
    for gpu in data["gpus"]:
        if gpu.get("kernel_tables"):
            assert gpu["kernel_tables"]["system"] in profiled_systems(), gpu["key"]
            assert gpu["kernel_tables"]["note"], gpu["key"]


def test_unverified_fields_are_listed() -> None:
    catalog = load_gpu_catalog()
    for spec in catalog:
        provenance = catalog.provenance(spec.key)
        spec_field = {"memory_mib": "memory_bytes", "cuda_total_mib": "cuda_total_bytes"}
        expected = {
            spec_field.get(field, field)
            for field, figure in provenance.items()
            if figure.status == "unverified"
        }
        assert set(spec.unverified_fields) == expected, spec.key
    # Gaps the facts list, filled from the author's knowledge, are flagged.
    assert {"memory_bandwidth_gb_s", "fp16_tflops", "fp8_tflops", "tdp_w"} <= set(
        resolve_gpu("RTX 6000 Ada").unverified_fields
    )
    assert "fp16_tflops" in resolve_gpu("RTX 3090").unverified_fields


def test_engines_see_less_memory_than_nvml_reports() -> None:
    for spec in load_gpu_catalog():
        assert 0.95 * spec.memory_bytes <= spec.usable_memory_bytes <= spec.memory_bytes, spec.key
    # PyTorch reports "79.15 GiB total capacity" on an A100 80GB whose NVML total is 81920 MiB.
    assert resolve_gpu("NVIDIA-A100-SXM4-80GB").usable_memory_bytes / 2**30 == pytest.approx(79.15, abs=0.01)
    assert "memory_bytes" in resolve_gpu("H100").unverified_fields  # 81559 MiB is not in the facts
    assert "memory_bytes" not in resolve_gpu("A100 80GB").unverified_fields  # 81920 MiB is sourced


def test_every_source_is_used_and_dated() -> None:
    """Every source backs a figure, or (aiconfigurator-kernels) the kernel tables GPUs read; each has a date."""
    data = _raw_file()
    used = {s for gpu in data["gpus"] for figure in gpu["figures"].values() for s in figure["sources"]}
    if any(gpu.get("kernel_tables") for gpu in data["gpus"]):
        used.add("aiconfigurator-kernels")
    assert used == set(data["sources"])
    for key, source in data["sources"].items():
        assert date.fromisoformat(source["as_of"]), key


def test_data_file_is_ascii() -> None:
    text = resources.files("inferplan.planner").joinpath("data/gpus.json").read_text(encoding="utf-8")
    assert text.isascii()


def test_field_ranges_and_enums() -> None:
    for spec in load_gpu_catalog():
        assert spec.vendor in ("nvidia", "amd")
        assert spec.family in ("turing", "ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4")
        assert spec.segment in ("datacenter", "workstation", "consumer")
        assert spec.interconnect in ("nvlink", "xgmi", "pcie")
        assert spec.memory_bytes > 0 and spec.memory_bytes % 2**20 == 0
        assert spec.memory_bandwidth_gb_s > 0 and spec.fp16_tflops > 0 and spec.interconnect_gb_s > 0
        assert spec.usd_per_hour > 0
        assert spec.key in spec.names
        if spec.interconnect == "pcie":
            assert spec.interconnect_gb_s == spec.pcie_gb_s
        if spec.fp4_tflops is not None:  # FP4 runs at least at the FP8 rate where a GPU has it
            assert spec.family in ("blackwell", "cdna4") and spec.fp8_tflops, spec.key
            assert spec.fp4_tflops >= spec.fp8_tflops, spec.key
        if spec.nvlink_domain_gpus is not None:
            assert spec.interconnect == "nvlink" and spec.nvlink_domain_gpus > spec.gpus_per_node, spec.key


# ---------------------------------------------------------------------------------------------------------
# Hand-checked figures


def test_h100_sxm_figures() -> None:
    h100 = resolve_gpu("NVIDIA-H100-80GB-HBM3")
    assert h100.key == "H100-SXM5-80GB"
    assert h100.memory_bandwidth_gb_s == 3350
    assert h100.fp16_tflops == 989
    assert h100.fp8_tflops == 1979
    assert h100.memory_bytes == 81559 * 2**20
    assert h100.interconnect == "nvlink" and h100.interconnect_gb_s == 450
    assert h100.usd_per_hour == 2.95 and h100.price_as_of == "2026-05-20"


def test_memory_as_reported() -> None:
    assert resolve_gpu("A100 80GB").memory_bytes == 80 * 2**30
    assert resolve_gpu("A100-SXM4-40GB").memory_bytes == 40 * 2**30
    assert resolve_gpu("NVIDIA-H200").memory_bytes == 143771 * 2**20
    assert resolve_gpu("L40S").memory_bytes == 46068 * 2**20
    assert resolve_gpu("L4").memory_bytes == 23034 * 2**20
    assert resolve_gpu("T4").memory_bytes == 15360 * 2**20
    assert resolve_gpu("RTX 4090").memory_bytes == 24564 * 2**20
    assert resolve_gpu("RTX 3090").memory_bytes == 24576 * 2**20
    assert resolve_gpu("MI300X").memory_bytes == 196592 * 2**20
    assert resolve_gpu("A100 80GB").memory_gib == 80.0


def test_fp8_only_where_supported() -> None:
    assert resolve_gpu("T4").fp8_tflops is None
    assert resolve_gpu("A100").fp8_tflops is None
    assert resolve_gpu("RTX 3090").fp8_tflops is None
    assert resolve_gpu("L40S").fp8_tflops == 733
    assert resolve_gpu("MI300X").fp8_tflops == 2610
    assert resolve_gpu("B200").fp8_tflops == 4500


def test_geforce_fp16_is_the_fp32_accumulate_rate() -> None:
    assert resolve_gpu("RTX 4090").fp16_tflops == pytest.approx(165.2)
    assert resolve_gpu("RTX 3090").fp16_tflops == pytest.approx(71)
    assert resolve_gpu("RTX 3080").fp16_tflops == pytest.approx(59.5)
    assert resolve_gpu("RTX 3090 Ti").fp16_tflops == pytest.approx(80)
    assert resolve_gpu("RTX 4080").fp16_tflops == pytest.approx(97.5)


def test_gap_fills() -> None:
    ada = resolve_gpu("NVIDIA-RTX-6000-Ada-Generation")
    assert (ada.memory_bandwidth_gb_s, ada.fp16_tflops, ada.fp8_tflops, ada.tdp_w) == (960, 364, 728, 300)
    assert resolve_gpu("RTX 4080").memory_bandwidth_gb_s == pytest.approx(716.8)
    ti = resolve_gpu("RTX 3090 Ti")
    assert (ti.memory_bandwidth_gb_s, ti.memory_gb, ti.tdp_w) == (1008, 24, 450)


def test_prices_from_quotes_and_estimates() -> None:
    assert resolve_gpu("MI300X").usd_per_hour == 1.99
    assert resolve_gpu("A10G").usd_per_hour == pytest.approx(1.006)
    estimate = resolve_gpu("RTX 4090")
    assert "usd_per_hour" in estimate.unverified_fields and estimate.price_as_of


# ---------------------------------------------------------------------------------------------------------
# The catalog against the sourced facts it was copied from (shared/catalog-facts beside the clone)

FACTS = Path(__file__).resolve().parents[4] / "shared" / "catalog-facts"
# facts field -> catalog figure
FACT_FIGURES = {
    "memory_gb": "memory_gb",
    "memory_bandwidth_gbps": "memory_bandwidth_gb_s",
    "fp16_bf16_tensor_dense_tflops": "fp16_tflops",
    "fp8_tensor_dense_tflops": "fp8_tflops",
    "int8_tensor_dense_tops": "int8_tops",
    "fp4_tensor_dense_tflops": "fp4_tflops",
    "tdp_w": "tdp_w",
}
# Where the catalog keeps another figure than the facts' headline, on purpose; each is flagged unverified and its
# note says why.
DEPARTURES = {
    # The facts halve the sparse figure with the accumulate mode unknown; the catalog's figures are FP32
    # accumulate, which GeForce runs at half rate (the RTX 4090's 165.2 / 330.3).
    ("RTX-5090", "fp16_tflops"),
    ("RTX-5090", "fp8_tflops"),
    # aiconfigurator's HGX figure (the facts' alt), the one its measured B300 tables were taken with.
    ("B300-SXM6-AC", "memory_bandwidth_gb_s"),
}


def _facts(name: str) -> Any:
    path = FACTS / name
    if not path.exists():
        pytest.skip("shared/catalog-facts is not beside this clone")
    return json.loads(path.read_text(encoding="utf-8"))


def _facts_date(as_of: str) -> str:
    """A quote's date as the catalog dates it: a month alone is its 1st, a year alone its 1 January."""
    return (as_of + "-01-01")[:10] if len(as_of) == 4 else (as_of + "-01")[:10]


def test_every_gpu_agrees_with_the_catalog_facts() -> None:
    """Each GPU of the facts resolves by its name and node labels; its memory, bandwidth, dense throughput and TDP
    are the facts' (or a departure above, flagged); a figure the facts doubt or leave out is unverified here; the
    reported MiB is one the facts read or is unverified; a scale-up bandwidth per direction the facts state is the
    catalog's, sourced."""
    catalog = load_gpu_catalog()
    raw = {gpu["key"]: gpu for gpu in _raw_file()["gpus"]}
    facts = _facts("gpus.json")
    assert len(facts) == len(catalog)
    for fact in facts:
        spec = resolve_gpu(fact["name"])
        key = spec.key
        provenance = catalog.provenance(key)
        labels = [label for label in fact["k8s_labels"] if label["key"] != "amd.com/gpu.vram"
                  and label["key"] in ("nvidia.com/gpu.product", "amd.com/gpu.product-name", "amd.com/gpu.device-id")]
        for label in labels:
            assert resolve_gpu(label["value"]) is spec, (key, label["value"])
        products = [label["value"] for label in labels if label["key"] != "amd.com/gpu.device-id"]
        assert spec.product_label == products[0], key
        doubted = {FACT_FIGURES.get(re.split(r"[ (]", entry)[0]) for entry in fact["unverified_or_missing_fields"]}
        for field, figure in FACT_FIGURES.items():
            stated = fact.get(field)
            value = raw[key]["figures"].get(figure, {}).get("value")
            status = provenance[figure].status if figure in provenance else None
            if (key, figure) in DEPARTURES or stated is None or figure in doubted:
                assert value is None or status == "unverified", (key, figure, value, stated)
            if (key, figure) not in DEPARTURES and stated is not None:
                assert value == pytest.approx(stated), (key, figure, value, stated)
        mib = [reading["value"] for reading in fact["memory_mib_reported"] or []]
        if mib:
            assert raw[key]["figures"]["memory_mib"]["value"] in mib or provenance["memory_mib"].status == "unverified"
        # The link all-reduce uses, per GPU and direction, where the facts state it (NVLink, xGMI, PCIe).
        link = re.search(r"([\d.]+) GB/s per (?:GPU )?(?:per )?direction", fact["interconnect"] or "")
        if link:
            assert spec.interconnect_gb_s == float(link.group(1)), key
            assert provenance["interconnect_gb_s"].status == "sourced", key


def test_every_price_is_the_facts_default_with_its_source_and_date() -> None:
    """A GPU the price facts quote costs their default, cited to the quote's page and dated as it; a GPU without a
    default (GB200: per Superchip only) or without quotes carries an estimate, flagged unverified."""
    catalog = load_gpu_catalog()
    quoted = set()
    for entry in _facts("prices.json")["gpus"]:
        spec = resolve_gpu(entry["gpu"])
        quoted.add(spec.key)
        price = catalog.provenance(spec.key)["usd_per_hour"]
        default = entry["default_usd_per_gpu_hour"]
        if default is None:
            assert price.status == "unverified", spec.key
            continue
        quote = next(q for q in entry["quotes"] if q["usd_per_gpu_hour"] == default
                     or str(q["usd_per_gpu_hour"]).startswith(f"{default:.2f}-"))
        assert spec.usd_per_hour == default and price.status == "sourced", spec.key
        assert price.sources[0].url == quote["source"], spec.key
        assert spec.price_as_of == _facts_date(quote["as_of"]), spec.key
    for spec in catalog:
        if spec.key not in quoted:
            assert "usd_per_hour" in spec.unverified_fields, spec.key


# GPUs added from the facts of 2026-12-03: each resolves by its node label and common names, states its sourced
# figures and price, and says what its kernel times rest on.


def _system_peaks(system: str) -> dict[str, float]:
    return system_tables(system)["peaks"]


def test_b300_figures_and_its_own_measured_kernels() -> None:
    b300 = resolve_gpu("NVIDIA-B300-SXM6-AC")
    assert b300.key == "B300-SXM6-AC" and resolve_gpu("B300") is b300 and resolve_gpu("nvidia b300 sxm6 ac") is b300
    assert (b300.family, b300.product_label, b300.gpus_per_node) == ("blackwell", "NVIDIA-B300-SXM6-AC", 8)
    assert b300.memory_bytes == 275040 * 2**20 and b300.memory_gb == 288  # nvidia-smi MiB, per aiconfigurator
    assert (b300.memory_bandwidth_gb_s, b300.fp16_tflops, b300.fp8_tflops, b300.int8_tops, b300.fp4_tflops) == (
        7750, 2250, 4500, 153.5, 14000)
    assert (b300.interconnect, b300.interconnect_gb_s, b300.nvlink_domain_gpus) == ("nvlink", 900, None)
    assert (b300.usd_per_hour, b300.price_as_of) == (5.0, "2026-01-01")
    # The figures the sources disagree on say so (the bandwidth: 7750 HGX, 8000 DGX); the memory and the peaks do not.
    assert {"memory_bandwidth_gb_s", "int8_tops", "fp4_tflops", "pcie_gb_s"} <= set(b300.unverified_fields)
    assert not {"memory_bytes", "fp16_tflops", "fp8_tflops"} & set(b300.unverified_fields)
    basis = kernel_basis(b300)
    assert (basis.kind, basis.system) == ("measured", "b300_sxm")
    peaks = _system_peaks("b300_sxm")  # the catalog's figures are the ones its measured tables were taken with
    assert (peaks["mem_bw_gb_s"], peaks["bf16_tflops"], peaks["fp8_tflops"], peaks["fp4_tflops"]) == (
        b300.memory_bandwidth_gb_s, b300.fp16_tflops, b300.fp8_tflops, b300.fp4_tflops)


def test_gb200_is_per_gpu_in_trays_of_four_with_one_nvlink_domain_of_72() -> None:
    gb200 = resolve_gpu("NVIDIA-GB200")
    assert gb200.key == "GB200-NVL72" and resolve_gpu("GB200") is gb200 and resolve_gpu("GB200 NVL72") is gb200
    assert gb200.memory_bytes == 189471 * 2**20 and gb200.memory_gb == 186
    assert (gb200.memory_bandwidth_gb_s, gb200.fp16_tflops, gb200.fp8_tflops, gb200.int8_tops,
            gb200.fp4_tflops) == (8000, 2500, 5000, 5000, 10000)
    assert (gb200.gpus_per_node, gb200.nvlink_domain_gpus, gb200.interconnect_gb_s) == (4, 72, 900)
    assert gb200.link_domain_gpus(4) == 72 and gb200.link_domain_gpus(8) == 72
    assert resolve_gpu("B200").link_domain_gpus(8) == 8 and resolve_gpu("B200").link_domain_gpus(4) == 4
    # No per-GPU quote exists: a Superchip's (2 GPUs and a Grace CPU), halved, and flagged as such.
    assert gb200.usd_per_hour == pytest.approx(9.08 / 2) and "usd_per_hour" in gb200.unverified_fields
    assert "tdp_w" in gb200.unverified_fields
    basis = kernel_basis(gb200)
    assert (basis.kind, basis.system) == ("measured", "gb200")
    peaks = _system_peaks("gb200")
    assert (peaks["mem_bw_gb_s"], peaks["bf16_tflops"], peaks["fp8_tflops"], peaks["fp4_tflops"]) == (
        gb200.memory_bandwidth_gb_s, gb200.fp16_tflops, gb200.fp8_tflops, gb200.fp4_tflops)


def test_h20_scales_the_h100s_kernels_to_its_own_peaks() -> None:
    """The H20 is the GH100 die with a fraction of the H100's tensor throughput and more bandwidth: on the H100's
    tables scaled to its peaks, a compute-bound GEMM takes the ratio of the peaks longer, a weight read less."""
    h20, h100 = resolve_gpu("NVIDIA-H20"), resolve_gpu("H100")
    assert h20.key == "H20-96GB" and resolve_gpu("H20") is h20 and resolve_gpu("H20 96GB") is h20
    assert (h20.family, h20.product_label, h20.memory_gb) == ("hopper", "NVIDIA-H20", 96)
    assert (h20.memory_bandwidth_gb_s, h20.fp16_tflops, h20.fp8_tflops, h20.int8_tops) == (4000, 148, 296, 296)
    assert (h20.interconnect, h20.interconnect_gb_s, h20.sm_count, h20.tdp_w) == ("nvlink", 450, 78, 400)
    assert h20.usd_per_hour > 0 and "usd_per_hour" in h20.unverified_fields
    # Third-party figures only (the facts rate them low): flagged, so a plan on the H20 warns.
    assert {"memory_bandwidth_gb_s", "fp16_tflops", "fp8_tflops"} <= set(h20.unverified_fields)
    basis = kernel_basis(h20)
    assert (basis.kind, basis.system) == ("scaled", "h100_sxm") and h20.display_name in basis.note
    slow, fast = gpu_kernels(h20, "vllm"), gpu_kernels(h100, "vllm")
    assert slow.gemm_s("bfloat16", 8192, 8192, 8192) / fast.gemm_s("bfloat16", 8192, 8192, 8192) == pytest.approx(
        989 / 148, rel=0.02)
    assert slow.gemm_s("bfloat16", 1, 8192, 8192) < fast.gemm_s("bfloat16", 1, 8192, 8192)
    # It takes no name of the H200, nor the 141 GB H20-3e's label.
    assert resolve_gpu("H200").key == "H200-SXM-141GB"
    with pytest.raises(CatalogLookupError):
        resolve_gpu("NVIDIA-H20-3e")


def test_mi355x_rests_on_its_published_gemm_figures_and_the_defaults_for_the_rest() -> None:
    mi355x = resolve_gpu("AMD_Instinct_MI355_OAM")
    assert mi355x.key == "MI355X"
    for name in ("MI355X", "AMD-Instinct-MI355X", "amd instinct mi355x", "0x75a3"):
        assert resolve_gpu(name) is mi355x, name
    assert (mi355x.vendor, mi355x.family, mi355x.product_label_key) == ("amd", "cdna4", "amd.com/gpu.product-name")
    assert mi355x.memory_gb == 288 and mi355x.memory_gib == pytest.approx(288, abs=0.1)
    assert (mi355x.memory_bandwidth_gb_s, mi355x.fp16_tflops, mi355x.fp8_tflops, mi355x.int8_tops,
            mi355x.fp4_tflops) == (8000, 2500, 5000, 5000, 10100)
    assert (mi355x.interconnect, mi355x.interconnect_gb_s, mi355x.tdp_w) == ("xgmi", 535.5, 1400)
    assert mi355x.usd_per_hour > 0 and "usd_per_hour" in mi355x.unverified_fields
    # Only what was published: MAMF 1565 TFLOPS BF16 and hipBLASLt 3130 TFLOPS FP8, as shares of the catalog peaks.
    figures = dict(mi355x.kernel_figures)
    assert figures == {"gemm_bf16_efficiency": 0.626, "gemm_fp8_efficiency": 0.626}
    assert figures["gemm_bf16_efficiency"] * mi355x.fp16_tflops == pytest.approx(1565.0, rel=1e-3)
    assert figures["gemm_fp8_efficiency"] * mi355x.fp8_tflops == pytest.approx(3130.2, rel=1e-3)
    basis = kernel_basis(mi355x)
    assert (basis.kind, basis.system) == ("published", None) and mi355x.display_name in basis.note
    kernels = gpu_kernels(mi355x, "vllm")
    reached = 2.0 * 8192**3 / float(kernels.gemm_s("bfloat16", 8192, 8192, 8192)) / (mi355x.fp16_tflops * 1e12)
    assert 0.55 < reached <= figures["gemm_bf16_efficiency"]
    # No single-node all-reduce was published: none is made up, the links' rated figures serve instead.
    assert kernels.allreduce_s(np.array([2.0**20]), 8) is None


def test_fp4_peaks_where_the_facts_give_them() -> None:
    """Dense FP4 (NVFP4 / MXFP4) for the Blackwell datacenter GPUs and the MI355X; None elsewhere."""
    fp4 = {spec.key: spec.fp4_tflops for spec in load_gpu_catalog() if spec.fp4_tflops is not None}
    assert fp4 == {"B200": 9000, "B300-SXM6-AC": 14000, "GB200-NVL72": 10000, "MI355X": 10100}
    assert resolve_gpu("H100").fp4_tflops is None and resolve_gpu("MI300X").fp4_tflops is None


def test_a_gb200_replica_over_trays_all_reduces_over_nvlink_not_the_network() -> None:
    """TP 8 spans two nodes of 4 GPUs either way, but on GB200 both trays are in the rack's NVLink domain: the
    replica keeps NVLink's all-reduce (GB200's tables stop at one tray of 4: an HGX B200's measured 8-GPU curve,
    the same NVLink 5 switches), where on B200 nodes of 4 it crosses the NICs; pipeline stages on GB200 trays send
    over NVLink too."""
    from inferplan.planner.catalog.engines import ENGINES
    from inferplan.planner.model.disaggregated import LINK_EFFICIENCY
    from inferplan.planner.model.factors import load_factors
    from inferplan.planner.model.performance import ALLREDUCE_LATENCY_S
    from inferplan.planner.request import resolve_plan
    from inferplan.planner.search.grid import INTER_NODE_ALLREDUCE_LATENCY_S, _grid, link_domain_gpus
    from inferplan.planner.spec_parsing import parse_plan
    from tests.support.plans import spec

    req = resolve_plan(parse_plan(spec(gpuTypes=["NVIDIA-GB200", "NVIDIA-B200"], tensorParallelSizes=[4, 8],
                                       maxNodesPerReplica=2, gpusPerNode={"NVIDIA-B200": 4})))
    assert link_domain_gpus(req, resolve_gpu("GB200")) == 72 and link_domain_gpus(req, resolve_gpu("B200")) == 4
    grid = _grid(req, ENGINES["vllm"], load_factors())
    keys = np.array([grid.gpus[g].key for g in grid.gpu])

    def row(key: str, tp: int, pp: int) -> int:
        (index,) = np.flatnonzero((keys == key) & (grid.tp == tp) & (grid.pp == pp) & ~grid.dp)
        return int(index)

    hw = grid.hardware
    nic = req.network_gbps * 1e9 / 8.0 * LINK_EFFICIENCY
    gb200, b200 = row("GB200-NVL72", 8, 1), row("B200", 8, 1)
    from inferplan.planner.catalog.precisions import weight_precision
    from inferplan.planner.model.performance import build_hardware

    eight = build_hardware(req.arch, resolve_gpu("B200"), weight_precision("bf16"), 2.0, ENGINES["vllm"],
                           load_factors().engine("vllm"), 8)
    assert hw.link_bytes_s[gb200] == pytest.approx(float(eight.link_bytes_s))
    assert hw.link_latency_s[gb200] == pytest.approx(float(eight.link_latency_s))
    assert nic < hw.link_bytes_s[gb200] < 900e9 and hw.link_latency_s[gb200] < ALLREDUCE_LATENCY_S["nvlink"]
    assert hw.link_bytes_s[b200] <= nic and hw.link_latency_s[b200] == INTER_NODE_ALLREDUCE_LATENCY_S
    staged, crossing = row("GB200-NVL72", 4, 2), row("B200", 4, 2)
    assert hw.stage_send_latency_s[staged] < hw.stage_send_latency_s[crossing] == 0.5 * INTER_NODE_ALLREDUCE_LATENCY_S
    assert hw.stage_send_s_per_token[staged] < hw.stage_send_s_per_token[crossing]


def test_gpt_oss_120b_plans_on_gb200() -> None:
    from inferplan.planner.request import resolve_plan
    from inferplan.planner.search.plan import plan
    from inferplan.planner.spec_parsing import parse_plan
    from tests.support.plans import spec

    data = spec(gpuTypes=["NVIDIA-GB200"])
    data["model"] = {"name": "openai/gpt-oss-120b", "precisions": ["mxfp4"]}
    rec = plan(resolve_plan(parse_plan(data))).recommendation
    assert rec is not None and rec.gpu_type == "GB200-NVL72"
    assert rec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-GB200"}


def test_price_is_overridable() -> None:
    catalog = load_gpu_catalog()
    h100 = catalog.resolve("H100")
    cheaper = h100.with_price(1.75, "2026-11-01")
    assert (cheaper.usd_per_hour, cheaper.price_as_of) == (1.75, "2026-11-01")
    assert h100.usd_per_hour == 2.95  # frozen original untouched
    est = catalog.resolve("RTX 4090").with_price(0.4, "2026-11-01")
    assert "usd_per_hour" not in est.unverified_fields
    repriced = catalog.with_prices({"NVIDIA-L4": 0.5}, as_of="2026-11-02")
    assert repriced.get("L4").usd_per_hour == 0.5
    assert catalog.get("L4").usd_per_hour == pytest.approx(0.7992)
    with pytest.raises(ValueError, match="positive"):
        h100.with_price(0)


# ---------------------------------------------------------------------------------------------------------
# Resolver


@pytest.mark.parametrize(("label", "key"), sorted(LABELS.items()))
def test_labels_resolve(label: str, key: str) -> None:
    assert resolve_gpu(label).key == key


@pytest.mark.parametrize(("name", "key"), sorted(MARKETING.items()))
def test_marketing_names_resolve(name: str, key: str) -> None:
    assert resolve_gpu(name).key == key


def test_scenario_gpu_names_resolve() -> None:
    """Every `gpu` value the accuracy scenarios use (SCENARIOS.md enum) resolves."""
    scenario_names = {
        "NVIDIA-A100-SXM4-80GB": "A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB": "A100-SXM4-40GB",
        "NVIDIA-A100-80GB-PCIe": "A100-PCIe-80GB", "NVIDIA-H100-80GB-HBM3": "H100-SXM5-80GB",
        "NVIDIA-H100-PCIe": "H100-PCIe-80GB", "NVIDIA-H200": "H200-SXM-141GB",
        "NVIDIA-GH200-480GB": "GH200-96GB-HBM3", "NVIDIA-L40S": "L40S", "NVIDIA-A40": "A40",
        "NVIDIA-RTX-A6000": "RTX-A6000", "NVIDIA-RTX-6000-Ada-Generation": "RTX-6000-Ada",
        "NVIDIA-GeForce-RTX-3090": "RTX-3090", "NVIDIA-GeForce-RTX-3090-Ti": "RTX-3090-Ti",
        "NVIDIA-GeForce-RTX-4090": "RTX-4090", "NVIDIA-GeForce-RTX-4080": "RTX-4080-16GB",
        "NVIDIA-GeForce-RTX-3080": "RTX-3080-10GB", "AMD-Instinct-MI300X": "MI300X",
    }  # fmt: skip
    for name, key in scenario_names.items():
        assert resolve_gpu(name).key == key, name


def test_case_and_separators_ignored() -> None:
    assert resolve_gpu("nvidia_h100_80gb_hbm3").key == "H100-SXM5-80GB"
    assert resolve_gpu("NVIDIA H100 80GB HBM3").key == "H100-SXM5-80GB"
    assert resolve_gpu("tesla t4").key == "T4"
    assert resolve_gpu("amd instinct mi300x oam").key == "MI300X"
    assert resolve_gpu("h100-sxm5-80gb").key == "H100-SXM5-80GB"


def test_keys_and_display_names_resolve() -> None:
    catalog = load_gpu_catalog()
    for spec in catalog:
        assert catalog.resolve(spec.key) is spec
        assert catalog.resolve(spec.display_name) is spec
        assert catalog.get(spec.key) is spec
        for name in spec.names:
            assert catalog.resolve(name) is spec, name


@pytest.mark.parametrize(
    ("label", "parsed"),
    [
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", GpuProductLabel("NVIDIA-A100-SXM4-40GB", "1g.5gb", False)),
        ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", GpuProductLabel("NVIDIA-A100-SXM4-80GB", "3g.40gb", False)),
        (
            "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb+me",
            GpuProductLabel("NVIDIA-H100-80GB-HBM3", "1g.10gb+me", False),
        ),
        (
            "NVIDIA-A100-SXM4-40GB-MIG-1c.2g.10gb",
            GpuProductLabel("NVIDIA-A100-SXM4-40GB", "1c.2g.10gb", False),
        ),
        ("NVIDIA-L4-SHARED", GpuProductLabel("NVIDIA-L4", None, True)),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", GpuProductLabel("NVIDIA-A100-SXM4-40GB", "1g.5gb", True)),
        ("Tesla-T4", GpuProductLabel("Tesla-T4", None, False)),
    ],
)
def test_parse_gpu_product(label: str, parsed: GpuProductLabel) -> None:
    assert parse_gpu_product(label) == parsed


def test_suffixed_labels_resolve_to_the_base_gpu() -> None:
    assert resolve_gpu("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb").key == "A100-SXM4-40GB"
    assert resolve_gpu("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED").key == "A100-SXM4-40GB"
    assert resolve_gpu("NVIDIA-H100-80GB-HBM3-SHARED").key == "H100-SXM5-80GB"
    assert resolve_gpu("nvidia_l4_shared").key == "L4"


def test_amd_device_ids() -> None:
    assert resolve_gpu("74a1").key == "MI300X"
    assert resolve_gpu("0x74A5").key == "MI325X"
    assert resolve_gpu("75a3").key == "MI355X"


def test_ambiguous_device_id_is_refused() -> None:
    data = _raw_file()
    mi325 = next(gpu for gpu in data["gpus"] if gpu["key"] == "MI325X")
    mi325["device_ids"] = ["74a1"]  # now both AMD entries claim it
    catalog = parse_gpu_catalog(data)
    with pytest.raises(CatalogLookupError) as info:
        catalog.resolve("74a1")
    assert set(info.value.suggestions) == {"MI300X", "MI325X"}


def test_unknown_name_lists_close_entries() -> None:
    with pytest.raises(CatalogLookupError) as info:
        resolve_gpu("H1000")
    assert info.value.kind == "GPU" and info.value.name == "H1000"
    assert "H100-SXM5-80GB" in info.value.suggestions
    assert "H100-SXM5-80GB" in str(info.value)
    with pytest.raises(CatalogLookupError):
        resolve_gpu("RTX 6000")  # ambiguous between RTX A6000 and RTX 6000 Ada: no default
    with pytest.raises(CatalogLookupError):
        load_gpu_catalog().get("h100-sxm5-80gb")  # get() takes the exact key only


_SEPARATORS = st.sampled_from(["", "-", "_", " ", ".", "/", "--", " _ "])


@st.composite
def _mangled(draw: st.DrawFn, label: str) -> str:
    out = []
    for char in label:
        if not char.isalnum():
            out.append(draw(_SEPARATORS))
            continue
        out.append(char.upper() if draw(st.booleans()) else char.lower())
        if draw(st.integers(0, 5)) == 0:
            out.append(draw(_SEPARATORS))
    return "".join(out)


@given(st.data(), st.sampled_from(sorted(LABELS)))
def test_mangled_labels_resolve_to_the_same_gpu(data: st.DataObject, label: str) -> None:
    mangled = data.draw(_mangled(label))
    assert resolve_gpu(mangled).key == LABELS[label]


# ---------------------------------------------------------------------------------------------------------
# Validator


def _gpu(data: dict[str, Any], key: str) -> dict[str, Any]:
    return next(gpu for gpu in data["gpus"] if gpu["key"] == key)


def _load_from(tmp_path: Path, data: dict[str, Any]) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(data), encoding="ascii")
    parse_gpu_catalog(json.loads(path.read_text(encoding="ascii")))


def test_parse_accepts_the_packaged_file() -> None:
    assert len(parse_gpu_catalog(_raw_file())) == len(REQUIRED_KEYS)


def test_missing_provenance_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    del _gpu(data, "L4")["figures"]["memory_bandwidth_gb_s"]["sources"]
    with pytest.raises(GpuCatalogError, match="provenance") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("L4", "memory_bandwidth_gb_s")
    assert "'L4'" in str(info.value) and "memory_bandwidth_gb_s" in str(info.value)


def test_unknown_source_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "T4")["figures"]["tdp_w"]["sources"] = ["nowhere"]
    with pytest.raises(GpuCatalogError, match="nowhere") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("T4", "tdp_w")


def test_bare_number_without_provenance_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "A40")["figures"]["fp16_tflops"] = 149.7
    with pytest.raises(GpuCatalogError) as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("A40", "fp16_tflops")


def test_missing_figure_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    del _gpu(data, "A40")["figures"]["tdp_w"]
    with pytest.raises(GpuCatalogError, match="missing") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("A40", "tdp_w")


def test_cuda_total_above_the_nvml_total_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "L4")["figures"]["cuda_total_mib"]["value"] = 30000
    with pytest.raises(GpuCatalogError, match="at most memory_mib") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("L4", "cuda_total_mib")


def test_duplicate_name_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "L40")["names"].append("nvidia l40s")
    with pytest.raises(GpuCatalogError, match="L40S") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("L40", "names")


def test_duplicate_key_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    data["gpus"].append(copy.deepcopy(_gpu(data, "T4")))
    with pytest.raises(GpuCatalogError, match="duplicate") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("T4", "key")


@pytest.mark.parametrize("value", [0, -1.0, None])
def test_non_positive_bandwidth_is_rejected(tmp_path: Path, value: float | None) -> None:
    data = _raw_file()
    _gpu(data, "B200")["figures"]["memory_bandwidth_gb_s"]["value"] = value
    with pytest.raises(GpuCatalogError) as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("B200", "memory_bandwidth_gb_s")


def test_zero_memory_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "L4")["figures"]["memory_mib"]["value"] = 0
    with pytest.raises(GpuCatalogError) as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("L4", "memory_mib")


def test_memory_unit_slip_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "L4")["figures"]["memory_mib"]["value"] = 24  # GiB typed where MiB belongs
    with pytest.raises(GpuCatalogError, match="memory_gb") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("L4", "memory_mib")


def test_fp8_must_match_the_family(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "A10")["figures"]["fp8_tflops"]["value"] = 250
    with pytest.raises(GpuCatalogError, match="ampere") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("A10", "fp8_tflops")


def test_a_kernel_efficiency_above_one_or_an_unknown_kernel_figure_is_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "MI300X")["figures"]["hbm_stream_efficiency"]["value"] = 1.2
    with pytest.raises(GpuCatalogError, match="at most 1") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("MI300X", "hbm_stream_efficiency")
    data = _raw_file()
    _gpu(data, "MI300X")["figures"]["gemm_int4_efficiency"] = {"value": 0.5, "sources": ["ml-engineering"]}
    with pytest.raises(GpuCatalogError, match="unknown figure") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("MI300X", "gemm_int4_efficiency")


def test_fp4_only_on_gpus_with_fp4_tensor_cores_and_with_provenance(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "H100-SXM5-80GB")["figures"]["fp4_tflops"] = {"value": 3958, "sources": ["ml-engineering"]}
    with pytest.raises(GpuCatalogError, match="FP4") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("H100-SXM5-80GB", "fp4_tflops")
    data = _raw_file()
    _gpu(data, "B200")["figures"]["fp4_tflops"] = {"value": 9000, "sources": []}
    with pytest.raises(GpuCatalogError, match="provenance") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("B200", "fp4_tflops")


@pytest.mark.parametrize(("key", "domain"), [("GB200-NVL72", 4), ("MI355X", 16), ("B200", 8)])
def test_an_nvlink_domain_must_join_more_gpus_than_a_node_over_nvlink(tmp_path: Path, key: str, domain: int) -> None:
    data = _raw_file()
    _gpu(data, key)["nvlink_domain_gpus"] = domain
    with pytest.raises(GpuCatalogError, match="NVLink domain") as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == (key, "nvlink_domain_gpus")


def test_a_gpu_without_kernel_figures_or_tables_parses_to_none() -> None:
    data = _raw_file()
    t4 = _gpu(data, "T4")
    assert "kernel_tables" not in t4 and not set(t4["figures"]) & set(KERNEL_FIGURES)
    spec = parse_gpu_catalog(data).get("T4")
    assert (spec.kernel_tables, spec.kernel_tables_own, spec.kernel_figures) == (None, False, ())


def test_bad_enum_and_bad_source_are_rejected(tmp_path: Path) -> None:
    data = _raw_file()
    _gpu(data, "T4")["vendor"] = "intel"
    with pytest.raises(GpuCatalogError) as info:
        _load_from(tmp_path, data)
    assert (info.value.gpu, info.value.field) == ("T4", "vendor")

    data = _raw_file()
    data["sources"]["ml-engineering"]["as_of"] = "last year"
    with pytest.raises(GpuCatalogError, match="as_of"):
        _load_from(tmp_path, data)
