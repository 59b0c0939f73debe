#!/usr/bin/env python3
"""Draws the import graph between the files of one module folder and lists
its circles (strongly connected components of more than one file).

Usage: scripts/import_circles.py [--strict] ROOT_FILE CRATE_PATH [ROOT_FILE CRATE_PATH ...]
  e.g. scripts/import_circles.py src/config/mod.rs crate::config \
           src/daemon/ws/mod.rs crate::daemon::ws \
           benches/loadgen/src/main.rs crate

An arrow A -> B means file A names an item of file B: a `use` of
`crate::…`, `super::…`, `self::…` or of a child module, or such a path written
inline in code. Comments, doc links and string literals are ignored. A path
that ends at a `pub use` re-export is followed to the file that defines the
item, so importing `super::ConfigError` counts as importing the file that
declares `ConfigError`.

Arrows between a file and its own parent module (the file holding its `mod`
line: mod.rs, main.rs, or `x.rs` for `x/*.rs`) are the module tree itself:
the parent declares, re-exports and calls its children, the children use the
types the parent defines. They are not counted unless `--strict` is given;
every other arrow is, including one from a file to its grandparent or to a
sibling's children. Exits 1 if a circle is found.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """Removes comments, string and char literals (keeps line structure)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif re.match(r'b?r#*"', text[i:i + 6]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not text[i - 1].isalnum())):
            i += 2 if c == "b" else 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                i += len(m.group(0))
                out.append("' '")
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d as e, *}}` -> [[a, b], [a, c, d], [a, c, *]] (aliases dropped)."""
    tree = re.sub(r"\s+", "", tree)

    def parse(s, prefix):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        parts.append(cur)
        result = []
        for p in parts:
            if not p:
                continue
            if "{" in p:
                head, inner = p.split("{", 1)
                head = [x for x in head.split("::") if x]
                result += parse(inner[:-1], prefix + head)
            else:
                p = re.sub(r"as" + IDENT + "$", "", p) if re.search(r"::" + IDENT + "as" + IDENT + "$", p) else p
                result.append(prefix + [x for x in p.split("::") if x])
        return result

    return parse(tree, [])


class Folder:
    def __init__(self, root_file, crate_path, strict=False):
        self.strict = strict
        self.root_file = os.path.normpath(root_file)
        self.base = [x for x in crate_path.split("::") if x and x != "crate"]
        self.files = {}  # module path tuple -> file
        self.mods = {}  # file -> module path tuple
        self.collect(self.root_file, tuple(self.base))
        self.reexports = {}  # (file, name) -> absolute path list
        self.uses = {}  # file -> [(scope, path, is_pub_use)]
        for f, mp in self.mods.items():
            self.scan(f, mp)

    def child_dir(self, f):
        stem = os.path.splitext(os.path.basename(f))[0]
        if stem in ("mod", "main", "lib"):
            return os.path.dirname(f)
        return os.path.join(os.path.dirname(f), stem)

    def collect(self, f, mp):
        self.files[mp] = f
        self.mods[f] = mp
        text = strip(open(f).read())
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*;", text):
            name = m.group(1)
            d = self.child_dir(f)
            for cand in (os.path.join(d, name + ".rs"), os.path.join(d, name, "mod.rs")):
                if os.path.exists(cand):
                    self.collect(os.path.normpath(cand), mp + (name,))
                    break

    def scan(self, f, mp):
        text = strip(open(f).read())
        child_mods = set(re.findall(r"\bmod\s+(" + IDENT + r")\s*;", text))
        scope = [list(mp)]  # stack of module paths (inline `mod x {` blocks)
        depth_stack = []
        depth = 0
        uses = []
        i = 0
        token = re.compile(
            r"(?P<mod>\bmod\s+(?P<mname>" + IDENT + r")\s*\{)"
            r"|(?P<use>\b(?P<pub>pub(\([^)]*\))?\s+)?use\s+(?P<tree>[^;]+);)"
            r"|(?P<path>(?<![A-Za-z0-9_:])(?P<p>(crate|super|self|" + IDENT + r")(::" + IDENT + r")+))"
            r"|(?P<open>\{)|(?P<close>\})"
        )
        for m in token.finditer(text):
            if m.group("mod"):
                depth += 1
                depth_stack.append(depth)
                scope.append(scope[-1] + [m.group("mname")])
            elif m.group("open"):
                depth += 1
            elif m.group("close"):
                if depth_stack and depth_stack[-1] == depth:
                    depth_stack.pop()
                    scope.pop()
                depth -= 1
            elif m.group("use"):
                for p in expand_use(m.group("tree")):
                    uses.append((tuple(scope[-1]), p, bool(m.group("pub")), child_mods))
            elif m.group("path"):
                p = m.group("p").split("::")
                uses.append((tuple(scope[-1]), p, False, child_mods))
        self.uses[f] = uses
        for sc, p, pub, _ in uses:
            if pub and sc == mp and p[-1] != "*":
                self.reexports[(f, p[-1])] = self.absolute(sc, p, child_mods)

    def absolute(self, scope, p, child_mods):
        p = list(p)
        if p[0] == "crate":
            return p[1:]
        if p[0] in ("super", "self"):
            s = list(scope)
            while p and p[0] in ("super", "self"):
                if p[0] == "super":
                    s = s[:-1]
                p = p[1:]
            return s + p
        if p[0] in child_mods:
            return list(scope) + p
        return None

    def resolve(self, path, hops=0):
        """Absolute path -> the file defining it (following re-exports)."""
        if path is None or hops > 10:
            return None
        best = None
        for k in range(len(path), 0, -1):
            if tuple(path[:k]) in self.files:
                best = k
                break
        if best is None:
            return None
        f = self.files[tuple(path[:best])]
        rest = path[best:]
        if rest and (f, rest[0]) in self.reexports:
            target = self.reexports[(f, rest[0])]
            if target is not None:
                again = self.resolve(target + rest[1:], hops + 1)
                if again is not None:
                    return again
        return f

    def is_parent_pair(self, a, b):
        ma, mb = self.mods[a], self.mods[b]
        return ma[:-1] == mb or mb[:-1] == ma

    def edges(self):
        out = {f: set() for f in self.mods}
        for f, uses in self.uses.items():
            for sc, p, pub, child_mods in uses:
                if f == self.root_file and pub:
                    continue  # the front's re-exports
                target = self.resolve(self.absolute(sc, p, child_mods))
                if target and target != f:
                    if not self.strict and self.is_parent_pair(f, target):
                        continue
                    out[f].add(target)
        return out


def circles(edges):
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return comps


def main(args):
    strict = "--strict" in args
    args = [a for a in args if a != "--strict"]
    if not args or len(args) % 2:
        print(__doc__)
        return 2
    found = 0
    for root, crate_path in zip(args[::2], args[1::2]):
        folder = Folder(root, crate_path, strict)
        edges = folder.edges()
        top = os.path.dirname(folder.root_file)
        rel = lambda f: os.path.relpath(f, top)
        print(f"{top}/ ({len(edges)} files)")
        for f in sorted(edges):
            if edges[f]:
                print(f"  {rel(f)} -> {', '.join(sorted(rel(t) for t in edges[f]))}")
        comps = circles(edges)
        print(f"  circles: {len(comps)}")
        for c in comps:
            print(f"    [{len(c)} files] {' '.join(rel(f) for f in c)}")
        found += len(comps)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
