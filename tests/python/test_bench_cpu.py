"""CPU-only tests of the benchmark CLI (python -m causalconv.bench): no GPU needed."""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from causalconv.bench import cases, harness, report
from causalconv.bench.__main__ import NO_GPU, main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "causalconv.bench", *args],
                          capture_output=True, text=True, timeout=300)


def case_named(name):
    return next(c for c in cases.CASES if c.name == name)


def test_list_prints_every_registered_case():
    proc = run_cli("--list")
    assert proc.returncode == 0, proc.stderr
    for case in cases.CASES:
        assert case.name in proc.stdout
    assert "depthwise bf16 B4 D4096 L8192 K4" in proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-GPU path")
def test_without_gpu_exits_2_with_one_line():
    proc = run_cli()
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [NO_GPU]
    assert proc.stdout == ""


def test_list_applies_quick_and_comma_separated_filters(capsys):
    assert main(["--list", "--filter", "fp32 B4 D4096 L8192 K4 BLC,depthwise bf16 B8"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in listed] == [
        "depthwise bf16 B8 D2048 L2048 K4", "depthwise bf16 B8 D2048 L2048 K4 fwd+bwd",
        "depthwise fp32 B4 D4096 L8192 K4 BLC", "depthwise fp32 B4 D4096 L8192 K4 BLC fwd+bwd"]
    quick = cases.select(cases.CASES, quick=True)
    assert quick and all(c.quick for c in quick)
    assert main(["--list", "--filter", "no-such-case"]) == 2


def test_bytes_and_flops_of_depthwise_forward():
    case = case_named("depthwise bf16 B4 D4096 L8192 K4")
    activation_bytes = 2 * 4 * 4096 * 8192  # bf16 x (B, D, L)
    weight_bytes = 2 * 4096 * 4
    assert case.bytes_moved == 2 * activation_bytes + weight_bytes  # read x and w, write y
    assert case.flops == 2 * 4 * 4096 * 8192 * 4
    assert case_named("depthwise fp32 B4 D4096 L8192 K4").bytes_moved == 2 * (2 * activation_bytes + weight_bytes)


def test_forward_backward_case_counts_both_passes_and_checks_every_gradient():
    case = cases.depthwise(4, 4096, 8192, 4, torch.bfloat16, backward=True)
    activation_bytes, weight_bytes = 2 * 4 * 4096 * 8192, 2 * 4096 * 4
    # x read twice, y written, dy read, dx written; w read twice, dw written.
    assert case.bytes_moved == 5 * activation_bytes + 3 * weight_bytes
    assert case.name.endswith(" fwd+bwd") and case.output_names == ("out", "dx", "dweight")
    assert case.reductions == ("dweight",)  # fp32: the looser bound of sums over batch x length
    assert cases.dense(2, 8, 12, 40, 3, torch.float32, backward=True).reductions == ("dweight", "dbias")
    assert cases.depthwise(4, 4096, 8192, 4, torch.bfloat16).output_names == ("out",)


@pytest.mark.parametrize("backward", [False, True])
def test_torch_baseline_runs_and_passes_its_check_on_cpu(backward):
    case = cases.depthwise(2, 6, 33, 4, torch.float32, bias=True, activation="silu", backward=backward)
    inputs = case.make_inputs(torch.device("cpu"), seed=1)
    outs, refs = case.baselines["torch"]()(inputs), case.reference(inputs)
    assert len(outs) == len(refs) == (4 if backward else 1)  # out, then dx, dweight, dbias
    assert all(r.dtype == torch.float64 for r in refs)
    verdict = case.check(outs, refs)
    assert verdict["passed"] and verdict["rel_l2"] < 1e-6
    if backward:
        assert verdict["grad_rel_l2"] < 1e-6 and verdict["note"].startswith("gradients rel L2 ")
        assert inputs["x"].grad is None  # autograd.grad: no accumulation across runs
    else:
        assert verdict["note"] == "" and "grad_rel_l2" not in verdict


def test_a_wrong_gradient_fails_the_verdict_and_is_named():
    case = cases.depthwise(2, 6, 33, 4, torch.float32, bias=True, backward=True)
    inputs = case.make_inputs(torch.device("cpu"), seed=2)
    outs, refs = case.baselines["torch"]()(inputs), case.reference(inputs)
    wrong_dweight = outs[2].clone()
    wrong_dweight[0, 0] += 1.0
    verdict = case.check((*outs[:2], wrong_dweight, outs[3]), refs)
    assert not verdict["passed"] and verdict["note"] == "gradients fail: dweight"
    assert verdict["rel_l2"] < 1e-6  # the output itself is right
    nan_dbias = torch.full_like(outs[3], float("nan"))
    verdict = case.check((*outs[:3], nan_dbias), refs)
    assert not verdict["passed"] and verdict["note"] == "gradients fail: dbias"


def test_a_failing_reference_leaves_the_runs_timed_but_unchecked():
    case = cases.depthwise(2, 6, 33, 4, torch.float32, backward=True)

    def reference_out_of_memory(_inputs):
        raise RuntimeError("out of memory while computing the fp64 gradients\nmore detail")

    case = dataclasses.replace(case, run_ours=case.baselines["torch"](), baselines={},
                               reference=reference_out_of_memory)
    seen = []
    result = harness.run_case(case, lambda fn: 1.0, copy_gbps=1000.0, seed=0,
                              on_result=lambda name, r: seen.append(name), device=torch.device("cpu"))
    ours = result["results"]["ours"]
    assert seen == ["ours"] and not result["passed"] and ours["ms"] == 1.0
    assert ours["note"] == ("not checked: the fp64 reference failed: RuntimeError: "
                            "out of memory while computing the fp64 gradients")


def test_compare_fails_on_nan_and_on_large_error():
    ref = torch.ones(8, dtype=torch.float64)
    nan = torch.ones(8)
    nan[3] = float("nan")
    assert not cases.compare(nan, ref, 1e-2)["passed"]
    assert not cases.compare(torch.full((8,), 1.1), ref, 1e-2)["passed"]
    assert cases.compare(torch.full((8,), 1.001), ref, 1e-2)["passed"]


def synthetic_report():
    ours = {"available": True, "ms": 0.140, "gbps": 3835.0, "pct_copy": 90.7, "tflops": 7.7,
            "rel_l2": 2.1e-3, "max_abs": 0.03, "bound": 1e-2, "passed": True, "note": ""}
    failed = {"available": True, "passed": False, "error": "RuntimeError: no kernel"}
    torch_ms = dict(ours, ms=1.724, rel_l2=0.0)
    dao_missing = {"available": False, "reason": "import causal_conv1d failed"}
    return {"device": "NVIDIA H200", "copy_bandwidth_gbps": 4230.0, "passed": False, "cases": [
        {"name": "depthwise bf16 B4 D4096 L8192 K4", "passed": True,
         "results": {"ours": ours, "torch": torch_ms, "dao": dao_missing}},
        {"name": "depthwise fp32 B4 D4096 L8192 K4", "passed": False,
         "results": {"ours": failed, "torch": torch_ms, "dao": dict(torch_ms, ms=0.138)}}]}


def test_table_shows_timings_speedups_and_verdicts():
    lines = report.format_table(synthetic_report()).splitlines()
    assert "4230 GB/s" in lines[0]
    header = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert header == ["case", "ours ms", "GB/s", "% copy", "vs torch (ms)", "vs dao (ms)", "rel L2", "verdict"]
    first = [cell.strip() for cell in lines[4].strip("|").split("|")]
    assert first == ["depthwise bf16 B4 D4096 L8192 K4", "0.140", "3835", "90.7",
                     "12.31x (1.724)", "n/a", "2.1e-03", "PASS"]
    second = [cell.strip() for cell in lines[5].strip("|").split("|")]
    assert second == ["depthwise fp32 B4 D4096 L8192 K4", "-", "-", "-",
                      "- (1.724)", "- (0.138)", "-", "FAIL (error)"]
    assert len({len(line) for line in lines[2:]}) == 1  # columns line up


def test_progress_lines_and_outputs(tmp_path):
    results = synthetic_report()["cases"][0]["results"]
    line = report.progress_line(3, 9, "depthwise bf16 B4 D4096 L8192 K4", "ours", results["ours"])
    assert line.startswith("[3/9] depthwise bf16 B4 D4096 L8192 K4: ours 0.140 ms")
    assert "n/a (import causal_conv1d failed)" in report.progress_line(2, 9, "c", "dao", results["dao"])
    report.write_json(synthetic_report(), tmp_path / "results.json")
    assert json.loads((tmp_path / "results.json").read_text()) == synthetic_report()
    if report.write_chart(synthetic_report(), tmp_path / "results.png"):
        assert (tmp_path / "results.png").stat().st_size > 0


def test_b2b_cases_are_registered():
    names = {c.name for c in cases.CASES if c.family == "b2b"}
    for dtype in ("bf16", "fp32"):
        for shape in ("B1 D4096 L8192 Kp3 Km7", "B4 D4096 L8192 Kp3 Km128", "B4 D4096 L8192 Kp4 Km256",
                      "B1 D8192 L8192 Kp3 Km7", "B1 D4096 L131072 Kp3 Km128"):
            assert f"b2b {dtype} {shape}" in names and f"b2b {dtype} {shape} fwd+bwd" in names
    for shape in ("B1 D4096 L8191 Kp3 Km7", "B1 D4096 L8191 Kp3 Km128"):  # odd lengths, bf16
        assert f"b2b bf16 {shape}" in names and f"b2b bf16 {shape} fwd+bwd" in names
    assert len(names) == 2 * 2 * 8 + 2 * 2
    assert {c.name for c in cases.CASES if c.family == "b2b" and c.quick} == {
        "b2b bf16 B1 D4096 L8192 Kp3 Km7", "b2b bf16 B1 D4096 L8192 Kp3 Km7 fwd+bwd"}


def test_bytes_and_flops_of_b2b():
    case = case_named("b2b bf16 B1 D4096 L8192 Kp3 Km128")
    x_bytes, out_bytes = 2 * 3 * 4096 * 8192, 2 * 4096 * 8192
    weight_bytes = 2 * (3 * 4096 * 3 + 4096 * 128 + 4096)
    assert case.bytes_moved == x_bytes + out_bytes + weight_bytes  # x read once, out written once
    assert case.flops == 4096 * 8192 * (6 * 3 + 2 * 128 + 4)
    both = case_named("b2b bf16 B1 D4096 L8192 Kp3 Km128 fwd+bwd")
    # + backward: x and dout read, dx written (and the weights read, their gradients written).
    assert both.bytes_moved == 3 * x_bytes + 2 * out_bytes + 3 * weight_bytes
    assert both.output_names == ("out", "dx", "dweight_proj", "dweight_mixer", "dskip_bias")
    assert both.reductions == ("dweight_proj", "dweight_mixer", "dskip_bias")


@pytest.mark.parametrize("backward", [False, True])
def test_b2b_torch_baseline_runs_and_passes_its_check_on_cpu(backward):
    case = cases.b2b(2, 3, 40, 3, 7, torch.float32, backward=backward)
    inputs = case.make_inputs(torch.device("cpu"), seed=1)
    verdict = case.check(case.baselines["torch"]()(inputs), case.reference(inputs))
    assert verdict["passed"] and verdict["rel_l2"] < 1e-6
    assert verdict.get("grad_rel_l2", 0.0) < 1e-6


# ---- dense cases: FLOPs, TF32 on/off baselines with allclose verdicts ----


def test_dense_seed_case_counts():
    case = case_named("dense fp32 B32 Cin256 Cout256 L8192 K4")
    assert case.flops == 2 * 32 * 256 * 256 * 4 * 8192
    activation_bytes = 4 * 32 * 256 * 8192
    assert case.bytes_moved == 2 * activation_bytes + 4 * (256 * 256 * 4 + 256)  # x, y, weight, bias
    assert set(case.baselines) == {"torch tf32", "torch fp32"} and case.allclose == (1e-4, 1e-4)
    assert case_named("dense fp32 B32 Cin256 Cout256 L8192 K4 fwd+bwd").flops == 3 * case.flops
    assert set(case_named("dense bf16 B32 Cin256 Cout256 L8192 K4").baselines) == {"torch"}
    assert case_named("dense bf16 B16 Cin64 Cout64 L16000 K2 d8").flops == 2 * 16 * 64 * 64 * 2 * 16000


@pytest.mark.parametrize("backward", [False, True])
def test_dense_torch_baselines_run_on_cpu_with_allclose_verdicts(backward):
    case = cases.dense(2, 8, 12, 40, 3, torch.float32, dilation=2, groups=2, backward=backward)
    inputs = case.make_inputs(torch.device("cpu"), seed=3)
    assert inputs["weight"].abs().max() < 1.0  # nn.Conv1d-scale weights
    ref = case.reference(inputs)
    for name in ("torch tf32", "torch fp32"):
        verdict = case.check(case.baselines[name]()(inputs), ref)
        assert verdict["passed"] and verdict["allclose"], (name, verdict)
        assert "allclose(atol=0.0001, rtol=0.0001) ok" in verdict["note"]
        assert ("gradients rel L2" in verdict["note"]) == backward
    saved = torch.backends.cudnn.allow_tf32
    with cases.tf32(not saved):
        assert torch.backends.cudnn.allow_tf32 == (not saved)
    assert torch.backends.cudnn.allow_tf32 == saved


def test_compare_with_allclose_fails_a_small_rel_l2_but_large_max_error():
    ref = torch.ones(1000, dtype=torch.float64)
    out = torch.ones(1000)
    out[0] = 1.01  # rel L2 ~3e-4 but one element off by 1e-2
    result = cases.compare(out, ref, 1e-3, allclose=(1e-4, 1e-4))
    assert result["rel_l2"] < 1e-3 and not result["allclose"] and not result["passed"]
    assert "fails" in result["note"]


def test_table_marks_baselines_that_fail_their_check():
    rep = synthetic_report()
    rep["cases"][0]["results"]["torch"] = dict(rep["cases"][0]["results"]["torch"], passed=False)
    row = [cell.strip() for cell in report.format_table(rep).splitlines()[4].strip("|").split("|")]
    assert row[4] == "12.31x (1.724, fails check)"
