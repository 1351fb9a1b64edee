"""``hrx doctor``: plugins, engines, devices, queue families, limits, what is missing."""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

from .. import plugins as reg
from .table import table

#: Version of the ``hrx doctor --json`` layout: bumped when a key changes meaning or
#: disappears (new keys may appear without a bump).
SCHEMA = 1

#: The plugin distributions of this project: (distribution, what it provides, its folder in a checkout).
KNOWN_PLUGINS = (
    ("hrx-gpu", "the cuda and amdgpu engines", "plugins/hrx_gpu"),
    ("hrx-npu", "the NPU programming model, the npu-host engine and `hrx demo`", "plugins/hrx_npu"),
    ("hrx-tensor", "tensor operations (linear, gather_rows)", "plugins/hrx_tensor"),
    ("hrx-image", "image preprocessing operations", "plugins/hrx_image"),
    ("hrx-models", "the GPT-2 decoder, `hrx model` and `hrx generate`", "plugins/hrx_models"),
    ("hrx-amdf", "the libamdf binding and the simulated Strix Halo", "plugins/hrx_amdf"),
)

#: Optional Python packages: (import name, what needs it, the extra that installs it).
OPTIONAL_PACKAGES = (
    ("onnx", "ONNX models (hrx_core.artifacts.onnx)", "hrx-core[onnx]"),
    ("huggingface_hub", "Hugging Face Hub models (hrx_core.artifacts.hf.Resolver)", "hrx-core[hf]"),
)


def _fmt_bytes(nbytes: int) -> str:
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def report() -> dict[str, Any]:
    """Everything doctor knows, as plain data."""
    registry = reg.registry()
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "plugins": [
            {"name": p.name, "module": p.module, "distribution": p.distribution, "version": p.version, "builtin": p.builtin}
            for p in registry.plugins
        ],
        "failures": [
            {"name": f.name, "value": f.value, "distribution": f.distribution, "version": f.version, "error": f.error}
            for f in registry.failures
        ],
        "engines": [],
        "devices": [],
        "compilers": sorted(registry.compilers()),
        "extra": [],
    }
    for name, engine in registry.engines().items():
        try:
            status = engine.probe()
            available, reason, count = status.available, status.reason, status.device_count
        except Exception as exc:  # probe() must not raise; report it if it does
            available, reason, count = False, f"probe raised {type(exc).__name__}: {exc}", 0
        out["engines"].append({"name": name, "priority": engine.priority, "available": available, "reason": reason, "devices": count})
        if not available:
            continue
        for index in range(count):
            try:
                info = reg.device(name, index).info
            except Exception as exc:
                out["devices"].append({"engine": name, "index": index, "error": f"{type(exc).__name__}: {exc}"})
                continue
            limits = info.limits
            out["devices"].append(
                {
                    "engine": name,
                    "index": index,
                    "name": info.name,
                    "kind": info.kind,
                    "memory_bytes": info.memory_bytes,
                    "targets": list(info.targets),
                    "queue_families": [
                        {"name": f.name, "count": f.count, "operations": sorted(f.operations)} for f in info.queue_families
                    ],
                    "limits": {
                        "max_transfer_bytes": limits.max_transfer_bytes,
                        "alignment": limits.alignment,
                        "max_grid": list(limits.max_grid),
                        "max_threads_per_block": limits.max_threads_per_block,
                    },
                    "coherent_shared_memory": info.coherent_shared_memory,
                    "host_mappable": info.host_mappable,
                    "host_memory": info.host_memory,
                    "native_graphs": info.native_graphs,
                    "properties": {k: str(v) for k, v in info.properties.items()},
                }
            )
    for rows in registry.pm.hook.hrx_doctor():
        for row in rows or ():
            out["extra"].append([str(x) for x in row])
    out["missing"] = missing(out)
    return out


def _normal(distribution: str | None) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", distribution or "").lower()


def missing(data: dict[str, Any]) -> list[dict[str, str]]:
    """What is not installed or not available, and why: unavailable engines, devices
    that failed to open, plugins that failed to load, this project's plugin
    distributions and optional packages that are not installed.
    Each entry has ``kind``, ``name``, ``why`` and ``fix`` ('' when there is none)."""
    out = [{"kind": "engine", "name": e["name"], "why": e["reason"], "fix": ""} for e in data["engines"] if not e["available"]]
    out += [{"kind": "device", "name": f"{d['engine']}:{d['index']}", "why": d["error"], "fix": ""}
            for d in data["devices"] if "error" in d]
    out += [{"kind": "plugin", "name": f["name"], "why": f"{f['distribution']} {f['version']}: failed to load: {f['error']}",
             "fix": f"pip install --force-reinstall {f['distribution']}" if f["distribution"] else ""} for f in data["failures"]]
    present = {_normal(p["distribution"]) for p in data["plugins"]} | {_normal(f["distribution"]) for f in data["failures"]}
    for dist, provides, folder in KNOWN_PLUGINS:
        if _normal(dist) not in present:
            out.append({"kind": "plugin", "name": dist, "why": f"not installed; provides {provides}",
                        "fix": f"pip install {dist} (from a checkout: pip install -e {folder})"})
    for module, needed_by, extra in OPTIONAL_PACKAGES:
        if importlib.util.find_spec(module) is None:
            out.append({"kind": "package", "name": module, "why": f"not installed; needed for {needed_by}",
                        "fix": f"pip install '{extra}'"})
    return out


def _table(title: str, header: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return f"{title}\n  (none)\n"
    return f"{title}\n{table(rows, header, indent=2)}\n"


def render(data: dict[str, Any]) -> str:
    parts = [
        _table(
            "Plugins",
            ["name", "distribution", "version", "module"],
            [[p["name"] + (" (built-in)" if p["builtin"] else ""), p["distribution"], p["version"], p["module"]] for p in data["plugins"]],
        ),
        _table(
            "Engines",
            ["engine", "priority", "available", "devices", "note"],
            [[e["name"], str(e["priority"]), "yes" if e["available"] else "NO", str(e["devices"]), e["reason"]] for e in data["engines"]],
        ),
    ]
    dev_rows = []
    fam_rows = []
    for d in data["devices"]:
        if "error" in d:
            dev_rows.append([f"{d['engine']}:{d['index']}", "ERROR", d["error"], "", ""])
            continue
        props = ", ".join(f"{k}={v}" for k, v in d["properties"].items())
        dev_rows.append([f"{d['engine']}:{d['index']}", d["kind"], d["name"], _fmt_bytes(d["memory_bytes"]), props])
        for f in d["queue_families"]:
            fam_rows.append([f"{d['engine']}:{d['index']}", f["name"], str(f["count"]), ",".join(f["operations"])])
        lim = d["limits"]
        fam_rows.append([
            f"{d['engine']}:{d['index']}",
            "limits",
            "",
            f"max transfer {_fmt_bytes(lim['max_transfer_bytes'])}, align {lim['alignment']}, "
            f"targets {','.join(d['targets'])}, shared={'coherent' if d['coherent_shared_memory'] else 'no'}, "
            f"native graphs={'yes' if d['native_graphs'] else 'no'}",
        ])
    parts.append(_table("Devices", ["device", "kind", "name", "memory", "properties"], dev_rows))
    parts.append(_table("Queue families and limits", ["device", "family", "count", "operations"], fam_rows))
    parts.append(f"Compilers\n  targets: {', '.join(data['compilers']) or '(none)'}\n")
    if data["extra"]:
        parts.append(_table("Plugin reports", ["section", "item", "detail"], [r + [""] * (3 - len(r)) for r in data["extra"]]))
    parts.append(_table("Missing or broken", ["what", "why", "fix"],
                        [[f"{m['kind']} {m['name']}", m["why"], m["fix"]] for m in data["missing"]]))
    return "\n".join(parts)


def run(as_json: bool) -> int:
    data = report()
    print(json.dumps(data, indent=2) if as_json else render(data))
    return 1 if data["failures"] else 0
