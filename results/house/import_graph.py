#!/usr/bin/env python3
"""Module-level import graph of each workspace crate, and its cycles (issue 35, "before"/"after").

Reads the sources only (no cargo, no build). For every crate under the workspace root it walks the
module tree from src/lib.rs (or src/main.rs) through `mod x;` declarations and inline `mod x { }`
blocks, and records each reference to another module of the same crate:
  - `use crate::a::...`, `use super::...`, `use self::...` (use trees with `{...}` groups expanded),
  - paths in code: `crate::a::f()`, `super::x::Y`, `self::x::Z`,
  - bare paths in lib.rs / mod.rs to the module's own children (`use scrape::render`).
Root re-exports (`pub use file::File;` / `pub use types::*;` in lib.rs) are followed, so `crate::File`
counts as a reference to `file`. References from `#[cfg(test)]` modules are marked test-only.

A node is a module path cut to --level segments (1 = top-level modules: `client`, `namespace`, ...).
Cycles are the strongly connected components with more than one node; for each, the edges inside it
are listed with the number of references and one example line (file:line) per edge.

Usage:
  python3 results/house/import_graph.py                 # all crates, top-level modules, all code
  python3 results/house/import_graph.py --no-tests      # ignore #[cfg(test)] code
  python3 results/house/import_graph.py --level 2       # submodules too (mds namespace/*, ion sched/*);
                                                        # edges between a module and its ancestors are skipped
  python3 results/house/import_graph.py --crate client --edges   # also print every edge of the crate
"""
import argparse
import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_code(text):
    """Blanks comments, string and char literals (keeping newlines so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not re.match(r"\w", text[i - 1])):
            m = re.match(r'r(#*)"', text[i:])
            hashes = m.group(1)
            end = text.find('"' + hashes, i + len(m.group(0)))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not re.match(r"\w", text[i - 1]))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # char literal ('x', '\n', '\u{..}', '{') vs lifetime ('a)
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Crate:
    def __init__(self, root, name):
        self.root, self.name = root, name
        self.modules = {}  # tuple path -> (file, test_only)
        self.files = []  # (file, module path, test_only)
        self.reexports = {}  # root name -> module path
        self.glob_reexports = []  # module paths re-exported with *
        self.defines = defaultdict(set)  # module path -> public names defined there
        self.refs = []  # (from path, to path, file, line, test_only)

    def mod_file(self, dir_, name):
        for cand in (os.path.join(dir_, name + ".rs"), os.path.join(dir_, name, "mod.rs")):
            if os.path.exists(cand):
                return cand
        return None

    def load(self):
        src = os.path.join(self.root, "src")
        top = os.path.join(src, "lib.rs")
        if not os.path.exists(top):
            top = os.path.join(src, "main.rs")
        self.walk_file(top, (), src, False)
        self.scan_lib(top)
        for f, path, test in self.files:
            self.scan_refs(f, path, test)

    def walk_file(self, f, path, child_dir, test):
        """Registers file f as module `path`; child modules `mod x;` live in child_dir."""
        self.modules[path] = (f, test)
        self.files.append((f, path, test))
        code = strip_code(open(f, encoding="utf-8").read())
        for m in re.finditer(r"pub\s+(?:struct|enum|fn|const|static|trait|type|use\s+\S+\s+as)\s+(" + IDENT + ")", code):
            self.defines[path].add(m.group(1))
        # `mod x;` declarations at file level and inside inline modules (inline path prefix tracked).
        for decl_path, name, is_test in self.mod_decls(code, path):
            sub_dir = child_dir
            for seg in decl_path[len(path):]:
                sub_dir = os.path.join(sub_dir, seg)
            sf = self.mod_file(sub_dir, name)
            if sf is None:
                continue
            new_path = decl_path + (name,)
            if sf.endswith("mod.rs"):
                new_child = os.path.dirname(sf)
            else:
                new_child = os.path.join(os.path.dirname(sf), name)
            self.walk_file(sf, new_path, new_child, test or is_test)

    @staticmethod
    def inline_spans(code, path):
        """(start, end, module path, test) of every inline `mod x { ... }` block, nested."""
        spans = []
        stack = []  # (module path, test, brace depth at open)
        depth = 0
        pending = None
        tok = re.compile(r"(#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\])|\bmod\s+(" + IDENT + r")\s*([{;])|([{}])")
        last_cfg_test_end = -10
        for m in tok.finditer(code):
            if m.group(1):
                last_cfg_test_end = m.end()
            elif m.group(2):
                is_test = code[last_cfg_test_end:m.start()].strip().startswith("pub") or code[last_cfg_test_end:m.start()].strip() == ""
                is_test = is_test and (m.start() - last_cfg_test_end) < 40
                if m.group(3) == "{":
                    cur = stack[-1][0] if stack else path
                    cur_test = stack[-1][1] if stack else False
                    depth += 1
                    stack.append((cur + (m.group(2),), cur_test or is_test, depth, m.start()))
            elif m.group(4) == "{":
                depth += 1
            elif m.group(4) == "}":
                if stack and stack[-1][2] == depth:
                    p, t, _, s = stack.pop()
                    spans.append((s, m.end(), p, t))
                depth -= 1
        return spans

    def mod_decls(self, code, path):
        spans = self.inline_spans(code, path)
        out = []
        for m in re.finditer(r"(#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]\s*)?(?:pub(?:\s*\([^)]*\))?\s+)?\bmod\s+(" + IDENT + r")\s*;", code):
            inner = [s for s in spans if s[0] <= m.start() < s[1]]
            p = max(inner, key=lambda s: len(s[2]))[2] if inner else path
            out.append((p, m.group(2), bool(m.group(1))))
        return out

    def scan_lib(self, top):
        code = strip_code(open(top, encoding="utf-8").read())
        for m in re.finditer(r"\bpub\s+use\s+([^;]+);", code):
            for full in expand_use(m.group(1)):
                segs = full.split("::")
                if segs[0] in ("crate", "self"):
                    segs = segs[1:]
                if not segs or (segs[0],) not in self.modules:
                    continue
                name = segs[-1].split(" as ")[-1].strip()
                if name == "*":
                    self.glob_reexports.append(tuple(s.strip() for s in segs[:-1]))
                else:
                    self.reexports[name] = tuple(s.strip() for s in segs[:-1])

    def resolve(self, segs, cur):
        """Absolute path of a crate/super/self path from module `cur`, or None if not in this crate."""
        segs = list(segs)
        if segs[0] == "crate":
            base, segs = [], segs[1:]
        elif segs[0] in ("super", "self"):
            base = list(cur)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    if not base:
                        return None
                    base.pop()
                segs = segs[1:]
        else:
            # bare path: a child module of the current module (2018 edition: local names first)
            if tuple(cur) + (segs[0],) in self.modules:
                base = list(cur)
            else:
                return None
        full = base + segs
        # longest known module prefix
        k = len(full)
        while k > 0 and tuple(full[:k]) not in self.modules:
            k -= 1
        mod = tuple(full[:k])
        if k == 0 and full:
            name = full[0]
            if name in self.reexports:
                return self.reexports[name]
            for g in self.glob_reexports:
                if name in self.defines.get(g, ()):
                    return g
            return ()
        return mod

    def scan_refs(self, f, path, file_test):
        raw = open(f, encoding="utf-8").read()
        code = strip_code(raw)
        code = re.sub(r"\bpub\s*\(\s*(?:crate|super|self|in\s+[^)]*)\)", lambda m: " " * len(m.group(0)), code)
        spans = self.inline_spans(code, path)

        def ctx(pos):
            inner = [s for s in spans if s[0] <= pos < s[1]]
            if not inner:
                return path, file_test
            s = max(inner, key=lambda s: len(s[2]))
            return s[2], file_test or s[3]

        def line_of(pos):
            return code.count("\n", 0, pos) + 1

        use_ranges = []
        for m in re.finditer(r"\buse\s+([^;]+);", code):
            use_ranges.append((m.start(), m.end()))
            cur, test = ctx(m.start())
            for full in expand_use(m.group(1)):
                segs = [s.strip() for s in full.split(" as ")[0].split("::") if s.strip()]
                if not segs:
                    continue
                tgt = self.resolve(segs, cur)
                if tgt is not None:
                    self.refs.append((cur, tgt, f, line_of(m.start()), test))
        for m in re.finditer(r"(?<![\w$:])((?:crate|super|self)(?:\s*::\s*(?:" + IDENT + r"))+)", code):
            if any(a <= m.start() < b for a, b in use_ranges):
                continue
            segs = [s.strip() for s in m.group(1).split("::")]
            cur, test = ctx(m.start())
            tgt = self.resolve(segs, cur)
            if tgt is not None:
                self.refs.append((cur, tgt, f, line_of(m.start()), test))


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", " ", tree).strip()
    if tree.startswith("::"):
        tree = tree[2:]

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur.strip():
            parts.append(cur)
        return [p.strip() for p in parts if p.strip()]

    i = tree.find("{")
    if i < 0:
        return [tree]
    prefix = tree[:i].rstrip(":").strip()
    body = tree[i + 1:tree.rfind("}")]
    out = []
    for part in split_top(body):
        for sub in expand_use(part):
            if sub == "self":
                out.append(prefix)
            else:
                out.append(prefix + "::" + sub if prefix else sub)
    return out


def sccs(nodes, edges):
    index, low, on, stack, res = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
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
            res.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return res


def workspace_crates(ws):
    import tomllib
    cfg = tomllib.load(open(os.path.join(ws, "Cargo.toml"), "rb"))
    members = cfg.get("workspace", {}).get("members", [])
    out = []
    for mem in members:
        d = os.path.join(ws, mem)
        if os.path.exists(os.path.join(d, "src")):
            out.append((mem, d))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--level", type=int, default=1, help="module path segments per node (1 = top-level modules)")
    ap.add_argument("--no-tests", action="store_true", help="ignore references from #[cfg(test)] code")
    ap.add_argument("--crate", action="append", help="only these crates (directory names)")
    ap.add_argument("--edges", action="store_true", help="print every edge, not only those in cycles")
    a = ap.parse_args()
    ws = os.path.abspath(a.root)
    total = 0
    for name, d in workspace_crates(ws):
        if a.crate and name not in a.crate:
            continue
        c = Crate(d, name)
        c.load()
        edges = defaultdict(set)
        info = defaultdict(lambda: [0, 0, None])  # (n refs, n test refs, example)
        nodes = set()
        for p, _ in c.modules.items():
            if p and len(p) >= 1:
                nodes.add("::".join(p[:a.level]))
        for src, dst, f, line, test in c.refs:
            if a.no_tests and test:
                continue
            if not src or not dst:
                continue
            # inline modules (`mod tests { }`) fold into the file module that holds them
            while src and src not in c.modules:
                src = src[:-1]
            sp, tp = src[:a.level], dst[:a.level]
            if sp == tp or sp[:len(tp)] == tp or tp[:len(sp)] == sp:
                continue  # same node, or a module and its own ancestor (parent declares child, child uses super::)
            s, t = "::".join(sp), "::".join(tp)
            edges[s].add(t)
            e = info[(s, t)]
            e[0] += 1
            e[1] += test
            if e[2] is None or (not test and e[2][1]):
                e[2] = (f"{os.path.relpath(f, ws)}:{line}", test)
        comps = [comp for comp in sccs(nodes, edges) if len(comp) > 1]
        total += len(comps)
        print(f"## {name}: {len(nodes)} modules, {sum(len(v) for v in edges.values())} edges, {len(comps)} cycle(s)")
        for comp in comps:
            print(f"- cycle: {' <-> '.join(comp)}")
            for s in comp:
                for t in sorted(edges[s]):
                    if t in comp:
                        n, nt, ex = info[(s, t)]
                        tag = " (test code only)" if n == nt else (f" ({nt} in tests)" if nt else "")
                        print(f"    {s} -> {t}: {n} ref(s){tag}, e.g. {ex[0]}")
        if a.edges:
            for s in sorted(edges):
                for t in sorted(edges[s]):
                    n, nt, ex = info[(s, t)]
                    print(f"  edge {s} -> {t}: {n} ({nt} test) e.g. {ex[0]}")
        print()
    print(f"total cycles: {total}")


if __name__ == "__main__":
    main()
