"""Name resolution: the fully qualified names an expression may stand for.

``sp.run`` -> ``subprocess.run`` after ``import subprocess as sp``; ``sys.modules["os"].system``
and ``getattr(__import__("os"), "sys" + "tem")`` -> ``os.system``; builtins are spelled
``builtins.eval``. An empty set means the expression is not known to be any listed thing.
"""

from __future__ import annotations

import ast
import builtins

from sandbox.scanner.bindings import Bindings
from sandbox.scanner.folding import Folder
from sandbox.scanner.nodes import argument

# Alias chains deeper than this (through recursion, not through the memo) count as unknown.
MAX_ALIAS_DEPTH = 64
# The getattr-like functions whose result is the attribute's value.
VALUE_GETTERS = frozenset({"getattr", "getattr_static"})
# Functions that return the module or member named by their first argument.
MODULE_RETURNING = frozenset(
    {
        "builtins.__import__",
        "importlib.__import__",
        "importlib.import_module",
        "sys.modules.get",
        "pkgutil.resolve_name",
    }
)
_BUILTIN_NAMES = frozenset(dir(builtins))


class NameResolver:
    """Resolves expressions of one scan against its complete ``bindings``.

    ``values`` folds the literal strings the resolver needs (the name in ``getattr(os, n)``);
    folding needs resolution back (``chr(115)``), so the resolver owns its folder. Every
    result is memoised: names by identifier, other nodes by identity.
    """

    def __init__(self, bindings: Bindings, *, getattr_functions: frozenset[str]) -> None:
        self.bindings = bindings
        self.getattr_functions = getattr_functions
        self.values = Folder(bindings, self.qualnames)
        self._name_memo: dict[str, frozenset[str]] = {}
        self._resolving: set[str] = set()
        self._alias_depth = 0
        self._qual_memo: dict[int, frozenset[str]] = {}
        # Resolving in binding order lets each link of an alias chain reuse the previous one,
        # so long chains stay within MAX_ALIAS_DEPTH.
        for name in bindings.assigned:
            self.name_qualnames(name)

    def name_qualnames(self, name: str) -> frozenset[str]:
        """Every fully qualified name ``name`` may stand for (empty if unknown)."""
        memo = self._name_memo.get(name)
        if memo is not None:
            return memo
        if name in self._resolving or self._alias_depth > MAX_ALIAS_DEPTH:
            return frozenset()
        bindings = self.bindings
        self._resolving.add(name)
        self._alias_depth += 1
        try:
            quals = set(bindings.imports.get(name, ()))
            if not quals:
                if name in _BUILTIN_NAMES:
                    quals.add(f"builtins.{name}")
                if name == "__builtins__":
                    quals.add("builtins")
                if name not in bindings.rebound and name not in bindings.assigned:
                    quals.update(f"{module}.{name}" for module in bindings.star_modules)
            for value in bindings.assigned.get(name, ()):
                quals |= self.qualnames(value)
        finally:
            self._resolving.discard(name)
            self._alias_depth -= 1
        result = frozenset(quals)
        self._name_memo[name] = result
        return result

    def qualnames(self, node: ast.expr) -> frozenset[str]:
        """Every fully qualified name ``node`` may stand for: names, attribute chains, calls
        that return modules or members, ``sys.modules[...]`` and ``globals()[...]``."""
        if type(node) is ast.Name:
            return self.name_qualnames(node.id)
        memo = self._qual_memo.get(id(node))
        if memo is not None:
            return memo
        if isinstance(node, ast.Attribute):
            chain: list[ast.Attribute] = []
            current: ast.expr = node
            base: frozenset[str] | None = None
            while isinstance(current, ast.Attribute):
                base = self._qual_memo.get(id(current))
                if base is not None:
                    break
                chain.append(current)
                current = current.value
            if base is None:
                base = self.qualnames(current)
            for link in reversed(chain):
                base = frozenset(f"{q}.{link.attr}" for q in base)
                self._qual_memo[id(link)] = base
            return base
        result: frozenset[str] = frozenset()
        if isinstance(node, ast.NamedExpr):
            result = self.qualnames(node.value)
        elif isinstance(node, ast.Call):
            result = self._call_qualnames(node)
        elif isinstance(node, ast.Subscript):
            result = self._subscript_qualnames(node)
        self._qual_memo[id(node)] = result
        return result

    def _call_qualnames(self, call: ast.Call) -> frozenset[str]:
        """What a call returns, for the calls that return modules or their attributes:
        ``__import__("os")``, ``importlib.import_module(...)``, ``getattr(os, "system")``."""
        func = call.func
        str_values = self.values.str_values
        if isinstance(func, ast.Attribute) and func.attr == "__getattribute__" and call.args:
            receiver = call.args[0] if len(call.args) == 2 else func.value
            names = str_values(call.args[-1])
            if names is None:
                return frozenset()
            return frozenset(f"{q}.{name}" for q in self.qualnames(receiver) for name in names)
        funcs = self.qualnames(func)
        dunder_import = _is_dunder_import(func)
        if not funcs and not dunder_import:
            return frozenset()
        getters = funcs & self.getattr_functions
        if any(q.rpartition(".")[2] in VALUE_GETTERS for q in getters):
            names = str_values(argument(call, 1, "name"))
            if names is None or not call.args:
                return frozenset()
            return frozenset(f"{q}.{name}" for q in self.qualnames(call.args[0]) for name in names)
        if not dunder_import and not funcs & MODULE_RETURNING:
            return frozenset()
        literals = str_values(argument(call, 0, "name"))
        if literals is None:
            return frozenset()
        quals: set[str] = set()
        if dunder_import or funcs & {"builtins.__import__", "importlib.__import__"}:
            for name in literals:
                quals.update({name, name.partition(".")[0]})
        if funcs & {"importlib.import_module", "sys.modules.get"}:
            quals.update(literals)
        if "pkgutil.resolve_name" in funcs:
            quals.update(name.replace(":", ".") for name in literals)
        return frozenset(quals)

    def _subscript_qualnames(self, node: ast.Subscript) -> frozenset[str]:
        keys = self.values.str_values(node.slice)
        if keys is None:
            return frozenset()
        value_quals = self.qualnames(node.value)
        if "sys.modules" in value_quals:
            return frozenset(keys)
        if (
            isinstance(node.value, ast.Call)
            and not node.value.args
            and self.qualnames(node.value.func) & {"builtins.globals", "builtins.locals"}
        ):
            return frozenset(q for key in keys for q in self.name_qualnames(key))
        return frozenset()


def _is_dunder_import(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "__import__"
