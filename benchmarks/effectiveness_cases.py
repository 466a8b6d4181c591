"""The effectiveness benchmark's material: three small open-source projects, pinned by version and
SHA-256 of their source distribution, and the regressions injected into their histories.

Each regression breaks one function the way people do (an off-by-one, a wrong operator, a
dropped branch) so that it raises: production's traceback and the suite's failure then name the
same exception and the same function, which is what Ephyra's reproduction matches. ``call`` is
what production runs when it hits the bug; ``old`` must occur exactly once in the function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Project:
    name: str  # the distribution's name on the package index
    version: str
    sha256: str  # of the sdist: anything else is refused
    module: str  # what production imports
    tests: tuple[str, ...]  # the suite, as pytest is given it
    source: str  # the file the regressions and the maintenance commits touch

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Regression:
    project: str
    name: str  # the case's name in the report
    function: str
    old: str
    new: str
    call: str  # a statement production runs, ``module`` imported
    conflict: bool = False  # a later commit edits the line next to the broken one


PROJECTS = {
    p.name: p
    for p in (
        Project(
            "inflection",
            "0.5.1",
            "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
            "inflection",
            ("test_inflection.py",),
            "inflection/__init__.py",
        ),
        Project(
            "toolz",
            "1.0.0",
            "2c86e3d9a04798ac556793bced838816296a2f085017664e4995cb40a1047a02",
            "toolz",
            ("toolz/tests",),
            "toolz/itertoolz.py",
        ),
        Project(
            "more-itertools",
            "10.5.0",
            "5482bfef7849c25dc3c6dd53a6173ae4795da2a41a80faea6700d9f5846c5da6",
            "more_itertools",
            ("tests",),
            "more_itertools/more.py",
        ),
    )
}

R = Regression
REGRESSIONS = (
    # inflection: one module, one test file.
    R("inflection", "ordinal-default", "ordinal",
      '}.get(number % 10, "th")', "}[number % 10]", "inflection.ordinalize(4)"),
    R("inflection", "parameterize-format", "parameterize",
      "r'%s{2,}' % re_sep", "r'%s{2,}' % (re_sep, separator)",
      "inflection.parameterize('Donald E. Knuth')"),
    R("inflection", "pluralize-unpack", "pluralize",
      "for rule, replacement in PLURALS:", "for rule, replacement, _ in PLURALS:",
      "inflection.pluralize('post')"),
    R("inflection", "transliterate-errors", "transliterate",
      "normalized.encode('ascii', 'ignore')", "normalized.encode('ascii')",
      "inflection.transliterate('\\u00e4l\\u00e4m\\u00f6l\\u00f6')"),
    R("inflection", "singularize-format", "singularize",
      "r'(?i)\\b(%s)\\Z' % inflection", "r'(?i)\\b(%s)\\Z' % (inflection, word)",
      "inflection.singularize('posts')"),
    R("inflection", "camelize-group", "camelize",
      "lambda m: m.group(1).upper()", "lambda m: m.group(2).upper()",
      "inflection.camelize('device_type')"),
    R("inflection", "ordinal-conflict", "ordinal",
      '}.get(number % 10, "th")', "}[number % 10]", "inflection.ordinalize(5)", conflict=True),
    # toolz: the regressions in itertoolz.
    R("toolz", "last-off-by-one", "last",
      "return tail(1, seq)[0]", "return tail(1, seq)[1]", "toolz.last('xyz')"),
    R("toolz", "frequencies-default", "frequencies",
      "d = collections.defaultdict(int)", "d = {}", "toolz.frequencies(['cat', 'ox'])"),
    R("toolz", "groupby-default", "groupby",
      "d = collections.defaultdict(lambda: [].append)", "d = {}",
      "toolz.groupby(len, ['ab', 'c'])"),
    R("toolz", "first-iter", "first",
      "return next(iter(seq))", "return next(seq)", "toolz.first([1, 2])"),
    R("toolz", "reduceby-branch", "reduceby",
      "if is_no_default:", "if False:",
      "import operator; toolz.reduceby(lambda x: x % 2, operator.add, [1, 2, 3])"),
    R("toolz", "isdistinct-method", "isdistinct",
      "seen_add = seen.add", "seen_add = seen.append", "toolz.isdistinct(iter([1, 2]))"),
    R("toolz", "last-conflict", "last",
      "return tail(1, seq)[0]", "return tail(1, seq)[1]", "toolz.last('abc')", conflict=True),
    # more-itertools: more.py and recipes.py.
    R("more-itertools", "first-operator", "first",
      "if default is _marker:", "if default is not _marker:",
      "more_itertools.first([], 'x')"),
    R("more-itertools", "last-operator", "last",
      "if default is _marker:", "if default is not _marker:",
      "more_itertools.last([], 'x')"),
    R("more-itertools", "nth-default", "nth",
      "return next(islice(iterable, n, None), default)",
      "return next(islice(iterable, n, None))", "more_itertools.nth([1, 2], 5)"),
    R("more-itertools", "divide-off-by-one", "divide",
      "q, r = divmod(len(seq), n)", "q, r = divmod(len(seq), n - 1)",
      "more_itertools.divide(1, [1, 2, 3])"),
    R("more-itertools", "grouper-branch", "grouper",
      "if incomplete == 'ignore':", "if incomplete == 'ignored':",
      "list(more_itertools.grouper('ABCDEFG', 3, incomplete='ignore'))"),
    R("more-itertools", "nth-or-last-default", "nth_or_last",
      "return last(islice(iterable, n + 1), default=default)",
      "return last(islice(iterable, n + 1))", "more_itertools.nth_or_last([], 3, 'x')"),
    R("more-itertools", "first-conflict", "first",
      "if default is _marker:", "if default is not _marker:",
      "more_itertools.first([], None)", conflict=True),
)

# Which file holds each function when it is not the project's ``source``.
FILES = {
    ("more-itertools", "nth"): "more_itertools/recipes.py",
    ("more-itertools", "grouper"): "more_itertools/recipes.py",
}


def file_of(regression: Regression) -> str:
    named = FILES.get((regression.project, regression.function))
    return named or PROJECTS[regression.project].source
