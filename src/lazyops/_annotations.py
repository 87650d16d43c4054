"""Annotations as source text: how the stub generator writes a type, and how the signature checker names one.

Both need one spelling (a kernel protocol, a union, a ``Callable``, a class by its module), and the checker is
used by the generator: the spelling lives here, below both, so that imports go one way
(``_stubgen`` -> ``_signature`` -> ``_annotations``).
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing


class SignatureError(Exception):
    """A signature or annotation that cannot be read or written as a stub; the message names the factory."""


def is_kernel_protocol(annotation: object) -> bool:
    """A ``Protocol`` class with its own ``__call__``: a kernel's call, written out in the stub."""
    return (
        isinstance(annotation, type)
        and bool(getattr(annotation, "_is_protocol", False))
        and "__call__" in vars(annotation)
    )


class Renderer:
    """Writes annotation objects as stub text, collecting the imports and the kernel protocols they need."""

    def __init__(self) -> None:
        self.imports: set[str] = set()
        self.protocols: dict[type, str] = {}
        self._protocol_names: dict[str, type] = {}

    def annotation(self, annotation: object, where: str) -> str:
        if annotation is None or annotation is type(None):
            return "None"
        if annotation is Ellipsis:
            return "..."
        if annotation is typing.Any:
            self.imports.add("from typing import Any")
            return "Any"
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if isinstance(annotation, types.UnionType) or origin is typing.Union:
            return " | ".join(self.annotation(arg, where) for arg in args)
        if origin is typing.Literal:
            self.imports.add("from typing import Literal")
            return f"Literal[{', '.join(map(repr, args))}]"
        if origin is collections.abc.Callable and args:
            parameters, result = args  # ([A, B], R), or (Ellipsis, R)
            inner = "..." if parameters is Ellipsis else f"[{', '.join(self.annotation(a, where) for a in parameters)}]"
            return f"{self.annotation(collections.abc.Callable, where)}[{inner}, {self.annotation(result, where)}]"
        if origin is not None:
            if not args:  # tuple[()]
                return f"{self.annotation(origin, where)}[()]"
            return f"{self.annotation(origin, where)}[{', '.join(self.annotation(a, where) for a in args)}]"
        if is_kernel_protocol(annotation):
            return self._protocol(typing.cast(type, annotation))
        if isinstance(annotation, type):
            if annotation.__module__ == "builtins":
                return annotation.__qualname__
            self.imports.add(f"import {annotation.__module__}")
            return f"{annotation.__module__}.{annotation.__qualname__}"
        raise SignatureError(
            f"{where}: the annotation {annotation!r} has no spelling in a stub; use a class or a typing form"
        )

    def _protocol(self, protocol: type) -> str:
        if protocol not in self.protocols:
            name = f"_{protocol.__name__}"
            if name in self._protocol_names:
                other = self._protocol_names[name]
                raise SignatureError(
                    f"two kernel protocols are both named {protocol.__name__!r}: {other.__module__} and "
                    f"{protocol.__module__}; rename one"
                )
            self.protocols[protocol] = name
            self._protocol_names[name] = protocol
        return self.protocols[protocol]

    def parameters(self, signature: inspect.Signature, where: str, skip_first: bool = False) -> list[str]:
        """The parameters of a ``def`` as written in it, with ``/`` and ``*`` where the kinds change."""
        P = inspect.Parameter
        parts: list[str] = []
        parameters = list(signature.parameters.values())[1 if skip_first else 0 :]
        keyword_only_marked = False
        for index, parameter in enumerate(parameters):
            if parameter.kind is P.KEYWORD_ONLY and not keyword_only_marked:
                parts.append("*")
            if parameter.kind in (P.KEYWORD_ONLY, P.VAR_POSITIONAL):
                keyword_only_marked = True
            stars = "*" if parameter.kind is P.VAR_POSITIONAL else "**" if parameter.kind is P.VAR_KEYWORD else ""
            text = stars + parameter.name
            if parameter.annotation is not P.empty:
                text += f": {self.annotation(parameter.annotation, f'{where}, parameter {parameter.name!r}')}"
            if parameter.default is not P.empty:
                text += (" = " if parameter.annotation is not P.empty else "=") + default_text(parameter.default)
            parts.append(text)
            following = parameters[index + 1] if index + 1 < len(parameters) else None
            if parameter.kind is P.POSITIONAL_ONLY and (following is None or following.kind is not P.POSITIONAL_ONLY):
                parts.append("/")
        if skip_first:
            parts.insert(0, "self")
        return parts

    def returns(self, signature: inspect.Signature, where: str) -> str:
        if signature.return_annotation is inspect.Signature.empty:
            return ""
        return f" -> {self.annotation(signature.return_annotation, f'{where}, return annotation')}"


def default_text(value: object) -> str:
    """A literal default as written in the source; anything else is ``...`` (stubs do not evaluate defaults)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    return "..."
