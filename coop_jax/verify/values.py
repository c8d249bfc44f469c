"""Structured answer values produced by :mod:`coop_jax.verify.parse`.

Frozen dataclasses, so parsed values can be cached and compared cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union as _U


@dataclass(frozen=True)
class Scalar:
    value: object  # Fraction or sympy.Expr
    src: str
    percent: bool = False
    decimal: tuple | None = None  # (significant digits, places) of a decimal literal


@dataclass(frozen=True)
class Text:
    value: str
    ratio: object = None  # "7:32" is also the ratio 7/32 (a Fraction), compared with numbers


@dataclass(frozen=True)
class Choice:
    letter: str
    rest: str = ""  # the option's value when written as "(C) 12"


@dataclass(frozen=True)
class BaseNum:
    digits: str
    base: int


@dataclass(frozen=True)
class Seq:
    items: tuple
    kind: str  # "set" | "tuple" | "bare"
    open: str = ""
    close: str = ""
    labels: tuple = ()  # "p=5, q=2" -> the tuple (5, 2) with labels ("p", "q")
    alt: object = None  # "3,75" -> also the Scalar 3.75 (decimal comma), compared with scalars


@dataclass(frozen=True)
class Union:
    parts: tuple


@dataclass(frozen=True)
class Relation:
    op: str  # "=", "<", "<=", "!=" ("a > b" is stored as "b < a")
    lhs: object
    rhs: object
    assign: bool = False  # "label = value", where the label names the quantity asked for


@dataclass(frozen=True)
class Matrix:
    rows: tuple


@dataclass(frozen=True)
class Opaque:
    src: str


Value = _U[Scalar, Text, Choice, BaseNum, Seq, Union, Relation, Matrix, Opaque]
