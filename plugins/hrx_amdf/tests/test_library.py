"""Finding libamdf, negotiating its ABI, and libamdf statuses as HRX errors.

CI has no libamdf: a missing library must leave ``import hrx_amdf`` working and make
``probe()`` say how to point ``HRX_AMDF_LIBRARY`` at a build. Too-old and truncated
libraries are tiny C shared libraries compiled here (or the test double built with
options); they are rejected with VERSION_MISMATCH.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hrx_core.errors import DeviceError, HRXError, InvalidArgument, OutOfBounds, Timeout, Unsupported

from amdf_stub_build import compile_library, stub_factory, stub_path  # noqa: F401 (fixtures)
from hrx_amdf import errors
from hrx_amdf.constants import StatusCode, StatusDomain
from hrx_amdf.native import library
from hrx_amdf.native.library import ENV_VAR, LibraryNotFound, load, probe

TOO_OLD = r"""
#include <stdint.h>
/* A libamdf that only speaks ABI 4: every request for 5 is VERSION_MISMATCH. */
__attribute__((visibility("default")))
uint64_t amdf_query_api(uint32_t minimum, uint32_t maximum, const void** out_api) {
  (void)out_api;
  return minimum <= 4 && 4 <= maximum ? 13u : 10u; /* INTERNAL if ever asked for 4 */
}
"""

NO_ENTRY = "int not_libamdf(void) { return 0; }\n"


@pytest.fixture
def no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine where neither HRX_AMDF_LIBRARY nor the usual names find libamdf."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(library.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(library, "LIBRARY_NAMES", ("libamdf-absent-for-test.so", "libamdf-absent-for-test.so.1"))


# ------------------------------------------------------------- missing library


def test_missing_library_probe_says_how_to_point_at_a_build(no_library: None) -> None:
    ok, reason, facts = probe()
    assert not ok
    assert ENV_VAR in reason
    assert "ROCm/hrx-system" in reason and "cmake" in reason.lower()
    assert "not found" in reason
    assert facts["env"] == ENV_VAR and facts["configured"] == ""
    assert facts["searched"] == ["libamdf-absent-for-test.so", "libamdf-absent-for-test.so.1"]


def test_configured_path_that_does_not_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nowhere" / "libamdf.so"
    monkeypatch.setenv(ENV_VAR, str(missing))
    ok, reason, facts = probe()
    assert not ok
    assert f"{ENV_VAR}={missing}" in reason and "no such file" in reason
    assert facts["configured"] == str(missing)
    with pytest.raises(LibraryNotFound) as caught:
        load()
    assert isinstance(caught.value, Unsupported) and isinstance(caught.value, HRXError)


def test_configured_file_that_is_not_a_library(tmp_path: Path) -> None:
    bogus = tmp_path / "libamdf.so"
    bogus.write_text("not an ELF file")
    ok, reason, _ = probe(str(bogus))
    assert not ok and ENV_VAR in reason and str(bogus) in reason


def test_plugin_imports_without_libamdf(tmp_path: Path) -> None:
    code = (
        "import hrx_amdf, hrx_amdf.native\n"
        "from hrx_amdf.native import LibamdfProvider, LibraryNotFound, probe\n"
        "from hrx_amdf import open_provider\n"
        "ok, reason, facts = probe()\n"
        "assert not ok and 'HRX_AMDF_LIBRARY' in reason, reason\n"
        "for make in (LibamdfProvider, lambda: open_provider('libamdf')):\n"
        "    try:\n"
        "        make()\n"
        "    except LibraryNotFound as exc:\n"
        "        assert 'HRX_AMDF_LIBRARY' in str(exc)\n"
        "    else:\n"
        "        raise AssertionError('a provider without libamdf')\n"
        "print('ok')\n"
    )
    env = dict(os.environ, **{ENV_VAR: str(tmp_path / "absent" / "libamdf.so")})
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ---------------------------------------------------------- version handling


def test_too_old_library_is_version_mismatch(tmp_path: Path) -> None:
    path = compile_library(tmp_path, TOO_OLD, "libamdf.so")
    with pytest.raises(errors.AmdfUnsupported) as caught:
        load(str(path))
    error = caught.value
    assert error.code_name == "VERSION_MISMATCH"
    assert error.call == "amdf_query_api"
    assert "VERSION_MISMATCH" in str(error) and "ABI 5" in str(error)
    assert isinstance(error, Unsupported)
    ok, reason, facts = probe(str(path))
    assert not ok and "VERSION_MISMATCH" in reason and facts["status"] == "VERSION_MISMATCH"


def test_library_directory_in_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compile_library(tmp_path, TOO_OLD, "libamdf.so")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert library.candidates() == [str(tmp_path / "libamdf.so"), str(tmp_path / "libamdf.so.1")]
    with pytest.raises(errors.AmdfUnsupported, match="VERSION_MISMATCH"):
        load()


def test_library_without_entry_point(tmp_path: Path) -> None:
    path = compile_library(tmp_path, NO_ENTRY, "libamdf.so")
    with pytest.raises(errors.AmdfUnsupported) as caught:
        load(str(path))
    assert caught.value.code_name == "NOT_FOUND" and "amdf_query_api" in str(caught.value)


def test_stub_reporting_abi_4_is_refused(stub_factory: Any) -> None:
    path = stub_factory("STUB_ABI_VERSION=4")
    with pytest.raises(errors.AmdfUnsupported) as caught:
        load(str(path))
    assert caught.value.code_name == "VERSION_MISMATCH"


def test_truncated_api_table_is_refused(stub_factory: Any) -> None:
    path = stub_factory(f"STUB_API_BYTES={library.API_REQUIRED_BYTES - 8}")
    with pytest.raises(errors.AmdfUnsupported) as caught:
        load(str(path))
    assert caught.value.code_name == "VERSION_MISMATCH"
    assert f"{library.API_REQUIRED_BYTES - 8} bytes" in str(caught.value)


def test_negotiated_library_facts(stub_path: Path) -> None:
    ok, reason, facts = probe(str(stub_path))
    assert ok, reason
    assert facts["abi_version"] == 5 and facts["api_table_bytes"] == library.API_REQUIRED_BYTES == 328
    assert facts["extensions"] == {"gpu": {"version": 1}, "xdna": {"version": 1}}
    loaded = load(str(stub_path))
    assert loaded is load(str(stub_path))  # loaded and negotiated once per path
    assert library.GPU_REQUIRED_BYTES == 56 and library.XDNA_REQUIRED_BYTES == 88


def test_missing_extension_is_reported_not_fatal(stub_factory: Any) -> None:
    from hrx_amdf.constants import EngineKind
    from hrx_amdf.native import LibamdfProvider

    path = stub_factory("STUB_NO_XDNA")
    ok, reason, facts = probe(str(path))
    assert ok
    assert "no xdna extension" in reason and "UNSUPPORTED" in reason
    assert facts["extensions"]["gpu"] == {"version": 1}
    assert "UNSUPPORTED" in facts["extensions"]["xdna"]["missing"]
    provider = LibamdfProvider(str(path))
    try:
        endpoint = provider.endpoint(EngineKind.XDNA)
        with pytest.raises(errors.AmdfUnsupported) as caught:
            endpoint.create_xdna_device()
        assert caught.value.call == "xdna.device_create" and "no xdna extension" in str(caught.value)
        with pytest.raises(errors.AmdfUnsupported):
            endpoint.xdna_info()
        gpu = provider.endpoint(EngineKind.GPU).create_gpu_device()
        gpu.destroy()
    finally:
        provider.close()


# ------------------------------------------------------ statuses as HRX errors

EXPECTED: dict[StatusCode, tuple[type[errors.AmdfError], type[HRXError] | type[Exception]]] = {
    StatusCode.INVALID_ARGUMENT: (errors.AmdfInvalidArgument, InvalidArgument),
    StatusCode.OUT_OF_RANGE: (errors.AmdfOutOfRange, OutOfBounds),
    StatusCode.UNSUPPORTED: (errors.AmdfUnsupported, Unsupported),
    StatusCode.NOT_FOUND: (errors.AmdfUnsupported, Unsupported),
    StatusCode.RESOURCE_EXHAUSTED: (errors.AmdfResourceExhausted, MemoryError),
    StatusCode.BUSY: (errors.AmdfBusy, HRXError),
    StatusCode.DEADLINE_EXCEEDED: (errors.AmdfTimeout, Timeout),
    StatusCode.PERMISSION_DENIED: (errors.AmdfDeviceError, DeviceError),
    StatusCode.DEVICE_LOST: (errors.AmdfDeviceLost, DeviceError),
    StatusCode.VERSION_MISMATCH: (errors.AmdfUnsupported, Unsupported),
    StatusCode.BUFFER_TOO_SMALL: (errors.AmdfDeviceError, DeviceError),
    StatusCode.FAILED_PRECONDITION: (errors.AmdfDeviceError, DeviceError),
    StatusCode.INTERNAL: (errors.AmdfDeviceError, DeviceError),
}


def test_every_api_code_is_mapped() -> None:
    assert set(EXPECTED) == set(StatusCode) - {StatusCode.OK}


@pytest.mark.parametrize("code", sorted(EXPECTED), ids=lambda c: c.name)
def test_api_status_becomes_hrx_error(code: StatusCode) -> None:
    status = errors.make_status(code)
    assert status == int(code)  # the API domain is zero
    error = errors.error_for("memory_create", status)
    cls, hrx_base = EXPECTED[code]
    assert type(error) is cls
    assert isinstance(error, hrx_base) and isinstance(error, HRXError)
    assert error.call == "memory_create" and error.code_name == code.name
    assert str(error).startswith(f"memory_create: {code.name}")
    with pytest.raises(cls, match=f"^memory_create: {code.name}"):
        errors.check("memory_create", status)


def test_native_domain_statuses() -> None:
    enomem = errors.make_status(12, StatusDomain.ERRNO)
    assert enomem == (3 << 32) | 12
    error = errors.error_for("gpu.device_create", enomem, "opening /dev/kfd")
    assert type(error) is errors.AmdfDeviceError and isinstance(error, DeviceError)
    assert error.code_name == "ERRNO 12" and error.domain == StatusDomain.ERRNO and error.code == 12
    assert str(error) == "gpu.device_create: ERRNO 12 (opening /dev/kfd)"
    # A native code equal to an API code is still a native failure, not that API error.
    busy_errno = errors.make_status(StatusCode.BUSY, StatusDomain.ERRNO)
    assert type(errors.error_for("kernel_queue_destroy", busy_errno)) is errors.AmdfDeviceError
    firmware = errors.error_for("xdna.kernel_queue_submit", errors.make_status(0x3, StatusDomain.FIRMWARE))
    assert firmware.code_name == "FIRMWARE 0x3"
    assert errors.make_status(0, StatusDomain.ERRNO) == 0
    errors.check("memory_create", 0)
