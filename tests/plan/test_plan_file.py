"""The plan as data (``lazyops._plan``): one key per configuration however it is spelt, a file that round-trips, is
written in one step, and is refused (with the field, the problem and the way out) when it is not a plan of this
lazyops; the environment a plan is locked to, and the line doctor and list show."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from plan_support import a_plan, origins, rmsnorm_config

from lazyops import ConfigError, _plan
from lazyops.specs import spec
from lazyops.testing.cases import examples

# -- configuration keys ------------------------------------------------------------------------------------------


def test_every_spelling_of_one_configuration_has_one_key():
    rmsnorm = spec("rmsnorm_tl")
    spellings = [
        rmsnorm.bind(4096, torch.bfloat16),
        rmsnorm.bind(4096, "bfloat16"),
        rmsnorm.bind(4096, "bf16") if _accepts("bf16") else rmsnorm.bind(4096, torch.bfloat16),
        rmsnorm.bind(4096, torch.bfloat16, 1e-6),
        rmsnorm.bind(n=4096, dtype=torch.bfloat16, eps=1e-6),
        rmsnorm.bind(4096, torch.bfloat16, weight_dtype=torch.bfloat16, weight_offset=0),
    ]
    keys = {_plan.config_key("rmsnorm_tl", config) for config in spellings}
    assert len(keys) == 1, keys
    (key,) = keys
    # the fields a plan stores, in another order, name the same configuration
    stored = dict(reversed(list(_plan.config_fields(spellings[0]).items())))
    assert _plan.config_key("rmsnorm_tl", stored) == key
    assert "label" not in key and '"dtype":"bfloat16"' in key


def _accepts(dtype: str) -> bool:
    try:
        spec("rmsnorm_tl").bind(8, dtype)
    except Exception:  # noqa: BLE001
        return False
    return True


def test_different_configurations_and_kernels_have_different_keys():
    keys = {
        _plan.config_key("rmsnorm_tl", rmsnorm_config(4096, 1e-6)),
        _plan.config_key("rmsnorm_tl", rmsnorm_config(4096, 1e-5)),
        _plan.config_key("rmsnorm_tl", rmsnorm_config(2048, 1e-6)),
        _plan.config_key("add_rmsnorm_tl", spec("add_rmsnorm_tl").bind(4096, torch.bfloat16, 1e-6)),
        _plan.config_key("rmsnorm_tl", spec("rmsnorm_tl").bind(4096, torch.float16, 1e-6)),
    }
    assert len(keys) == 5


@pytest.mark.parametrize("kernel", ["rmsnorm_tl", "rope_tl", "matmul_tl", "gelu_and_mul_tl", "layernorm_tl"])
def test_a_stored_configuration_rebuilds_the_bound_one(kernel):
    """The fields are the factory's parameter names: the plan's configuration binds back to the same one."""
    example = examples(spec(kernel)).benchmark(torch.float16)
    config = spec(kernel).bind(*example.args, **example.kwargs)
    stored = json.loads(json.dumps(_plan.config_fields(config)))
    assert _plan.config_from_json(kernel, stored) == config
    assert spec(kernel).bind(**_plan.factory_arguments(config)) == config


def test_lookup_finds_an_entry_by_any_spelling():
    plan = a_plan({"device": "cpu", "lazyops": "0", "backends": {}})
    entry = _plan.lookup(plan, "rmsnorm_tl", spec("rmsnorm_tl").bind(4096, "bfloat16", eps=1e-5))
    assert entry is plan.entries[1] and entry.backend_for(1) == "fast" and entry.backend_for(16) == "torch"
    assert _plan.lookup(plan, "rmsnorm_tl", rmsnorm_config(512)) is None
    assert _plan.lookup(plan, "add_rmsnorm_tl", spec("add_rmsnorm_tl").bind(256, torch.bfloat16)) is None


# -- the file ----------------------------------------------------------------------------------------------------


def test_a_plan_round_trips_through_its_file(tmp_path):
    plan = a_plan()
    path = tmp_path / "plan.json"
    _plan.save(plan, path)
    text = path.read_text()
    data = json.loads(text)
    assert data["schema"] == _plan.SCHEMA and data["version"] == _plan.VERSION
    assert "lazyops tune --from-trace trace.jsonl" in data["generated_by"]
    assert list(data)[:3] == ["schema", "version", "generated_by"]
    again = _plan.load(path)
    assert again == plan
    assert _plan.as_json(again) == data
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # every rank reads it, whoever runs it
    assert os.listdir(tmp_path) == ["plan.json"]  # no temporary file left


def test_save_replaces_the_file_in_one_step(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    _plan.save(a_plan(), path)
    before = path.read_text()

    def interrupted(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", interrupted)
    plan = a_plan()
    plan.command = "lazyops tune --tokens 1"
    with pytest.raises(OSError, match="No space"):
        _plan.save(plan, path)
    assert path.read_text() == before  # a reader sees the old plan, whole
    assert os.listdir(tmp_path) == ["plan.json"]


def write(tmp_path, payload) -> str:
    path = tmp_path / "plan.json"
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return str(path)


def valid() -> dict:
    return _plan.as_json(a_plan({"device": "cpu", "lazyops": "0.1.0", "backends": {"torch": "0.1.0"}}))


def broken(change) -> dict:
    data = valid()
    change(data)
    return data


@pytest.mark.parametrize(
    ("payload", "where", "problem"),
    [
        ("{not json", None, "not JSON (line 1, column 2"),
        ("[1, 2]", None, "a JSON array, not a lazyops plan"),
        (broken(lambda d: d.update(schema="lazyops-trace")), "schema", "not a lazyops plan"),
        (broken(lambda d: d.update(version=0)), "version", "schema version 0"),
        (broken(lambda d: d.update(version=2)), "version", "written by another lazyops"),
        (broken(lambda d: d.pop("version")), "version", "schema version None"),
        (broken(lambda d: d.update(created=5)), "created", "expected a string"),
        (broken(lambda d: d.update(extra=1)), "extra", "an unknown field"),
        (broken(lambda d: d["timing"].update(method="wallclock")), "timing.method", "'wallclock'"),
        (broken(lambda d: d["timing"].update(tokens=[0])), "timing.tokens", "positive token counts"),
        (broken(lambda d: d["environment"].pop("device")), "environment.device", "expected a string"),
        (broken(lambda d: d.update(entries={})), "entries", "expected a list"),
        (broken(lambda d: d["entries"][0].update(choice="triton")), "entries[0].choice", "'triton' is not one"),
        (broken(lambda d: d["entries"][1]["switch"].update(below=0)), "entries[1].switch", "positive token count"),
        (
            broken(lambda d: d["entries"][0]["candidates"]["torch"]["us"].update(one=2.0)),
            "entries[0].candidates.torch.us.one",
            "token counts",
        ),
        (
            broken(lambda d: d["entries"][0]["candidates"]["torch"]["us"].update({"1": "fast"})),
            "entries[0].candidates.torch.us.1",
            "expected a number",
        ),
        (broken(lambda d: d["entries"][1].update(rejected=["wrong"])), "entries[1].rejected", "reasons"),
        (broken(lambda d: d["entries"].append(d["entries"][0])), "entries[2]", "again"),
    ],
)
def test_a_malformed_plan_is_refused_naming_the_file_the_field_and_the_way_out(tmp_path, payload, where, problem):
    path = write(tmp_path, payload)
    with pytest.raises(ConfigError) as refused:
        _plan.load(path)
    message = str(refused.value)
    assert message.startswith(f"plan {path!r}: {where + ': ' if where else ''}"), message
    assert problem in message and "lazyops tune" in message, message


def test_an_old_schema_is_refused_clearly(tmp_path):
    path = write(tmp_path, broken(lambda d: d.update(version=0)))
    with pytest.raises(ConfigError, match=r"reads version 1 only: the plan was written by another lazyops; make a new"):
        _plan.load(path)


def test_what_is_not_a_regular_file_or_too_big_is_refused_before_reading(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="no such file"):
        _plan.load(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match=r"not a regular file \(a folder\)"):
        _plan.load(tmp_path)
    path = write(tmp_path, valid())
    monkeypatch.setattr(_plan, "MAX_BYTES", 100)
    with pytest.raises(ConfigError, match="bytes, more than a plan's limit of 100"):
        _plan.load(path)
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(ConfigError, match="not UTF-8"):
        _plan.load(tmp_path / "binary.json")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    reader = threading.Thread(target=lambda: _refused(fifo, outcome), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "load() waited on the FIFO"
    assert outcome and "not a regular file (a FIFO)" in str(outcome[0])


def _refused(path, outcome: list[BaseException]) -> None:
    try:
        _plan.load(path)
    except ConfigError as error:
        outcome.append(error)


def test_loading_a_plan_imports_neither_torch_nor_a_backend(tmp_path):
    path = write(tmp_path, valid())
    code = (
        "import sys\nfrom lazyops import _plan\nplan = _plan.load(sys.argv[1])\n"
        "print(len(plan.entries), sorted(m for m in ('torch', 'triton', 'tilelang', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "[]"]


# -- the environment ---------------------------------------------------------------------------------------------


def test_the_environment_here_names_device_versions_and_backends():
    here = _plan.environment_here(origins("torch", "nonesuch"))
    assert here["device"] == ("cpu" if not torch.cuda.is_available() else torch.cuda.get_device_name())
    assert here["torch"] and here["lazyops"] and here["python"]
    assert here["backends"] == {"torch": here["lazyops"], "nonesuch": None}  # a built-in is lazyops' own version


def test_differences_name_each_thing_that_differs_and_only_that():
    here = {
        "device": "cpu",
        "capability": None,
        "python": "3.12.1",
        "torch": "2.11.0",
        "triton": "3.9.0",
        "tilelang": None,
        "lazyops": "0.1.0",
        "backends": {"torch": "0.1.0", "triton": "0.1.0", "extra": "2.0"},
    }
    same = a_plan(dict(here, python="3.11.7", backends={"torch": "0.1.0"}))
    assert _plan.differences(same, here) == []  # Python is recorded, not locked; a backend it never timed is not
    elsewhere = a_plan(
        dict(
            here,
            device="NVIDIA H200",
            capability="9.0",
            triton="3.6.0",
            tilelang="0.1.15",
            backends={"torch": "0.1.0", "fast": "1.0"},
        )
    )
    assert _plan.differences(elsewhere, here) == [
        "device: plan NVIDIA H200, here cpu",
        "capability: plan 9.0, here none (no CUDA device)",
        "triton: plan 3.6.0, here 3.9.0",
        "tilelang: plan 0.1.15, here not installed",
        "backend fast: plan 1.0, here not installed",
    ]


def test_a_third_party_backend_is_locked_to_its_distribution_version(fake_backends):
    from lazyops import _api

    fake_backends.make("halfport", ["rmsnorm_tl"], distribution="halfport-dist")
    _api.reset()
    try:
        assert _plan.environment_here(origins("halfport"))["backends"] == {"halfport": "1.0"}
    finally:
        _api.reset()


# -- the plan in force -------------------------------------------------------------------------------------------


def test_plan_status_says_whether_the_plan_in_force_applies(tmp_path):
    assert _plan.plan_status(origins(), {}) is None and _plan.plan_status(origins(), {"LAZYOPS_PLAN": " "}) is None
    here = tmp_path / "here.json"
    plan = a_plan()
    _plan.save(plan, here)
    device = plan.environment["device"]
    assert (
        _plan.plan_status(origins(), {"LAZYOPS_PLAN": str(here)})
        == f"{here}: 2 entries, measured here ({device}): applies"
    )
    elsewhere = tmp_path / "elsewhere.json"
    _plan.save(
        a_plan(dict(_plan.environment_here(origins("torch")), device="NVIDIA H200", capability="9.0")), elsewhere
    )
    status = _plan.plan_status(origins(), {"LAZYOPS_PLAN": str(elsewhere)})
    assert status.startswith(f"{elsewhere}: 2 entries, not applied here: device: plan NVIDIA H200, here ")
    broken_path = write(tmp_path, "{")
    assert _plan.plan_status(origins(), {"LAZYOPS_PLAN": broken_path}).startswith(
        f"cannot be used: plan {broken_path!r}: not JSON"
    )


# -- the documented schema ---------------------------------------------------------------------------------------

SCHEMA_PAGE = Path(__file__).resolve().parents[2] / "docs" / "plan-schema.md"


def test_the_documented_example_is_a_valid_plan(tmp_path):
    page = SCHEMA_PAGE.read_text()
    (example,) = re.findall(r"```json\n(.*?)```", page, re.DOTALL)
    plan = _plan.load(write(tmp_path, example))
    assert plan.entries[0].backend_for(1) == "tilelang" and plan.entries[0].backend_for(16) == "triton"
    assert f"version `{_plan.VERSION}`" in page or f"`{_plan.VERSION}` |" in page


def test_every_field_a_plan_writes_is_documented():
    page = SCHEMA_PAGE.read_text()
    data = _plan.as_json(a_plan())
    documented = set(re.findall(r"^\| `(\w+)`", page, re.MULTILINE))
    documented |= {
        name
        for row in re.findall(r"^\| (`\w+`(?:, `\w+`)+) \|", page, re.MULTILINE)
        for name in re.findall(r"`(\w+)`", row)
    }
    fields = set(data) | set(data["environment"]) | set(data["timing"]) | set(data["entries"][0])
    assert fields <= documented, fields - documented


@pytest.mark.parametrize(
    ("change", "where", "problem"),
    [
        (lambda d: d.update(version=1.0), "version", "schema version 1.0"),
        (lambda d: d["entries"][0]["candidates"]["torch"]["us"].update({"²": 1.0}), ".us.²", "token counts"),
        (lambda d: d["entries"][0]["candidates"]["torch"]["us"].update({"١٢": 1.0}), ".us.١٢", "token counts"),
        (lambda d: d["entries"][0]["candidates"]["torch"]["us"].update({"１": 1.0}), ".us.１", "token counts"),
        (lambda d: d["entries"][0]["config"].update(n="NESTED"), "entries[0].config.n[0]", "nested more than"),
    ],
)
def test_a_hostile_plan_is_one_config_error_naming_the_field(tmp_path, change, where, problem):
    """Issue 33.2: 1.0 for 1 and timing keys in non-ASCII digits were accepted; "²" and 980 levels of nesting let
    ValueError and RecursionError out (500 deep: json.loads reads it; what walked it next did not)."""
    path = write(tmp_path, json.dumps(broken(change)).replace('"NESTED"', "[" * 500 + "1" + "]" * 500))
    with pytest.raises(ConfigError) as refused:
        _plan.load(path)
    message = str(refused.value)
    assert message.startswith(f"plan {path!r}: ") and where in message and problem in message, message


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="no /proc/self/mem here")
def test_a_plan_that_cannot_be_read_is_a_config_error_naming_it(tmp_path):
    """Issue 33.2: a link to /proc/self/mem let OSError [Errno 5] out, naming no file."""
    link = tmp_path / "plan.json"
    link.symlink_to("/proc/self/mem")
    with pytest.raises(ConfigError, match=rf"plan {str(link)!r}: cannot be read"):
        _plan.load(link)
