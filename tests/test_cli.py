"""The ``hrx`` command's surface: ``--version``, help with defaults, doctor's JSON
schema and "missing" list, tables that fit 100 columns, one-line errors from the
bench scripts and for missing optional packages."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hrx_core as hrx
from hrx_core.cli import doctor
from hrx_core.cli.main import build_parser, main, run_reporting
from hrx_core.cli.table import WIDTH, table

ROOT = Path(__file__).resolve().parent.parent


def _exit(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version(capsys):
    code, out, err = _exit(capsys, ["--version"])
    assert code == 0 and err == ""
    assert out.startswith(f"hrx {hrx.__version__} ") and "Python" in out


def _subparsers(parser: argparse.ArgumentParser, prefix: str = "hrx"):
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _subparsers(child, f"{prefix} {name}")


def test_every_option_of_every_subcommand_has_help_with_its_default():
    parser, _ = build_parser()
    seen = set()
    for prog, p in _subparsers(parser):
        seen.add(prog)
        formatter = p._get_formatter()
        for action in p._actions:
            if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            assert action.help, f"{prog} {action.option_strings[0]}: no help text"
            text = formatter._get_help_string(action) % {"default": action.default}
            # required options have none; SUPPRESS (-v/-q after a subcommand) keeps the top level's
            stated = action.required or action.default is argparse.SUPPRESS or "default" in text.lower()
            assert stated, f"{prog} {action.option_strings[0]}: {text!r}"
    assert {"hrx doctor", "hrx pipeline", "hrx model init", "hrx generate", "hrx demo"} <= seen, seen


def test_help_shows_defaults(capsys):
    code, out, _ = _exit(capsys, ["pipeline", "--help"])
    assert code == 0 and "(default: 1048576)" in " ".join(out.split())
    code, out, _ = _exit(capsys, ["model", "init", "--help"])
    text = " ".join(out.split())
    assert code == 0 and "(default: tiny)" in text and "(default: off)" in text and "(default: 0)" in text


# -- one-line errors of every subcommand ------------------------------------------------------

ONE_LINE = [
    ["--no-such-option"],
    ["doctor", "--jsn"],
    ["prepare", "extra"],
    ["pipeline", "--elements", "-5"],
    ["model", "init", "/proc/x"],
    ["model"],
    ["generate", "--prompt-ids", "1"],
    ["demo", "--rounds", "-1"],
]


@pytest.mark.parametrize("argv", ONE_LINE, ids=" ".join)
def test_user_errors_are_one_line_without_traceback(capsys, argv):
    code, out, err = _exit(capsys, argv)
    assert code not in (0, None), (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_run_reporting_turns_failures_into_one_line(capsys):
    def missing():
        import no_such_package_for_hrx  # noqa: F401

    def hrx_error():
        raise hrx.InvalidArgument("n: expected an int >= 1, got -5")

    def bug():
        raise KeyError("oops")

    def no_file():
        open("/nonexistent/results.json")

    assert run_reporting("tool", missing) == 2
    assert run_reporting("tool", hrx_error) == 2
    assert run_reporting("tool", bug) == 1
    assert run_reporting("tool", no_file) == 2
    assert run_reporting("tool", lambda: 3) == 3 and run_reporting("tool", lambda: None) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "tool: needs the Python package 'no_such_package_for_hrx', which is not installed: "
        "No module named 'no_such_package_for_hrx'",
        "tool: InvalidArgument: n: expected an int >= 1, got -5",
        "tool: KeyError: 'oops' (HRX_DEBUG=1 shows the traceback)",
        "tool: FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/results.json'",
    ]


def _cuda_available() -> bool:
    status = hrx.engine_status().get("cuda")
    return bool(status and status.available)


BENCH_GPU = [["gpu.py", "--reps", "1"], ["runtime.py", "--engine", "cuda", "--reps", "1"],
             ["tensor.py", "--engine", "cuda"], ["image.py", "--engine", "cuda"], ["model.py", "--engine", "cuda"],
             ["artifacts.py", "--gpu", "--reps", "1"]]


@pytest.mark.parametrize("argv", BENCH_GPU, ids=lambda a: a[0])
def test_bench_scripts_without_a_gpu_print_one_line(argv, tmp_path):
    if _cuda_available():
        pytest.skip("a GPU is present: the script would run the benchmark")
    env = {k: v for k, v in os.environ.items() if k != "HRX_DEBUG"}
    r = subprocess.run([sys.executable, str(ROOT / "bench" / argv[0]), *argv[1:]], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=300, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bench/{argv[0]}: ") and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("argv", [["table.py"], ["table.py", "/nonexistent/results.json"]], ids=len)
def test_bench_table_errors_print_one_line(argv, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / argv[0]), *argv[1:]], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


def test_onnx_without_the_package_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now fails as if not installed
    with pytest.raises(hrx.MissingDependency, match=r"pip install 'hrx-core\[onnx\]'") as info:
        hrx.artifacts.open(tmp_path / "x.onnx")
    assert isinstance(info.value, hrx.HRXError) and isinstance(info.value, ImportError)
    assert info.value.package == "onnx" and info.value.extra == "onnx"


def test_hf_without_the_package_names_the_extra(monkeypatch):
    from hrx_core.artifacts import hf

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(hrx.MissingDependency, match=r"hrx-core\[hf\]"):
        hf._hub()


# -- doctor --------------------------------------------------------------------------------------


def test_doctor_json_has_schema_and_missing(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "OPTIONAL_PACKAGES",
                        (*doctor.OPTIONAL_PACKAGES, ("no_such_package_for_hrx", "a test feature", "hrx-core[test]")))
    monkeypatch.setattr(doctor, "KNOWN_PLUGINS", (*doctor.KNOWN_PLUGINS, ("hrx-nothing", "nothing", "plugins/hrx_nothing")))
    code, out, _ = _exit(capsys, ["doctor", "--json"])
    data = json.loads(out)
    assert code in (0, 1) and data["schema"] == doctor.SCHEMA == 1
    assert all(set(m) == {"kind", "name", "why", "fix"} for m in data["missing"])
    pkg = [m for m in data["missing"] if m["name"] == "no_such_package_for_hrx"]
    assert pkg == [{"kind": "package", "name": "no_such_package_for_hrx", "why": "not installed; needed for a test feature",
                    "fix": "pip install 'hrx-core[test]'"}]
    plugins = [m for m in data["missing"] if m["kind"] == "plugin"]
    assert {"kind": "plugin", "name": "hrx-nothing", "why": "not installed; provides nothing",
            "fix": "pip install hrx-nothing (from a checkout: pip install -e plugins/hrx_nothing)"} in plugins
    assert not {m["name"] for m in plugins} & {p["distribution"] for p in data["plugins"]}  # installed ones are not missing
    unavailable = {e["name"] for e in data["engines"] if not e["available"]}
    assert unavailable == {m["name"] for m in data["missing"] if m["kind"] == "engine"}


def test_doctor_tables_fit_100_columns(capsys):
    data = doctor.report()
    long = "word " * 80 + "/a/path/without/spaces/" + "x" * 150
    data["extra"].append(["section", "a long row", long])
    data["missing"].append({"kind": "package", "name": "p", "why": long, "fix": ""})
    text = doctor.render(data)
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "".join(text.split()).count("".join(long.split())) == 2  # wrapped, nothing lost
    code, out, _ = _exit(capsys, ["doctor"])
    assert max(len(line) for line in out.splitlines()) <= WIDTH


def test_table_wraps_the_widest_columns():
    rows = [["a", "b" * 30, "c " * 100], ["dd", "e", "f"]]
    text = table(rows, ["x", "y", "z"], width=60, indent=2)
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines)
    assert lines[0].split() == ["x", "y", "z"] and lines[1].strip().startswith("--")
    assert lines[2].startswith("  a   " + "b" * 30) and lines[-1].split() == ["dd", "e", "f"]
    assert "".join(text.split()).count("c" * 100) == 1
    # a table that fits is left alone
    assert table([["1", "2"]], ["a", "b"]) == "a  b\n-  -\n1  2"
