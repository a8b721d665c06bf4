"""The AST safety scan: one table per rule, obfuscated spellings included, plus clean code,
the report format, the input limits, path normalisation and custom policies."""

from __future__ import annotations

import dataclasses
import pathlib
import sysconfig

import pytest

from sandbox.scanner import DEFAULT_POLICY, Finding, ScanPolicy, ScanReport, scan

CLEAN = "No safety issues detected."


def hits(code: str, policy: ScanPolicy = DEFAULT_POLICY) -> set[tuple[str, str, int]]:
    return {(f.rule_id, f.level, f.line) for f in scan(code, policy).findings}


def assert_finding(
    code: str, rule_id: str, level: str, line: int, policy: ScanPolicy = DEFAULT_POLICY
) -> None:
    report = scan(code, policy)
    found = {(f.rule_id, f.level, f.line) for f in report.findings}
    assert (rule_id, level, line) in found, report.text
    assert report.blocked == any(f.level == "blocked" for f in report.findings)


# --- process creation ---------------------------------------------------------------------

PROCESS_CASES = [
    ("import subprocess", "process.subprocess", 1),
    ("import subprocess as sp\nsp.run(['ls'])", "process.subprocess", 2),
    ("from subprocess import run as go\ngo(['ls'])", "process.subprocess", 1),
    ("from subprocess import *\ncall('ls')", "process.subprocess", 1),
    ("import os\nos.system('ls')", "process.os.system", 2),
    ("from os import system as s\ns('ls')", "process.os.system", 1),
    ("from os import system as s\ns('ls')", "process.os.system", 2),
    ("from os import *\nsystem('ls')", "process.os.system", 2),
    ("import os as o\nrun = o.popen\nrun('ls')", "process.os.popen", 3),
    ("import os\na = os\nb = a\nb.system('ls')", "process.os.system", 4),
    ("import os\nos.execv('/bin/sh', ['sh'])", "process.os.execv", 2),
    ("import os\nos.spawnlp(os.P_WAIT, 'ls', 'ls')", "process.os.spawnlp", 2),
    ("import os\npid = os.fork()", "process.os.fork", 2),
    ("import os\nos.forkpty()", "process.os.forkpty", 2),
    ("import os\nos.posix_spawnp('ls', ['ls'], {})", "process.os.posix_spawnp", 2),
    ("import os.path\nos.popen('ls')", "process.os.popen", 2),
    ("import pty", "process.pty", 1),
    ("from multiprocessing import Pool", "process.multiprocessing", 1),
    ("import multiprocessing.pool", "process.multiprocessing", 1),
    (
        "import asyncio\nasyncio.create_subprocess_shell('ls')",
        "process.asyncio.create_subprocess_shell",
        2,
    ),
    (
        "from concurrent.futures import ProcessPoolExecutor",
        "process.concurrent.futures.ProcessPoolExecutor",
        1,
    ),
    ("__import__('subprocess').run(['ls'])", "process.subprocess", 1),
    ("import importlib\nimportlib.import_module('subprocess')", "process.subprocess", 2),
    ("import importlib as il\nm = il.import_module('os')\nm.system('ls')", "process.os.system", 3),
    ("import sys\nsys.modules['os'].system('ls')", "process.os.system", 2),
    ("import sys\nsys.modules.get('subprocess').run(['ls'])", "process.subprocess", 2),
    ("getattr(__import__('os'), 'sys' + 'tem')('ls')", "process.os.system", 1),
    ("import os\ngetattr(os, 'sys' 'tem')('ls')", "process.os.system", 2),
    ("import pkgutil\npkgutil.resolve_name('os:system')('ls')", "process.os.system", 2),
    ("import os\nf = lambda: os.system('ls')", "process.os.system", 2),
    ("import os\n[os.system(c) for c in ['ls']]", "process.os.system", 2),
    ("import os\nclass A:\n    run = os.system", "process.os.system", 3),
    ("import os\n@decorate(os.system)\ndef f():\n    pass", "process.os.system", 2),
    ("import os\ndef f(run=os.system):\n    run('ls')", "process.os.system", 2),
    ("def f():\n    def g():\n        import subprocess", "process.subprocess", 3),
    ("import os\nmatch cmd:\n    case 'ls':\n        os.system(cmd)", "process.os.system", 4),
    ("exec('import subprocess')", "process.subprocess", 1),
    ("import os\nexec('os.system(1)')", "process.os.system", 2),
    ("import os\nos.__getattribute__('system')('ls')", "process.os.system", 2),
    (
        "import timeit\ntimeit.timeit('pass', setup='import os; os.system(1)')",
        "process.os.system",
        2,
    ),
    (
        "import asyncio\nloop = asyncio.new_event_loop()\nloop.subprocess_exec(p, 'ls')",
        "process.subprocess_exec",
        3,
    ),
]


@pytest.mark.parametrize(("code", "rule_id", "line"), PROCESS_CASES)
def test_process_creation_is_blocked(code: str, rule_id: str, line: int) -> None:
    assert_finding(code, rule_id, "blocked", line)


def test_process_reason_names_the_function_and_what_to_do() -> None:
    (finding,) = scan("import os\nos.system('ls')").findings
    assert finding.reason == (
        "os.system is blocked: the sandbox cannot start processes or run shell commands. "
        "Compute the result in Python instead."
    )
    assert (finding.line, finding.col) == (2, 0)


# --- network --------------------------------------------------------------------------------

NETWORK_CASES = [
    ("import socket", "network.socket", 1),
    ("import ssl", "network.ssl", 1),
    ("from socket import create_connection as c\nc(('h', 80))", "network.socket", 1),
    ("import http.client", "network.http.client", 1),
    ("from http import client", "network.http.client", 1),
    ("import http\nhttp.client.HTTPConnection('h')", "network.http.client", 2),
    ("import urllib.request as ur\nur.urlopen('http://x')", "network.urllib.request", 2),
    ("from urllib.request import urlopen", "network.urllib.request", 1),
    ("import urllib\nurllib.request.urlopen('http://x')", "network.urllib.request", 2),
    ("import urllib3", "network.urllib3", 1),
    ("import requests\nrequests.get('http://x')", "network.requests", 2),
    ("import httpx as h", "network.httpx", 1),
    ("import aiohttp", "network.aiohttp", 1),
    ("import ftplib", "network.ftplib", 1),
    ("from smtplib import SMTP", "network.smtplib", 1),
    ("import telnetlib", "network.telnetlib", 1),
    ("import poplib", "network.poplib", 1),
    ("import imaplib", "network.imaplib", 1),
    ("from xmlrpc.client import ServerProxy", "network.xmlrpc", 1),
    ("import socketserver", "network.socketserver", 1),
    ("import websockets", "network.websockets", 1),
    ("import asyncio\nasyncio.open_connection('h', 80)", "network.asyncio.open_connection", 2),
    ("from asyncio import start_server", "network.asyncio.start_server", 1),
    (
        "import asyncio\nloop = asyncio.get_event_loop()\nloop.create_connection(P, 'h', 1)",
        "network.create_connection",
        3,
    ),
    ("__import__('socket')", "network.socket", 1),
    ("import importlib\nimportlib.import_module('requests')", "network.requests", 2),
    ("exec('import socket')", "network.socket", 1),
]


@pytest.mark.parametrize(("code", "rule_id", "line"), NETWORK_CASES)
def test_network_access_is_blocked(code: str, rule_id: str, line: int) -> None:
    assert_finding(code, rule_id, "blocked", line)


def test_network_reason_names_the_module_and_the_category() -> None:
    (finding,) = scan("import socket").findings
    assert finding.reason.startswith("socket is blocked: network access is disabled in the sandbox")


def test_urllib_parse_and_http_status_stay_allowed() -> None:
    code = (
        "import urllib.parse\nfrom http import HTTPStatus\nimport http\n"
        "print(urllib.parse.quote('a b'), HTTPStatus.OK, http.HTTPStatus.NOT_FOUND)"
    )
    assert scan(code).text == CLEAN


# --- native escapes ---------------------------------------------------------------------------

NATIVE_CASES = [
    ("import ctypes", "native.ctypes", 1),
    ("from ctypes import CDLL", "native.ctypes", 1),
    ("import ctypes.util", "native.ctypes", 1),
    ("import _ctypes", "native._ctypes", 1),
    ("import cffi", "native.cffi", 1),
    ("import mmap", "native.mmap", 1),
    ("c = __import__('ctypes')", "native.ctypes", 1),
    ("import importlib\nimportlib.import_module('ctypes').CDLL(None)", "native.ctypes", 2),
    ("import cProfile\ncProfile.run('import ctypes')", "native.ctypes", 2),
]


@pytest.mark.parametrize(("code", "rule_id", "line"), NATIVE_CASES)
def test_native_escapes_are_blocked(code: str, rule_id: str, line: int) -> None:
    assert_finding(code, rule_id, "blocked", line)


# --- introspection escapes ------------------------------------------------------------------

INTROSPECTION_CASES = [
    ("f.__globals__", "introspection.dunder", 1),
    ("().__class__.__bases__[0].__subclasses__()", "introspection.dunder", 1),
    ("object.__subclasses__()", "introspection.dunder", 1),
    ("x = type.__mro__", "introspection.dunder", 1),
    ("x.__class__.__base__", "introspection.dunder", 1),
    ("g.__code__", "introspection.dunder", 1),
    ("g.__closure__", "introspection.dunder", 1),
    ("print.__self__", "introspection.dunder", 1),
    ("b = __builtins__", "introspection.dunder", 1),
    ("__builtins__.__dict__['ev' + 'al']", "introspection.dunder", 1),
    ("import os\nos.__dict__['system']", "introspection.dunder", 2),
    ("vars(__import__('os'))", "introspection.dunder", 1),
    ("globals()['__builtins__']", "introspection.dunder", 1),
    ("object.__getattribute__(f, 'x')", "introspection.dunder", 1),
    ("getattr(f, '__globals__')", "introspection.dunder", 1),
    ("getattr(f, '__glo' + 'bals__')", "introspection.dunder", 1),
    ("getattr(f, ''.join(['__', 'globals', '__']))", "introspection.dunder", 1),
    ("getattr(f, '__slabolg__'[::-1])", "introspection.dunder", 1),
    ("getattr(f, '_' * 2 + 'GLOBALS'.lower() + '_' * 2)", "introspection.dunder", 1),
    ("name = '__globals__'\ngetattr(f, name)", "introspection.dunder", 2),
    ("g = getattr\ng(f, '__globals__')", "introspection.dunder", 2),
    ("setattr(f, '__code__', g)", "introspection.dunder", 1),
    ("delattr(f, '__closure__')", "introspection.dunder", 1),
    ("hasattr(f, '__globals__')", "introspection.dunder", 1),
    ("'{0.__class__.__subclasses__}'.format(x)", "introspection.dunder", 1),
    ("'{.__globals__}'.format(f)", "introspection.dunder", 1),
    ("'{0.__init__.__globals__[os]}'.format(x)", "introspection.dunder", 1),
    ("'{0[__builtins__]}'.format(globals())", "introspection.dunder", 1),
    ("('{.__glo' + 'bals__}').format(f)", "introspection.dunder", 1),
    ("t = '{x.__globals__}'\nt.format(x=f)", "introspection.dunder", 1),
    ("str.format('{0.__globals__}', f)", "introspection.dunder", 1),
    (
        "import string\nstring.Formatter().get_field('0.__globals__', [f], {})",
        "introspection.dunder",
        2,
    ),
    ("f'{f.__globals__}'", "introspection.dunder", 1),
    ("import operator\nget = operator.attrgetter('__globals__')", "introspection.dunder", 2),
    ("from operator import attrgetter\nattrgetter('f.__globals__')(x)", "introspection.dunder", 2),
    ("import operator\noperator.methodcaller('__subclasses__')", "introspection.dunder", 2),
    ("@decorate(f.__code__)\ndef g():\n    pass", "introspection.dunder", 1),
    ("h = lambda f: f.__globals__", "introspection.dunder", 1),
    ("[c for c in object.__subclasses__()]", "introspection.dunder", 1),
    ("class A:\n    b = f.__builtins__", "introspection.dunder", 2),
    ("def outer():\n    def inner(x=f.__globals__):\n        pass", "introspection.dunder", 2),
    ("import inspect\ninspect.currentframe().f_back.f_globals", "introspection.frame", 2),
    ("import inspect\ninspect.stack()", "introspection.frame", 2),
    ("from inspect import getouterframes as g", "introspection.frame", 1),
    ("import sys\nsys._getframe(1)", "introspection.frame", 2),
    ("from sys import _getframe\n_getframe()", "introspection.frame", 2),
    ("import sys\nsys.settrace(tracer)", "introspection.frame", 2),
    ("gen = (x for x in [])\ngen.gi_frame", "introspection.frame", 2),
    ("coro.cr_frame", "introspection.frame", 1),
    ("agen.ag_frame.f_locals", "introspection.frame", 1),
    (
        "try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame",
        "introspection.frame",
        4,
    ),
    ("tb.tb_next", "introspection.frame", 1),
    ("code.co_code", "introspection.frame", 1),
    ("f.func_globals", "introspection.frame", 1),
    ("getattr(g, 'gi_' + 'frame')", "introspection.frame", 1),
    ("import gc\ngc.get_objects()", "introspection.gc", 2),
    ("import gc as g\ng.get_referrers(x)", "introspection.gc", 2),
    ("from gc import get_referents", "introspection.gc", 1),
]


@pytest.mark.parametrize(("code", "rule_id", "line"), INTROSPECTION_CASES)
def test_introspection_escapes_are_blocked(code: str, rule_id: str, line: int) -> None:
    assert_finding(code, rule_id, "blocked", line)


def test_harmless_dunders_stay_allowed() -> None:
    code = """
class Point:
    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self):
        return f"{type(self).__name__}({self.__dict__}) {self.__class__.__name__}"

if __name__ == "__main__":
    print(Point(x=1), Point.__doc__, Point.__name__, "{0.__class__.__name__}".format(1))
"""
    assert scan(code).text == CLEAN


# --- dynamic code and names (warnings) --------------------------------------------------------

DYNAMIC_WARNING_CASES = [
    ("eval('1 + 1')", "dynamic.eval", 1),
    ("exec(code)", "dynamic.eval", 1),
    ("c = compile(src, 'x', 'exec')", "dynamic.eval", 1),
    ("run = eval\nrun(s)", "dynamic.eval", 1),
    ("import builtins\nbuiltins.exec(s)", "dynamic.eval", 2),
    ("import pickle\npickle.loads(data)", "dynamic.eval", 2),
    ("__import__(name)", "dynamic.import", 1),
    ("__import__('math')", "dynamic.import", 1),
    ("import importlib\nimportlib.import_module(mod_name)", "dynamic.import", 2),
    ("from importlib import import_module as im\nim(name)", "dynamic.import", 2),
    ("import sys\nm = sys.modules[name]", "dynamic.import", 2),
    ("getattr(obj, name)", "dynamic.getattr", 1),
    ("setattr(obj, key, value)", "dynamic.getattr", 1),
    ("obj.__getattribute__(name)", "dynamic.getattr", 1),
    ("import operator\noperator.attrgetter(name)", "dynamic.getattr", 2),
    ("from functools import reduce\nreduce(getattr, names, obj)", "dynamic.getattr", 2),
]


@pytest.mark.parametrize(("code", "rule_id", "line"), DYNAMIC_WARNING_CASES)
def test_dynamic_code_warns(code: str, rule_id: str, line: int) -> None:
    assert_finding(code, rule_id, "warning", line)
    assert not scan(code).blocked


def test_literal_dynamic_import_is_blocked_as_its_module_plus_a_warning() -> None:
    assert hits("__import__('subprocess')") == {
        ("process.subprocess", "blocked", 1),
        ("dynamic.import", "warning", 1),
    }


def test_computed_getattr_on_a_module_with_blocked_functions_is_blocked() -> None:
    assert hits("import os\nf = getattr(os, name)") == {("dynamic.module_getattr", "blocked", 2)}
    assert hits("import math\nf = getattr(math, name)") == {("dynamic.getattr", "warning", 2)}


def test_findings_inside_exec_strings_carry_the_exec_line() -> None:
    report = scan("x = 1\nexec('import os\\nos.system(1)')")
    blocked = [f for f in report.findings if f.level == "blocked"]
    assert [(f.rule_id, f.line) for f in blocked] == [("process.os.system", 2)]
    assert blocked[0].reason.startswith("In the code passed to exec(): os.system is blocked")


# --- resource bombs (warnings) -------------------------------------------------------------

RESOURCE_CASES = [
    ("x = 10**10**8", "resource.huge_power", 1),
    ("x = 2**100000", "resource.huge_power", 1),
    ("x = (-7) ** 10**7", "resource.huge_power", 1),
    ("x = 1 << 10**9", "resource.huge_power", 1),
    ("x = pow(10, 10**8)", "resource.huge_power", 1),
    ("import math\nmath.factorial(10**6)", "resource.huge_power", 2),
    ("s = 'x' * 10**9", "resource.huge_repeat", 1),
    ("a = [0] * 10**9", "resource.huge_repeat", 1),
    ("b = 10**9 * b'x'", "resource.huge_repeat", 1),
    ("s = ('ab' * 1000) * 100000", "resource.huge_repeat", 1),
    ("b = bytes(10**10)", "resource.huge_repeat", 1),
    ("b = bytearray(2**40)", "resource.huge_repeat", 1),
    ("a = list(range(10**10))", "resource.huge_repeat", 1),
    ("a = [i for i in range(10**12)]", "resource.huge_repeat", 1),
    ("s = 'x'.ljust(10**10)", "resource.huge_repeat", 1),
    ("s = f'{x:>1000000000}'", "resource.huge_repeat", 1),
    ("s = '{:>1000000000}'.format(x)", "resource.huge_repeat", 1),
    ("s = '%1000000000d' % 1", "resource.huge_repeat", 1),
]


@pytest.mark.parametrize(("code", "rule_id", "line"), RESOURCE_CASES)
def test_resource_bombs_warn(code: str, rule_id: str, line: int) -> None:
    assert_finding(code, rule_id, "warning", line)
    assert not scan(code).blocked


def test_nested_bomb_is_reported_once() -> None:
    assert len(scan("x = (10**10**8) ** 2").findings) == 1


@pytest.mark.parametrize(
    "code",
    [
        "x = 2**64",
        "x = 10**400",
        "x = 10.0 ** 10**8",
        "x = 2 ** -10**9",
        "x = y ** 1000000",
        "print('-' * 80)",
        "grid = [[0] * 1000 for _ in range(1000)]",
        "for i in range(10**12):\n    break",
        "s = f'{x:>10}' + '{:,.2f}'.format(y)",
    ],
)
def test_ordinary_arithmetic_and_repetition_stay_quiet(code: str) -> None:
    assert scan(code).text == CLEAN


def test_huge_power_reason_estimates_the_digits() -> None:
    (finding,) = scan("x = 2**100000").findings
    assert "about 30,103 digits" in finding.reason


# --- file writes ----------------------------------------------------------------------------

WRITE_BLOCKED_CASES = [
    "open('/etc/passwd', 'w')",
    "open('/etc/passwd', 'wb')",
    "open('/etc/passwd', 'a+')",
    "open('/etc/passwd', 'x')",
    "open('/etc/passwd', 'r+')",
    "open('/etc/passwd', 'rb+')",
    "open('/etc/passwd', mode='a')",
    "open(file='/etc/passwd', mode='w' + 'b')",
    "m = 'w'\nopen('/etc/passwd', m)",
    "import io\nio.open('/etc/x', 'w')",
    "import codecs\ncodecs.open('/etc/x', 'w', 'utf-8')",
    "import os\nos.open('/etc/x', os.O_WRONLY | os.O_CREAT)",
    "import os\nos.open('/etc/x', flags=os.O_RDWR)",
    "from os import open as raw, O_APPEND\nraw('/etc/x', O_APPEND)",
    "from pathlib import Path\nPath('/etc/x').write_text('x')",
    "import pathlib\npathlib.Path('/etc/x').write_bytes(b'x')",
    "from pathlib import Path\nPath('/etc/x').touch()",
    "from pathlib import Path\nPath('/etc/d').mkdir()",
    "from pathlib import Path\nPath('/etc/x').unlink()",
    "from pathlib import Path\nPath('/etc/d').rmdir()",
    "from pathlib import Path\nPath('/etc/x').chmod(0o777)",
    "from pathlib import Path\nPath('/tmp/a').rename('/etc/b')",
    "from pathlib import Path\nPath('/tmp/a').replace('/etc/b')",
    "from pathlib import Path\nPath('/etc/link').symlink_to('/tmp/a')",
    "from pathlib import Path\nPath('/etc/link').hardlink_to('/tmp/a')",
    "from pathlib import Path\nPath('/etc/x').open('w')",
    "from pathlib import Path\np = Path('/etc') / 'x'\np.write_text('x')",
    "from pathlib import Path\n(Path('/tmp') / '..' / 'etc' / 'x').write_text('x')",
    "import os\nos.remove('/etc/x')",
    "import os\nos.unlink('/etc/x')",
    "import os\nos.rmdir('/etc/d')",
    "import os\nos.removedirs('/etc/d')",
    "import os\nos.rename('/tmp/a', '/etc/b')",
    "import os\nos.renames('/etc/a', '/tmp/b')",
    "import os\nos.replace('/tmp/a', '/etc/b')",
    "import os\nos.mkdir('/etc/d')",
    "import os\nos.makedirs('/etc/a/b', exist_ok=True)",
    "import os\nos.chmod('/etc/x', 0o777)",
    "import os\nos.chown('/etc/x', 0, 0)",
    "import os\nos.link('/tmp/a', '/etc/b')",
    "import os\nos.symlink('/etc/passwd', '/tmp/p')",
    "import os\nos.truncate('/etc/x', 0)",
    "import os\nos.utime('/etc/x')",
    "import shutil\nshutil.copy('/tmp/a', '/etc/b')",
    "import shutil\nshutil.copyfile('/tmp/a', dst='/etc/b')",
    "import shutil\nshutil.copytree('/tmp/a', '/etc/b')",
    "import shutil\nshutil.move('/tmp/a', '/etc/b')",
    "import shutil\nshutil.rmtree('/')",
    "import shutil\nshutil.chown('/etc/x', 'root')",
    "import shutil\nshutil.make_archive('/etc/backup', 'zip', '/tmp')",
    "import tempfile\ntempfile.NamedTemporaryFile(dir='/etc')",
    "open('/tmp/../etc/x', 'w')",
    "open('/tmpfoo', 'w')",
    "open('//etc/x', 'w')",
    "import os\nopen(os.devnull, 'w')",
    "import os\nos.chdir('/')\nopen('etc/x', 'w')",
]


@pytest.mark.parametrize("code", WRITE_BLOCKED_CASES)
def test_writes_outside_tmp_are_blocked(code: str) -> None:
    line = code.count("\n") + 1
    assert_finding(code, "fs.write_outside_tmp", "blocked", line)


@pytest.mark.parametrize(
    "code",
    [
        "def save(path, data):\n    open(path, 'w').write(data)",
        "open(f'{base}/out.txt', 'w')",
        "open(f'/tmp{name}', 'w')",
        "open('/tmp' + name, 'w')",
        "open('/tmp/.' + name, 'w')",
        "def save(p):\n    p.write_text('x')",
    ],
)
def test_writes_to_computed_paths_are_blocked_as_unverifiable(code: str) -> None:
    line = code.count("\n") + 1
    assert_finding(code, "fs.write_outside_tmp", "blocked", line)
    assert any("can't be verified" in f.reason for f in scan(code).findings)


def test_write_reason_suggests_a_tmp_path() -> None:
    (finding,) = scan("open('/etc/report.csv', 'w')").findings
    assert finding.reason == (
        "Writing to '/etc/report.csv' with open() is blocked: code may only write under /tmp. "
        "Use a path such as '/tmp/report.csv' instead."
    )


@pytest.mark.parametrize(
    "code",
    [
        "open('/tmp/out.txt', 'w')",
        "open('/tmp/out.txt', mode='a+')",
        "open('/tmp/a/../b.txt', 'w')",
        "open(f'/tmp/{name}.csv', 'w')",
        "open('/tmp/' + name, 'wb')",
        "open('/tmp/%s.txt' % name, 'w')",
        "open('/tmp/{}.txt'.format(name), 'w')",
        "open('out.txt', 'w')",
        "with open('/tmp/x', 'w') as fh:\n    fh.write('x')",
        "from pathlib import Path\nPath('/tmp/x').write_text('x')",
        (
            "from pathlib import Path\n"
            "out = Path('/tmp/out')\n"
            "out.mkdir(exist_ok=True)\n"
            "(out / 'a.csv').write_text('x')"
        ),
        "from pathlib import Path\nPath('/tmp/x.txt').with_suffix('.csv').write_text('x')",
        "import os\nos.makedirs('/tmp/a/b', exist_ok=True)",
        "import os\nopen(os.path.join('/tmp', name), 'w')",
        "import os\nfd = os.open('/tmp/x', os.O_WRONLY | os.O_CREAT)",
        "import shutil\nshutil.copy('/tmp/a', '/tmp/b')",
        "import tempfile\nwith tempfile.TemporaryDirectory() as d:\n    open(f'{d}/x', 'w')",
        "import tempfile, os\nd = tempfile.mkdtemp()\nopen(os.path.join(d, 'x'), 'w')",
        "import io, zipfile\nzipfile.ZipFile(io.BytesIO(), 'w')",
        "import json\njson.dump({}, open('/tmp/x.json', 'w'))",
    ],
)
def test_writes_under_tmp_are_allowed(code: str) -> None:
    assert scan(code).text == CLEAN


def test_relative_writes_resolve_against_the_working_directory() -> None:
    unknown_cwd = ScanPolicy(working_dir=None)
    (finding,) = scan("open('out.txt', 'w')", unknown_cwd).findings
    assert (finding.rule_id, finding.level) == ("fs.write_outside_tmp", "blocked")
    assert "relative path 'out.txt'" in finding.reason
    assert scan("open('../etc/x', 'w')").blocked
    assert scan("open('out.txt', 'w')", ScanPolicy(working_dir="/srv")).blocked


# --- file reads -----------------------------------------------------------------------------

READ_BLOCKED_CASES = [
    "open('/etc/passwd')",
    "open('/etc/passwd', 'rb')",
    "data = 1\nwith open('/etc/shadow') as fh:\n    data = fh.read()",
    "from pathlib import Path\nPath('/etc/passwd').read_text()",
    "from pathlib import Path\nPath('/root').iterdir()",
    "import os\nos.listdir('/')",
    "import os\nos.scandir('/home')",
    "import os\nos.walk('/root')",
    "import glob\nglob.glob('/etc/*.conf')",
    "open('/tmp/../etc/shadow')",
    "open(f'/etc/{name}')",
    "open('../etc/passwd')",
    "import shutil\nshutil.copy('/etc/passwd', '/tmp/p')",
    "import os\nos.open('/etc/passwd', os.O_RDONLY)",
]


@pytest.mark.parametrize("code", READ_BLOCKED_CASES)
def test_reads_outside_the_allowed_paths_are_blocked(code: str) -> None:
    line = 2 if "\n" in code else 1  # the read is on the second line of multi-line cases
    assert_finding(code, "fs.read_outside_allowed", "blocked", line)


@pytest.mark.parametrize(
    "code",
    [
        "open('/tmp/x')",
        "open('/tmp/data.csv', 'r', encoding='utf-8')",
        "open('/usr/lib/python3.11/os.py')",
        "open('/usr/local/lib/python3.12/json/__init__.py')",
        "open(path)",
        "open('data.csv')",
        "import os\nos.listdir('/tmp')",
        "import os\nos.listdir()",
        "from pathlib import Path\nlist(Path('/tmp').iterdir())",
        "import glob\nglob.glob('/tmp/*.csv')",
    ],
)
def test_reads_inside_the_allowed_paths_pass(code: str) -> None:
    assert scan(code).text == CLEAN


# --- path normalisation -------------------------------------------------------------------

ALLOWED_ONLY = ScanPolicy(read_allowed_paths=("/allowed",), write_allowed_paths=("/allowed",))


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("/allowed", True),
        ("/allowed/", True),
        ("/allowed/x", True),
        ("/allowed/sub/../x", True),
        ("/allowed/./x", True),
        ("//allowed/x", True),
        ("/allowed_evil", False),
        ("/allowed_evil/x", False),
        ("/allowedx", False),
        ("/allowed/../etc/passwd", False),
        ("/allowed/sub/../../etc", False),
        ("/", False),
        ("/etc/allowed", False),
    ],
)
def test_paths_are_compared_by_component_after_normalising(path: str, inside: bool) -> None:
    assert scan(f"open({path!r})", ALLOWED_ONLY).blocked is not inside
    assert scan(f"open({path!r}, 'w')", ALLOWED_ONLY).blocked is not inside


def test_allowed_paths_may_glob_a_component() -> None:
    policy = ScanPolicy(read_allowed_paths=("/opt/py*",))
    assert not scan("open('/opt/py3.11/x.py')", policy).blocked
    assert scan("open('/opt/node/x.js')", policy).blocked


def test_prefix_that_could_escape_is_not_trusted() -> None:
    assert scan("open(f'/tmp/{name}', 'w')").text == CLEAN
    assert scan("open(f'/tmp/..{name}', 'w')").blocked
    assert scan("open(f'/tmpdir{name}', 'w')").blocked


# --- clean code ---------------------------------------------------------------------------------

CLEAN_SNIPPETS = [
    "import math\nprint(math.sqrt(2) * math.pi, math.factorial(20), 2**64)",
    (
        "class Stack:\n"
        "    def __init__(self):\n"
        "        self.items = []\n"
        "    def push(self, x):\n"
        "        self.items.append(x)"
    ),
    (
        "from dataclasses import dataclass, field\n"
        "@dataclass(frozen=True)\n"
        "class P:\n"
        "    x: int\n"
        "    tags: list = field(default_factory=list)"
    ),
    (
        "squares = [x * x for x in range(10)]\n"
        "evens = {x for x in squares if x % 2 == 0}\n"
        "index = {x: i for i, x in enumerate(squares)}"
    ),
    (
        "def gen(n):\n"
        "    for i in range(n):\n"
        "        yield i\n"
        "print(sum(gen(10)), sum(x for x in gen(5)))"
    ),
    "with open('/tmp/x') as fh:\n    data = fh.read()",
    "with open('/tmp/out.txt', 'w') as fh:\n    fh.write('hello')",
    "import json\nprint(json.dumps({'a': 1}, indent=2), json.loads('{\"b\": 2}'))",
    (
        "import itertools\n"
        "pairs = list(itertools.permutations('abc', 2))\n"
        "print(pairs, list(itertools.islice(itertools.count(), 3)))"
    ),
    (
        "x = 3.14159\n"
        "print('{:>10}'.format(x), '{name}'.format(name=1), '{0:.2f} {1!r}'.format(x, 'y'))"
    ),
    "name, value = 'a', 2.5\nprint(f'{name}={value:,.2f} {value!r:>10} {name.upper()}')",
    (
        "import os\n"
        "print(os.path.join('a', 'b'), os.getcwd(), os.path.exists('/tmp'), os.environ.get('HOME'))"
    ),
    "print('hello', 'world', sep=', ')",
    (
        "import collections, functools, operator, re, statistics\n"
        "print(collections.Counter('aab'), functools.reduce(operator.add, [1, 2]))\n"
        "print(re.findall(r'\\d+', 'a1b22'), statistics.mean([1, 2]))"
    ),
    (
        "import datetime, random\n"
        "random.seed(0)\n"
        "print(datetime.date(2024, 1, 1).isoformat(), random.randint(1, 6))"
    ),
    (
        "import asyncio\n"
        "async def main():\n"
        "    await asyncio.sleep(0)\n"
        "    return 1\n"
        "print(asyncio.run(main()))"
    ),
    "import threading\nt = threading.Thread(target=print, args=('x',))\nt.start()\nt.join()",
    "import sys\nprint(sys.version, sys.getsizeof([]), file=sys.stderr)",
    "import os\nif hasattr(os, 'fork'):\n    print('posix')",
    "class A:\n    @property\n    def x(self):\n        return getattr(self, '_x', None)",
    (
        "match point:\n"
        "    case (0, 0):\n"
        "        print('origin')\n"
        "    case (x, 0) if x > 0:\n"
        "        print(x)\n"
        "    case _:\n"
        "        pass"
    ),
    "if (n := len('abc')) > 2:\n    print(n)",
    (
        "import csv\n"
        "with open('/tmp/out.csv', 'w', newline='') as fh:\n"
        "    csv.writer(fh).writerow([1, 2])"
    ),
    "import urllib.parse\nprint(urllib.parse.urlencode({'q': 'a b'}))",
    "import ast\nprint(ast.literal_eval('[1, 2]'))",
    "import sys\nthis = sys.modules[__name__]",
    "'''Docstring with {braces} and {a.b} fields.'''\nx = '{\"json\": 100000000000}'",
]


@pytest.mark.parametrize("code", CLEAN_SNIPPETS)
def test_ordinary_code_passes_clean(code: str) -> None:
    report = scan(code)
    assert report.text == CLEAN
    assert report.findings == ()
    assert not report.blocked


def test_standard_library_sources_scan_without_errors() -> None:
    """Real, varied code: every module of a few stdlib packages scans without raising."""
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    paths = [*sorted((stdlib / "json").glob("*.py")), *sorted((stdlib / "email").glob("*.py"))]
    assert paths
    for path in paths:
        assert isinstance(scan(path.read_text(encoding="utf-8")), ScanReport)


# --- the report ---------------------------------------------------------------------------------


def test_clean_report() -> None:
    report = scan("print(1)")
    assert report.text == "No safety issues detected."
    assert (report.blocked, report.warnings, report.findings) == (False, (), ())
    assert report.to_dict() == {"blocked": False, "text": CLEAN, "findings": []}


def test_report_text_lists_blocked_findings_first_then_warnings_by_line() -> None:
    code = "eval('1')\nimport socket\nexec(s)\nimport ctypes\n"
    report = scan(code)
    assert report.text == (
        "Safety check BLOCKED:\n"
        "  [BLOCKED] (line 2) socket is blocked: network access is disabled in the sandbox. "
        "Work with data from the conversation or files under /tmp instead.\n"
        "  [BLOCKED] (line 4) ctypes is blocked: native code and raw memory access are disabled "
        "in the sandbox. Use pure Python and the standard library instead.\n"
        "  [WARNING] (line 1) eval runs code that can't be checked in advance; prefer ordinary "
        "Python (ast.literal_eval or json.loads for data). The code still runs.\n"
        "  [WARNING] (line 3) exec runs code that can't be checked in advance; prefer ordinary "
        "Python (ast.literal_eval or json.loads for data). The code still runs."
    )
    assert report.blocked
    assert [f.line for f in report.warnings] == [1, 3]
    assert [f.line for f in report.findings] == [2, 4, 1, 3]


def test_report_with_only_warnings_says_warning() -> None:
    report = scan("x = 1\ny = eval('x')")
    assert report.text.splitlines()[0] == "Safety check WARNING:"
    assert report.text.splitlines()[1].startswith("  [WARNING] (line 2) eval runs code")
    assert not report.blocked


def test_report_to_dict() -> None:
    report = scan("import os\nos.system('ls')")
    assert report.to_dict() == {
        "blocked": True,
        "text": report.text,
        "findings": [
            {
                "rule_id": "process.os.system",
                "level": "blocked",
                "line": 2,
                "col": 0,
                "reason": report.findings[0].reason,
            }
        ],
    }


def test_findings_and_reports_are_frozen() -> None:
    report = scan("import socket")
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.findings[0].line = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.findings = ()  # type: ignore[misc]
    assert ScanReport().text == CLEAN
    assert ScanReport((Finding("x", "warning", 1, 0, "why"),)).text == (
        "Safety check WARNING:\n  [WARNING] (line 1) why"
    )


def test_repeated_findings_on_one_line_are_reported_once() -> None:
    assert len(scan("import subprocess as sp\nsp.run(sp.PIPE, sp.PIPE)").findings) == 2


def test_report_caps_the_number_of_findings() -> None:
    code = "\n".join(f"eval('{i}')" for i in range(10)) + "\nimport socket"
    report = scan(code, ScanPolicy(max_report_findings=3))
    assert len(report.findings) == 3
    assert report.findings[0].rule_id == "network.socket"
    assert report.text.endswith("\n  ... 8 more finding(s) not shown")


# --- input limits -------------------------------------------------------------------------------


def test_nul_bytes_are_refused_before_parsing() -> None:
    (finding,) = scan("x = 1\ny = 2\x00").findings
    assert (finding.rule_id, finding.level, finding.line) == ("input.nul_byte", "blocked", 2)


def test_code_over_the_size_limit_is_refused() -> None:
    limit = DEFAULT_POLICY.max_code_bytes
    assert limit == 100 * 1024
    assert scan("#" * limit).text == CLEAN
    (finding,) = scan("#" * (limit + 1)).findings
    assert (finding.rule_id, finding.level, finding.line) == ("input.too_large", "blocked", 0)
    assert "102,401 bytes; the limit is 102,400 bytes" in finding.reason


def test_size_limit_counts_utf8_bytes_and_is_configurable() -> None:
    assert scan("# " + "é" * 51_200).blocked
    assert scan("# " + "é" * 50, ScanPolicy(max_code_bytes=100)).blocked
    assert not scan("# " + "e" * 50, ScanPolicy(max_code_bytes=100)).blocked


def test_nul_and_size_are_both_reported() -> None:
    rules = {f.rule_id for f in scan("\x00" * (100 * 1024 + 1)).findings}
    assert rules == {"input.nul_byte", "input.too_large"}


def test_lone_surrogates_are_refused() -> None:
    assert hits("x = 1\ny = '\ud800'") == {("input.encoding", "blocked", 2)}


def test_syntax_error_is_reported_not_blocked() -> None:
    report = scan("x = 1\ndef f(:\n    pass")
    (finding,) = report.findings
    assert (finding.rule_id, finding.level, finding.line) == ("syntax_error", "warning", 2)
    assert finding.reason.startswith("Syntax error: invalid syntax")
    assert not report.blocked
    assert report.text.startswith("Safety check WARNING:\n  [WARNING] (line 2) Syntax error:")


def test_code_too_deep_to_parse_is_refused() -> None:
    assert hits("x = 1" + " + 1" * 20_000) == {("input.too_complex", "blocked", 0)}


@pytest.mark.parametrize(
    "code", ["", "\n\n", "\ufeffx = 1", "x = '''", "pass\r\n", "lambda: (yield)"]
)
def test_odd_input_never_raises(code: str) -> None:
    assert isinstance(scan(code), ScanReport)


def test_long_alias_chains_and_concatenations_are_followed() -> None:
    chain = "import os\na0 = os\n" + "".join(f"a{i} = a{i - 1}\n" for i in range(1, 300))
    assert ("process.os.system", "blocked", 302) in hits(chain + "a299.system('ls')")
    name = " + ".join(repr(c) for c in "__globals__")
    assert hits(f"getattr(f, {name})") == {("introspection.dunder", "blocked", 1)}


def test_pathological_bindings_are_cut_off_instead_of_exploding() -> None:
    cyclic = "from pathlib import Path\n" + "".join(
        f"p{i} = Path('/tmp/{i}')\np{i} = p{(i + 1) % 40} / 'a'\np{i} = p{(i + 7) % 40} / 'b'\n"
        for i in range(40)
    )
    assert hits(cyclic + "p0.write_text('x')") == {("fs.write_outside_tmp", "blocked", 122)}
    flags = "import os\n" + "".join(f"f{i} = f{(i + 1) % 30} | os.O_RDONLY\n" for i in range(30))
    assert hits(flags + "f0 = os.O_WRONLY\nos.open('/etc/x', f0)") == {
        ("fs.write_outside_tmp", "blocked", 33)
    }
    many = "".join(f"n = '__a{i}'\n" for i in range(2000)) + "getattr(o, n)\n" * 2000
    assert {f.rule_id for f in scan(many).findings} == {"dynamic.getattr"}
    rebinding = "x = '/tmp/a'\n" * 2000 + "open(x, 'w')\n" * 2000
    assert scan(rebinding).text == CLEAN
    long_string = "s = '" + "x" * 9000 + "'\nt = ''.join([" + ", ".join(["s"] * 2000) + "])\n"
    assert hits(long_string + "getattr(o, t)") == {("dynamic.getattr", "warning", 3)}


# --- custom policies ------------------------------------------------------------------------------


def test_policy_can_allow_a_blocked_module() -> None:
    policy = DEFAULT_POLICY.with_overrides({"network_modules": {"remove": ["requests"]}})
    assert scan("import requests\nrequests.get('http://x')", policy).text == CLEAN
    assert scan("import socket", policy).blocked
    replaced = dataclasses.replace(
        DEFAULT_POLICY, network_modules=DEFAULT_POLICY.network_modules - {"requests"}
    )
    assert scan("import requests", replaced).text == CLEAN


def test_policy_can_block_another_module() -> None:
    policy = DEFAULT_POLICY.with_overrides({"native_modules": {"add": ["numpy"]}})
    assert hits("import numpy as np\nnp.zeros(3)", policy) == {
        ("native.numpy", "blocked", 1),
        ("native.numpy", "blocked", 2),
    }
    assert scan("import numpy").text == CLEAN


def test_policy_overrides_replace_lists_and_plain_values() -> None:
    policy = DEFAULT_POLICY.with_overrides(
        {"write_allowed_paths": ["/tmp", "/data"], "max_int_digits": 10, "working_dir": None}
    )
    assert policy.write_allowed_paths == ("/tmp", "/data")
    assert scan("open('/data/x', 'w')", policy).text == CLEAN
    assert hits("x = 2**64", policy) == {("resource.huge_power", "warning", 1)}
    assert scan("open('x', 'w')", policy).blocked


def test_policy_overrides_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown ScanPolicy field 'network'"):
        DEFAULT_POLICY.with_overrides({"network": []})
    with pytest.raises(ValueError, match="list of strings"):
        DEFAULT_POLICY.with_overrides({"network_modules": "requests"})
    with pytest.raises(ValueError, match="'add' and 'remove'"):
        DEFAULT_POLICY.with_overrides({"network_modules": {"drop": ["requests"]}})
    with pytest.raises(ValueError, match="absolute"):
        ScanPolicy(write_allowed_paths=("tmp",))
    with pytest.raises(ValueError, match="positive int"):
        DEFAULT_POLICY.with_overrides({"max_code_bytes": 0})


def test_policy_can_disable_rules_by_id_or_prefix() -> None:
    code = "open('/etc/passwd')\nimport socket\nimport requests"
    assert hits(code, ScanPolicy(disabled_rules=frozenset({"fs.read_outside_allowed"}))) == {
        ("network.socket", "blocked", 2),
        ("network.requests", "blocked", 3),
    }
    assert hits(code, ScanPolicy(disabled_rules=frozenset({"network"}))) == {
        ("fs.read_outside_allowed", "blocked", 1)
    }


def test_policy_can_change_warnings_and_attribute_sets() -> None:
    no_eval = DEFAULT_POLICY.with_overrides({"eval_functions": {"remove": ["builtins.eval"]}})
    assert scan("eval('1')", no_eval).text == CLEAN
    strict = DEFAULT_POLICY.with_overrides({"dunder_attributes": {"add": ["__dict__"]}})
    assert hits("self.__dict__", strict) == {("introspection.dunder", "blocked", 1)}
