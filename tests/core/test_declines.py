"""A backend may decline a configuration it cannot serve (issue 30): the configuration goes on down the chain, as a
kernel the backend lacks does; strict mode refuses it with the reason; ``lazyops.which(name, *args)`` answers for
one configuration; each configuration that goes elsewhere is said once. Run in fresh interpreters: what is printed
at first call is the product."""

from __future__ import annotations

import textwrap

from fresh_interpreter import run_python

#: A port whose rmsnorm serves widths up to 128 and declines wider rows, and whose softmax declines nothing.
PICKY = """
import torch
from lazyops.specs import rmsnorm, softmax

def narrow_only(config):
    return None if config.n <= 128 else f"n={config.n}: this port's rmsnorm holds rows of up to 128 features"

@rmsnorm.spec.implementation(supports=narrow_only)
def rmsnorm_tl(config):
    def launch(x, weight):
        return rmsnorm.rmsnorm_reference(x.float(), weight.float(), config.eps).to(config.dtype)
    return launch

@softmax.spec.implementation
def softmax_tl(config):
    return lambda x: torch.softmax(x.float(), -1).to(config.dtype)
"""


def picky(fake_backends) -> None:
    directory = fake_backends.root / "picky_port"
    directory.mkdir()
    (directory / "__init__.py").write_text(textwrap.dedent(PICKY))
    fake_backends.register("picky", "picky_port", "picky-port")


def run(fake_backends, code: str, **env: str):
    picky(fake_backends)
    return run_python(code, fake_backends.env(**env))


def test_a_declined_configuration_comes_from_the_next_backend_and_is_said_once(fake_backends):
    result = run(
        fake_backends,
        """
        import torch, lazyops
        narrow = lazyops.rmsnorm_tl(64, torch.float32)
        wide = lazyops.rmsnorm_tl(256, torch.float32)
        again = lazyops.rmsnorm_tl(256, torch.float32)
        x, w = torch.randn(2, 256), torch.randn(256)
        torch.testing.assert_close(wide(x, w), lazyops.testing.reference("rmsnorm_tl")(x, w, n=256, dtype=torch.float32).float())
        print("narrow", lazyops.which("rmsnorm_tl", 64, torch.float32).backend)
        r = lazyops.which("rmsnorm_tl", 256, torch.float32)
        print("wide", r.backend, r.reason, dict(r.declined))
        """.replace("lazyops.testing", "__import__('lazyops.testing').testing"),
        LAZYOPS_BACKEND="picky",
    )
    assert result.returncode == 0, result.stderr
    assert "narrow picky" in result.stdout
    assert (
        "wide torch declined {'picky': \"n=256: this port's rmsnorm holds rows of up to 128 features\"}"
        in result.stdout
    )
    lines = [line for line in result.stderr.splitlines() if "rmsnorm_tl(n=256" in line]
    assert lines == [
        "lazyops: rmsnorm_tl(n=256, dtype=torch.float32, eps=1e-06) runs from 'torch': 'picky' declines it "
        "(n=256: this port's rmsnorm holds rows of up to 128 features)"
    ], result.stderr


def test_strict_mode_refuses_a_declined_configuration_with_the_reason(fake_backends):
    result = run(
        fake_backends,
        """
        import torch, lazyops
        lazyops.rmsnorm_tl(64, torch.float32)
        try:
            lazyops.rmsnorm_tl(256, torch.float32)
        except lazyops.KernelUnavailableError as error:
            print("refused:", error)
            import pickle
            print("declined:", pickle.loads(pickle.dumps(error)).declined == error.declined, error.declined)
        """,
        LAZYOPS_BACKEND="picky",
        LAZYOPS_STRICT="1",
    )
    assert result.returncode == 0, result.stderr
    # what the pytest plugin reads to say "declines", not "lacks": the backends, each with its reason
    assert (
        "declined: True (('picky', \"n=256: this port's rmsnorm holds rows of up to 128 features\"),)" in result.stdout
    ), result.stdout
    assert (
        "refused: rmsnorm_tl(n=256, dtype=torch.float32, eps=1e-06) is not served here: 'picky' declines it"
        in result.stdout
    )
    assert "rows of up to 128 features" in result.stdout and "unset LAZYOPS_STRICT" in result.stdout


def test_a_factory_that_declines_nothing_is_the_backends_own_object(fake_backends):
    result = run(
        fake_backends,
        """
        import lazyops, picky_port
        print(lazyops.softmax_tl is picky_port.softmax_tl, lazyops.rmsnorm_tl is picky_port.rmsnorm_tl)
        """,
        LAZYOPS_BACKEND="picky",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]


def test_the_backends_own_factory_refuses_a_configuration_it_declines(fake_backends):
    result = run(
        fake_backends,
        """
        import torch, picky_port
        from lazyops import KernelInputError
        try:
            picky_port.rmsnorm_tl(256, torch.float32)
        except KernelInputError as error:
            print(error)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert "backend 'picky_port' does not serve this configuration: n=256" in result.stdout
    assert "lazyops.which('rmsnorm_tl', ...)" in result.stdout
