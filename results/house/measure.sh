#!/bin/sh
# Issue 35's tree measures ("before"/"after"): run from the repository root, read-only, no build.
#   sh results/house/measure.sh > /tmp/house-now.txt
# Sections: 1 lines per crate, 2 largest files, 3 workspace deps, 4 heavy deps per binary (cargo tree,
# no compile; and symbols in target/release binaries if present), 5 import cycles, 6 duplicates.
set -u
cd "$(git rev-parse --show-toplevel)" || exit 1
echo "commit $(git rev-parse --short HEAD); uncommitted: $(git status --porcelain | wc -l) paths"

# Top-level folders holding Rust (workspace members + root package's src/ and tests/).
DIRS=$(python3 -c 'import tomllib;print(" ".join(tomllib.load(open("Cargo.toml","rb"))["workspace"]["members"]))')
DIRS="$DIRS src tests"

echo "## 1. Rust lines per crate (git-tracked .rs; src/ and the rest: tests/, examples/)"
echo "| crate | .rs files | lines | in src/ | tests+examples |"
for c in $DIRS; do
  all=$(git ls-files "$c/*.rs" | xargs -r cat | wc -l)
  n=$(git ls-files "$c/*.rs" | wc -l)
  s=$(git ls-files "$c/src/*.rs" | xargs -r cat | wc -l)
  echo "| $c | $n | $all | $s | $((all - s)) |"
done
echo "total (no vendor/): $(git ls-files '*.rs' | grep -v '^vendor/' | xargs cat | wc -l)"

echo "## 2. The 25 largest .rs files"
git ls-files '*.rs' | grep -v '^vendor/' | xargs wc -l | sort -rn | sed -n 2,26p

echo "## 3. Workspace crates each crate depends on ([dependencies] / [dev-dependencies])"
for c in $DIRS; do
  [ -f "$c/Cargo.toml" ] || continue
  python3 - "$c" <<'EOF'
import sys, tomllib
c = sys.argv[1]
t = tomllib.load(open(f"{c}/Cargo.toml", "rb"))
f = lambda s: sorted(k.replace("tessera-", "") for k in t.get(s, {}) if k.startswith("tessera-"))
print(f"{t['package']['name']}: {' '.join(f('dependencies')) or '-'} / dev: {' '.join(f('dev-dependencies')) or '-'}")
EOF
done

echo "## 4. Heavy dependencies in each crate's normal graph (cargo tree, no compile)"
HEAVY="rcgen x509-parser sled plotters prometheus-client hyper fuser indicatif"
for p in $(cargo metadata --offline --no-deps --format-version 1 2>/dev/null | python3 -c 'import json,sys;print(" ".join(p["name"] for p in json.load(sys.stdin)["packages"] if p["name"]!="tessera"))'); do
  t=$(cargo tree --offline -p "$p" -e normal --prefix none 2>/dev/null | sed 's/ (\*)//; s/ (proc-macro)//' | sort -u)
  printf "%s (%s packages):" "$p" "$(echo "$t" | wc -l)"
  for h in $HEAVY; do echo "$t" | grep -q "^$h v" && printf " %s" "$h"; done
  echo
done
echo "### symbols per heavy crate in the release binaries (what is really linked; skipped if not built)"
for b in tessera tessera-mds tessera-ds tessera-ion tessera-fuse tessera-bench; do
  f=target/release/$b; [ -x "$f" ] || continue
  nm -C --defined-only "$f" 2>/dev/null > /tmp/house-nm.txt
  printf "%s (built %s):" "$b" "$(date -r "$f" +%FT%T)"
  for h in rcgen x509_parser sled plotters prometheus_client hyper fuser indicatif; do printf " %s=%s" "$h" "$(grep -c "\b$h::" /tmp/house-nm.txt)"; done
  echo
done

echo "## 5. Module import cycles (level 1; --no-tests for production code only)"
python3 results/house/import_graph.py
python3 results/house/import_graph.py --no-tests | grep -E '^##|^total'

echo "## 6. duplicates"
duplicates --most 15 --seconds 120
