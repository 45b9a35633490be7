"""Pages of the site that are read from convsuite itself, never typed by hand.

Directives
----------
``.. convsuite-backends::``
    Every registered backend in priority order: device, what it is, its algorithms.
``.. convsuite-algorithms::``
    One section per backend: the table of its :class:`~convsuite.backends.base.Algorithm`
    records (name, summary, directions, spatial ranks, precision class, whether ``auto``
    may pick it) and the table of their tunable parameters.
``.. convsuite-benchmarks::``
    The asv suite (``benchmarks/bench_*.py``): each benchmark class or function, what it
    measures (its docstring's first line) and its timed methods.
``.. convsuite-scripts::``
    The measuring scripts of :mod:`convsuite.bench` (modules with a ``__main__`` block), run as
    ``python -m convsuite.bench.NAME``, with their docstring's first line.
``.. convsuite-layers::``
    The package's layers, bottom up, from ``tests/test_layering.py`` (the table the
    layering test enforces): each layer's modules with the first line of their
    docstring, and the layers each one imports from today.

Role
----
``:record:`name.md```
    A link to ``docs/measurements/name.md``; the file is copied beside the HTML pages
    and a missing one is a build error.

Record text is put in the page as plain text (never parsed as reST), so a
summary's ``*`` or backquote cannot break the build.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

import convsuite

LOG = logging.getLogger(__name__)
DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
MEASUREMENTS = DOCS / "measurements"
LAYERING_TEST = ROOT / "tests" / "test_layering.py"


# --- small node builders --------------------------------------------------------------------


def _cell(content) -> nodes.entry:
    """A table cell: plain text, inline nodes (one paragraph) or a block node such as a list."""
    entry = nodes.entry()
    if isinstance(content, nodes.Body):
        entry += content
        return entry
    para = nodes.paragraph()
    for item in content if isinstance(content, list) else [content]:
        para += nodes.Text(item) if isinstance(item, str) else item
    entry += para
    return entry


def _code(text: str) -> nodes.literal:
    return nodes.literal(text, text)


def _joined(items, sep: str = ", ") -> list:
    """Literal nodes separated by ``sep``."""
    out: list = []
    for i, item in enumerate(items):
        if i:
            out.append(sep)
        out.append(_code(str(item)))
    return out


def _table(headers: list[str], rows: list[list], widths: list[int]) -> nodes.table:
    """A docutils table (the HTML theme makes it scroll sideways when wide)."""
    table = nodes.table(classes=["convsuite-generated"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    row = nodes.row()
    for header in headers:
        row += _cell(header)
    head += row
    group += head
    body = nodes.tbody()
    for cells in rows:
        row = nodes.row()
        for content in cells:
            row += _cell(content)
        body += row
    group += body
    return table


def _section(directive: SphinxDirective, title: str, ident: str) -> nodes.section:
    """A section with a title and an id (so it appears in the page's contents)."""
    section = nodes.section(ids=[ident], names=[nodes.fully_normalize_name(ident)])
    section += nodes.title(title, "", _code(title))
    directive.state.document.note_implicit_target(section, section)
    return section


# --- backends and their algorithm records ---------------------------------------------------


def _backends():
    """(info, backend) for every registered backend, highest priority first."""
    rows = []
    for info in convsuite.list_backends():
        backend = convsuite.get_backend(info.name)
        rows.append((info, backend))
    return rows


def _records(backend, location: str):
    """The backend's algorithm records; a backend without any is a build error (a table would be missing)."""
    table = backend.algorithm_table()
    if not table:
        LOG.warning(
            "backend %r lists no Algorithm records: its algorithm table is missing", backend.name, location=location
        )
        return {}
    return table


def _default_text(tunable) -> str:
    """A tunable's default as the table shows it: the value, or "by case" for a hand rule."""
    return "by case (hand rule)" if callable(tunable.default) else repr(tunable.default)


class BackendsTable(SphinxDirective):
    """``.. convsuite-backends::``: the backends in priority order."""

    has_content = False

    def run(self):  # noqa: D102 (the directive's docstring says what it makes)
        rows = []
        for info, _ in _backends():
            rows.append([_code(info.name), info.device, info.description, _joined(info.algorithms)])
        return [
            _table(["backend", "device", "what it is", "algorithms (the first is its default)"], rows, [10, 6, 50, 34])
        ]


class AlgorithmTables(SphinxDirective):
    """``.. convsuite-algorithms::``: one section per backend, its records and tunables."""

    has_content = False
    option_spec = {"backend": directives.unchanged}

    def run(self):  # noqa: D102 (the directive's docstring says what it makes)
        location = self.get_location()
        only = self.options.get("backend")
        out = []
        for info, backend in _backends():
            if only and info.name != only:
                continue
            section = _section(self, info.name, f"algorithms-{info.name}")
            section += nodes.paragraph("", info.description)
            rows, tunable_rows = [], []
            for name, record in _records(backend, location).items():
                picks = "yes" if record.deterministic else "no: not bit-reproducible; runs only when named"
                rows.append(
                    [
                        _code(name),
                        record.summary,
                        ", ".join(record.directions),
                        ", ".join(f"{n}-D" for n in record.ndims),
                        _code(record.precision),
                        picks,
                        _joined(t.name for t in record.tunables) or "-",
                    ]
                )
                for tunable in record.tunables:
                    tunable_rows.append(
                        [_code(name), _code(tunable.name), _joined(tunable.values), _default_text(tunable), tunable.doc]
                    )
            section += _table(
                ["algorithm", "what it does", "directions", "ranks", "precision", "auto may pick it", "tunables"],
                rows,
                [12, 44, 10, 6, 8, 10, 10],
            )
            if tunable_rows:
                section += nodes.rubric("", f"Tunable parameters of {info.name}")
                section += _table(
                    ["algorithm", "parameter", "values", "default", "what it controls"],
                    tunable_rows,
                    [12, 10, 22, 10, 46],
                )
            out.append(section)
        if only and not out:
            LOG.warning("convsuite-algorithms: no backend named %r", only, location=location)
        return out


# --- the asv suite and the measuring scripts -----------------------------------------------

_TIMED = ("time_", "timeraw_", "track_", "mem_", "peakmem_")


def _first_line(node) -> str:
    doc = ast.get_docstring(node)
    return doc.strip().splitlines()[0] if doc else ""


class BenchmarksTable(SphinxDirective):
    """``.. convsuite-benchmarks::``: the asv suite, read from its sources."""

    has_content = False

    def run(self):  # noqa: D102 (the directive's docstring says what it makes)
        rows = []
        for path in sorted((ROOT / "benchmarks").glob("bench_*.py")):
            self.env.note_dependency(str(path))
            tree = ast.parse(path.read_text(), str(path))
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    timed = [m.name for m in node.body if isinstance(m, ast.FunctionDef) and m.name.startswith(_TIMED)]
                elif isinstance(node, ast.FunctionDef) and node.name.startswith(_TIMED):
                    timed = [node.name]
                else:
                    continue
                if timed:
                    name = node.name if isinstance(node, ast.FunctionDef) else f"{node.name}.{', '.join(timed)}"
                    parsed, messages = self.state.inline_text(_first_line(node) or "-", self.lineno)
                    rows.append([_code(f"{path.stem}.{name}"), parsed + messages])
        if not rows:
            LOG.warning("convsuite-benchmarks: no benchmark found under benchmarks/", location=self.get_location())
        return [_table(["benchmark", "what it measures"], rows, [40, 60])]


class ScriptsTable(SphinxDirective):
    """``.. convsuite-scripts::``: ``python -m convsuite.bench.NAME`` scripts, read from their sources."""

    has_content = False

    def run(self):  # noqa: D102 (the directive's docstring says what it makes)
        rows = []
        for path in sorted((ROOT / "convsuite" / "bench").glob("[!_]*.py")):
            source = path.read_text()
            if "__main__" not in source:
                continue
            self.env.note_dependency(str(path))
            parsed, messages = self.state.inline_text(_first_line(ast.parse(source, str(path))), self.lineno)
            rows.append([_code(f"python -m convsuite.bench.{path.stem}"), parsed + messages])
        return [_table(["command", "what it measures"], rows, [40, 60])]


# --- the layers of the package --------------------------------------------------------------


def _layering():
    """The layering test module, loaded from its file (its LAYERS, MODULES, GRAPH, _layer_of)."""
    spec = importlib.util.spec_from_file_location("convsuite_docs_layering", LAYERING_TEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _summary(path: Path) -> str:
    """The first line of a module's docstring (read from its source, not imported)."""
    return _first_line(ast.parse(path.read_text(), str(path)))


class LayersTable(SphinxDirective):
    """``.. convsuite-layers::``: LAYERS of the layering test, with what each layer's modules do."""

    has_content = False

    def run(self):  # noqa: D102 (the directive's docstring says what it makes)
        self.env.note_dependency(str(LAYERING_TEST))
        test = _layering()
        layers = test.LAYERS
        rank_of = {name: test._layer_of(name) for name in test.MODULES}
        rows = []
        for rank, (layer, patterns) in enumerate(layers):
            items = nodes.bullet_list()
            seen = set()
            for pattern in patterns:
                if pattern in seen:
                    continue
                seen.add(pattern)
                members = sorted(
                    n
                    for n in test.MODULES
                    if rank_of[n] == rank
                    and (n == pattern.rstrip(".") or (pattern.endswith(".") and n.startswith(pattern)))
                )
                if not members:
                    continue  # a name the test allows before its module exists
                head = pattern.rstrip(".")
                full = "convsuite" + ("." + head if head else "")
                path = test.MODULES[head] if head in test.MODULES else test.MODULES[members[0]]
                para = nodes.paragraph()
                para += _code(full + (".*" if pattern.endswith(".") else ""))
                summary = _summary(path) if head in test.MODULES else ""
                if summary:  # a docstring line is reST: parsed, so its ``code`` and roles render
                    parsed, messages = self.state.inline_text(summary, self.lineno)
                    para += nodes.Text(": ")
                    para.extend(parsed + messages)
                inner = [m.rpartition(".")[2] for m in members if m != head]
                if inner:
                    para += nodes.Text(f" ({len(inner)} modules: ")
                    for node in _joined(inner):
                        para += node if isinstance(node, nodes.Node) else nodes.Text(node)
                    para += nodes.Text(")")
                items += nodes.list_item("", para)
            if not len(items):
                continue  # a layer the test reserves before any of its modules exists
            below = sorted({rank_of[t] for n, r in rank_of.items() if r == rank for t in test.GRAPH[n]} - {rank})
            imports = ", ".join(layers[r][0] for r in below) or "nothing in convsuite"
            rows.append([str(rank), layer, items, imports])
        return [_table(["#", "layer", "modules", "imports from the layers below (today)"], rows, [3, 12, 65, 20])]


# --- links to the measurement records --------------------------------------------------------


def record_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``:record:`file.md```: link to a measurement record, copied beside the pages."""
    env = inliner.document.settings.env
    path = MEASUREMENTS / text
    if not path.is_file():
        message = inliner.reporter.error(f"no measurement record docs/measurements/{text}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    env.note_dependency(str(path))
    _records_of(env).setdefault(env.docname, set()).add(text)
    depth = env.docname.count("/")
    node = nodes.reference(rawtext, "", _code(text), refuri="../" * depth + "measurements/" + text)
    return [node], []


def _records_of(env) -> dict:
    """The records each page links to: {docname: set of file names}, kept in the environment."""
    if not hasattr(env, "convsuite_records"):
        env.convsuite_records = {}
    return env.convsuite_records


def _purge_records(app, env, docname):
    _records_of(env).pop(docname, None)


def _merge_records(app, env, docnames, other):
    mine = _records_of(env)
    for docname in docnames:
        if docname in _records_of(other):
            mine[docname] = _records_of(other)[docname]


def _copy_records(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    for name in sorted(set().union(*_records_of(app.env).values())):
        target = Path(app.outdir) / "measurements" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MEASUREMENTS / name, target)


# --- doc comments of re-exported data ---------------------------------------------------------


def _assigns(module, attr: str) -> bool:
    """Whether ``module``'s source assigns ``attr`` at its top level (defines it, rather than imports it)."""
    try:
        tree = ast.parse(Path(module.__file__).read_text())
    except (OSError, TypeError, SyntaxError):
        return False
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
            return True
    return False


def _reexported_data_doc(app, what, name, obj, options, lines):
    """Give data re-exported by a package (``convsuite.nets.LENET5_VARIANTS``) the ``#:`` comment of
    the module that defines it (else that module's summary line), which autodoc misses: it reads
    only the package's own source, and shows a str's or a dict's own docstring instead.
    """
    if what != "data":
        return
    if any(line.strip() for line in lines):
        if "\n".join(lines).strip() != (type(obj).__doc__ or "").strip():
            return
        lines.clear()
    package, _, attr = name.rpartition(".")
    for modname, module in sorted(sys.modules.items()):
        if not modname.startswith(package + ".") or getattr(module, attr, None) is not obj:
            continue
        if not _assigns(module, attr):
            continue
        try:
            docs = ModuleAnalyzer.for_module(modname).find_attr_docs()
        except PycodeError:
            docs = {}
        lines.extend(docs.get(("", attr)) or [_first_line(ast.parse(Path(module.__file__).read_text()))])
        return


def setup(app):
    """Register the directives, the role and the copying of linked records."""
    app.add_directive("convsuite-backends", BackendsTable)
    app.add_directive("convsuite-algorithms", AlgorithmTables)
    app.add_directive("convsuite-layers", LayersTable)
    app.add_directive("convsuite-benchmarks", BenchmarksTable)
    app.add_directive("convsuite-scripts", ScriptsTable)
    app.add_role("record", record_role)
    app.connect("env-purge-doc", _purge_records)
    app.connect("env-merge-info", _merge_records)
    app.connect("build-finished", _copy_records)
    app.connect("autodoc-process-docstring", _reexported_data_doc, priority=400)  # before numpydoc's
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
