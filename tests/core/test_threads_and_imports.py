"""Threads, the import system, fork: lazyops never holds a lock of its own while a backend's code runs.

Each scenario runs in a fresh interpreter (the first access happens once per process) and guards every wait with a
timeout, so that a regression fails with a message instead of hanging the test run.
"""

from __future__ import annotations

import json

import pytest

from fresh_interpreter import run_python

# A platform default of our own, so that the races need no torch: patched before lazyops' namespace is built.
FAKE_DEFAULT = """
import lazyops._backends
lazyops._backends.platform_default = lambda: "base"
"""


def last_json(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def race_backends(fake_backends, tmp_path):
    """'ext' (selected; counts its register_backend calls), 'base' (the default), 'other' (not selected)."""
    calls = tmp_path / "register-calls"
    register = f"""
    def register_backend():
        with open({str(calls)!r}, "a") as calls:
            calls.write("x")
    """
    fake_backends.make("ext", ["alpha_tl"], init_code=register, kernel_code="import time; time.sleep(0.05)")
    fake_backends.make("base", ["alpha_tl", "beta_tl"])
    fake_backends.make("other", ["gamma_tl"])
    return fake_backends, calls


RACE = (
    FAKE_DEFAULT
    + """
import json, sys, threading
import lazyops

namespaces_built = []

def count_namespaces(frame, event, arg):
    # A profile hook, not a patch: lazyops._namespace must not be imported before the race (that import is the
    # window in which threads used to build namespaces of their own).
    if event == "call" and frame.f_code.co_name == "__init__" and type(frame.f_locals.get("self")).__name__ == "Namespace":
        namespaces_built.append(1)

threading.setprofile(count_namespaces)
THREADS = 64
with_configure = sys.argv[1] == "configure"
barrier = threading.Barrier(THREADS + with_configure)
seen = [None] * THREADS
errors = []

def first_access(index):
    barrier.wait()
    try:
        selected, inherited = lazyops.alpha_tl, lazyops.beta_tl
        missing = hasattr(lazyops, "gamma_tl")
        inherited()
        seen[index] = (lazyops._state(), selected, inherited, missing)  # the objects, kept alive: ids stay unique
    except BaseException as error:
        errors.append(repr(error))

def configure():
    barrier.wait()
    try:
        lazyops.configure(backend="ext,other")
    except BaseException as error:
        errors.append(repr(error))

threads = [threading.Thread(target=first_access, args=(i,)) for i in range(THREADS)]
threads += [threading.Thread(target=configure)] if with_configure else []
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(30)
print(json.dumps({
    "alive": sum(thread.is_alive() for thread in threads),
    "errors": errors,
    "states": len({id(s[0]) for s in seen if s} | {id(lazyops._state())}),
    "namespaces_built": len(namespaces_built),
    "selected_objects": len({id(s[1]) for s in seen if s}),
    "inherited_objects": len({id(s[2]) for s in seen if s}),
    "missing_seen_as": sorted({s[3] for s in seen if s}),
    "gamma_now_from": lazyops.which("gamma_tl").backend if with_configure else None,
}))
"""
)


@pytest.mark.parametrize("mode", ["access", "configure"])
def test_threads_racing_the_very_first_access_build_one_namespace(race_backends, mode):
    """64 threads race the first access of a selected, an inherited and a missing kernel in a fresh interpreter
    (and, in the 'configure' mode, one more thread calls configure() meanwhile).

    Before the fix every single run of this race showed the defect (64 namespaces built for 64 threads, so 64
    register_backend() calls, 64 summary lines, and a lost configure()); it is repeated 5 times so that a narrower
    window, should one come back, is still caught.
    """
    backends, calls = race_backends
    for repetition in range(5):
        calls.write_text("")
        result = run_python(RACE, backends.env(LAZYOPS_BACKEND="ext"), mode)
        report = last_json(result)
        assert report["alive"] == 0 and report["errors"] == [], report
        assert report["states"] == report["namespaces_built"] == 1, (repetition, report)
        assert calls.read_text() == "x", (
            f"register_backend ran {len(calls.read_text())} times (repetition {repetition})"
        )
        lines = [line for line in result.stderr.splitlines() if line.startswith("lazyops:")]
        assert len(lines) == len(set(lines)), f"a line printed twice (repetition {repetition}):\n{result.stderr}"
        if mode == "access":
            assert report["selected_objects"] == report["inherited_objects"] == 1, report
            assert report["missing_seen_as"] == [False]
            assert sum("lacks" in line for line in lines) == 1
            assert sum("(inherited)" in line for line in lines) == 1
        else:
            assert report["gamma_now_from"] == "other", f"configure() was lost (repetition {repetition}): {report}"


BACKEND_WAITS_FOR_MAIN = """
import builtins
builtins.backend_started.set()
if not builtins.backend_release.wait(10):
    raise RuntimeError("never released")
"""


def test_import_of_a_backend_alias_does_not_block_unrelated_imports(fake_backends):
    fake_backends.make("slowinit", ["alpha_tl"], init_code=BACKEND_WAITS_FOR_MAIN)
    (fake_backends.root / "unrelated_module.py").write_text("VALUE = 1\n")
    code = """
    import builtins, json, threading
    builtins.backend_started, builtins.backend_release = threading.Event(), threading.Event()
    import lazyops

    importer = threading.Thread(target=lambda: __import__("lazyops.slowinit"))
    importer.start()
    assert builtins.backend_started.wait(10)
    unrelated = threading.Thread(target=lambda: __import__("unrelated_module"))
    unrelated.start()
    unrelated.join(5)
    blocked = unrelated.is_alive()
    builtins.backend_release.set()
    importer.join(10)
    import sys
    print(json.dumps({"blocked": blocked, "alias": sys.modules["lazyops.slowinit"] is sys.modules["lazyops_fake_slowinit"]}))
    """
    report = last_json(run_python(code, fake_backends.env()))
    assert report == {"blocked": False, "alias": True}


def test_a_backend_whose_import_uses_a_helper_thread_does_not_stall(fake_backends):
    (fake_backends.root / "helper_module.py").write_text("VALUE = 2\n")
    helper = """
    import threading
    helper = threading.Thread(target=lambda: __import__("helper_module"))
    helper.start()
    helper.join(5)
    HELPER_STALLED = helper.is_alive()
    """
    fake_backends.make("helped", ["alpha_tl"], init_code=helper)
    code = """
    import json, os, threading
    import lazyops
    box = []
    importer = threading.Thread(target=lambda: box.append(__import__("lazyops.helped").helped))
    importer.start()
    importer.join(20)
    print(json.dumps({"finished": not importer.is_alive(), "stalled": box[0].HELPER_STALLED if box else None}), flush=True)
    os._exit(0)
    """
    assert last_json(run_python(code, fake_backends.env())) == {"finished": True, "stalled": False}


def test_register_backend_calling_which_while_another_thread_resolves_does_not_deadlock(fake_backends):
    register = """
    import builtins, time
    def register_backend():
        import lazyops
        builtins.in_register.set()
        time.sleep(0.5)  # the other thread starts its first access meanwhile
        lazyops.which("alpha_tl")
    """
    fake_backends.make("hooked", ["alpha_tl"], init_code=register)
    fake_backends.make("other", ["beta_tl"])
    code = """
    import builtins, json, os, threading
    builtins.in_register = threading.Event()
    import lazyops
    lazyops.kernels()  # discovery done: the race is between loading and resolving, not discovering
    errors = []
    def run(work):
        try:
            work()
        except BaseException as error:
            errors.append(repr(error))
    importer = threading.Thread(target=run, args=(lambda: __import__("lazyops.hooked"),))
    importer.start()
    assert builtins.in_register.wait(10)
    accessor = threading.Thread(target=run, args=(lambda: lazyops.beta_tl,))
    accessor.start()
    importer.join(10)
    accessor.join(10)
    print(json.dumps({"deadlocked": importer.is_alive() or accessor.is_alive(), "errors": errors}), flush=True)
    os._exit(0)
    """
    report = last_json(run_python(code, fake_backends.env(LAZYOPS_BACKEND="hooked,other")))
    assert report == {"deadlocked": False, "errors": []}


def test_fork_while_another_thread_resolves_leaves_the_child_a_usable_namespace(fake_backends):
    fake_backends.make(
        "slow", ["alpha_tl"], kernel_code="import builtins; builtins.loading.set(); import time; time.sleep(2)"
    )
    fake_backends.make("quick", ["beta_tl"])
    code = """
    import builtins, json, os, threading, time
    builtins.loading = threading.Event()
    import lazyops
    lazyops.configure(backend="slow,quick")
    resolver = threading.Thread(target=lambda: lazyops.alpha_tl)
    resolver.start()
    assert builtins.loading.wait(10)
    pid = os.fork()
    if pid == 0:
        code = 0 if lazyops.beta_tl()[0] == "quick" and lazyops.which("alpha_tl").backend == "slow" else 3
        os._exit(code)
    deadline = time.monotonic() + 15
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    resolver.join()
    print(json.dumps({"child_exit": os.waitstatus_to_exitcode(status) if status is not None and done else "hung"}))
    """
    report = last_json(run_python(code, fake_backends.env()))
    assert report == {"child_exit": 0}


def test_a_backend_that_resolves_its_own_kernel_while_loading_gets_an_error_not_a_hang(fake_backends):
    register = """
    def register_backend():
        import lazyops
        lazyops.alpha_tl
    """
    fake_backends.make("selfish", ["alpha_tl"], init_code=register)
    code = """
    import json, threading, lazyops
    box = []
    def access():
        try:
            lazyops.alpha_tl
        except lazyops.BackendError as error:
            box.append(str(error))
    thread = threading.Thread(target=access)
    thread.start()
    thread.join(10)
    print(json.dumps({"hung": thread.is_alive(), "error": box[0] if box else None}))
    """
    report = last_json(run_python(code, fake_backends.env(LAZYOPS_BACKEND="selfish")))
    assert not report["hung"]
    assert "asks for one of its own kernels" in report["error"]
