"""One signature checker: does a backend's factory take the arguments the kernel's spec says, typed alike?

Used by the stub generator (which writes the spec's signature for every kernel), by the conformance kit (which
refuses a third-party factory that drifts) and by the tests of the built-in backends, so "agrees with
the canonical signature" means one thing everywhere. Compared: the parameters' names, order, kinds, defaults and
annotations, and the kernel the factory returns (a ``Protocol`` with a ``__call__``, or a ``Callable[[...], R]``:
both spell the same call).
"""

from __future__ import annotations

import ast
import collections.abc
import inspect
import sys
import typing
from collections.abc import Callable
from typing import Any

from lazyops._annotations import Renderer, SignatureError, is_kernel_protocol


def evaluated_signature(function: Callable[..., Any], where: str) -> inspect.Signature:
    """The signature with its annotations evaluated (the modules write them as strings).

    Names a module imports only for type checkers (under ``if TYPE_CHECKING:``, to keep its import light) are
    imported here, as a type checker would see them.
    """
    try:
        return inspect.signature(function, eval_str=True)
    except NameError:
        pass
    try:
        return inspect.signature(function, globals=type_checking_namespace(function), eval_str=True)
    except NameError as error:
        raise SignatureError(
            f"{where}: an annotation cannot be evaluated ({error}); import the names the annotations use in the "
            "factory's module (at module level or under `if TYPE_CHECKING:`)"
        ) from error


def type_checking_namespace(function: Callable[..., Any]) -> dict[str, Any]:
    """The globals of ``function``'s module plus what its ``if TYPE_CHECKING:`` blocks import."""
    module = sys.modules[inspect.unwrap(function).__module__]
    namespace = dict(vars(module))
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if not isinstance(node, ast.If) or ast.unparse(node.test) not in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            continue
        imports: list[ast.stmt] = [line for line in node.body if isinstance(line, (ast.Import, ast.ImportFrom))]
        code = compile(ast.Module(body=imports, type_ignores=[]), module.__name__, "exec")
        exec(code, namespace)  # import statements of the module's own source, nothing else
    return namespace


def call_shape(annotation: object) -> tuple[tuple[object, ...], object] | None:
    """``((argument types...), result)`` of a kernel's type: a protocol's ``__call__`` or a ``Callable[[...], R]``.

    Both spell the same kernel call, so a backend that writes ``Callable[[Tensor], Tensor]`` agrees with a
    canonical signature that returns ``SoftmaxKernel``; parameter names are documentation (the protocols take
    positional arguments). The keyword-only options of a call (``out=``) are the spec's wrapper's, which every
    factory's kernel gets, and a ``Callable`` cannot spell them: only the positional arguments are compared.
    """
    if is_kernel_protocol(annotation):
        call = inspect.signature(vars(typing.cast(type, annotation))["__call__"], eval_str=True)
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        arguments = tuple(p.annotation for p in list(call.parameters.values())[1:] if p.kind in positional)
        return arguments, call.return_annotation
    if typing.get_origin(annotation) is collections.abc.Callable and typing.get_args(annotation):
        parameters, result = typing.get_args(annotation)
        if parameters is not Ellipsis:
            return tuple(parameters), result
    return None


def _shown(annotation: object) -> str:
    if annotation is inspect.Parameter.empty:
        return "no annotation"
    shape = call_shape(annotation)
    renderer = Renderer()
    if shape is not None:
        arguments, result = shape
        text = f"({', '.join(renderer.annotation(a, '') for a in arguments)}) -> {renderer.annotation(result, '')}"
        return f"a kernel {text}"
    try:
        return renderer.annotation(annotation, "")
    except SignatureError:
        return repr(annotation)


def _same_type(left: object, right: object) -> bool:
    shapes = call_shape(left), call_shape(right)
    if shapes[0] is not None or shapes[1] is not None:
        return shapes[0] == shapes[1]
    return left == right


def signature_mismatches(
    kernel: str,
    backend: str,
    function: Callable[..., Any],
    canonical_source: str,
    canonical_factory: Callable[..., Any],
) -> list[str]:
    """Every way ``backend``'s factory for ``kernel`` differs from the canonical one, one sentence each.

    The canonical factory is the torch backend's (or, for the conformance kit, the spec's); ``canonical_source``
    names it in the sentences.

    Compared: the parameters' names, order, kinds, defaults and annotations, and the kernel the factory returns.
    Each sentence names the backend, the kernel and the parameter, so a failing test says what to fix.
    """
    head = f"backend {backend!r}, {kernel}"
    ref = f"the canonical signature ({canonical_source!r})"
    try:
        signature = evaluated_signature(function, head)
    except SignatureError as error:
        return [str(error)]
    canonical = evaluated_signature(canonical_factory, f"backend {canonical_source!r}, {kernel}")
    problems: list[str] = []
    ours, theirs = signature.parameters, canonical.parameters
    for name in theirs:
        if name not in ours:
            problems.append(f"{head}: parameter {name!r} is missing ({ref} has `{theirs[name]}`)")
    for name in ours:
        if name not in theirs:
            problems.append(f"{head}: parameter {name!r} is not in {ref} (it has ({', '.join(theirs)}))")
    common = [name for name in ours if name in theirs]
    if common != [name for name in theirs if name in ours]:
        problems.append(f"{head}: parameters are in the order ({', '.join(ours)}); {ref} has ({', '.join(theirs)})")
    for name in common:
        mine, canon = ours[name], theirs[name]
        if mine.kind != canon.kind:
            problems.append(
                f"{head}: parameter {name!r} is {mine.kind.description}; {ref} has {canon.kind.description}"
            )
        if mine.default != canon.default:
            problems.append(f"{head}: parameter {name!r} has {_default(mine)}; {ref} has {_default(canon)}")
        # No annotation has nothing to disagree with (a third-party factory may leave them out); one that is
        # written must say what the spec says, since the stubs promise the spec's types whichever backend serves.
        if mine.annotation is not mine.empty and not _same_type(mine.annotation, canon.annotation):
            problems.append(
                f"{head}: parameter {name!r} is annotated {_shown(mine.annotation)}; "
                f"{ref} has {_shown(canon.annotation)}"
            )
    if signature.return_annotation is not signature.empty and not _same_type(
        signature.return_annotation, canonical.return_annotation
    ):
        problems.append(
            f"{head}: returns {_shown(signature.return_annotation)}; "
            f"{ref} returns {_shown(canonical.return_annotation)}"
        )
    return problems


def _default(parameter: inspect.Parameter) -> str:
    return "no default" if parameter.default is parameter.empty else f"default {parameter.default!r}"
