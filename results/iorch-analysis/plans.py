#!/usr/bin/env python3
"""Summarise the MDS's per-window debug lines (RUST_LOG=tessera_mds::orchestrator=debug):
python3 plans.py mds.log [from_window] [to_window]"""
import re, sys, collections
ansi = re.compile(r'\x1b\[[0-9;]*m')
lo = int(sys.argv[2]) if len(sys.argv) > 2 else 0
hi = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
wins = collections.OrderedDict()
for line in open(sys.argv[1], errors='replace'):
    line = ansi.sub('', line)
    m = re.search(r'window=(\d+)', line)
    if not m: continue
    w = int(m.group(1))
    if not (lo <= w <= hi): continue
    d = wins.setdefault(w, {'plan': '', 'jobs': {}})
    if ' plan ' in line:
        d['plan'] = line.split('plan=')[1].strip()
    elif ' verdict ' in line:
        j = re.search(r'job=(\S+)', line).group(1)
        el = 'eligible=true' in line
        r = line.split('reason=')[1].strip()
        d['jobs'][j] = (el, r)
cnt = collections.Counter()
for w, d in wins.items():
    short = {j: ('E' if e else 'n') + ('' if e else re.search(r'\((\d)', r).group(1) if re.search(r'not eligible \((\d)', r) else ('' if e else 'c')) for j, (e, r) in d['jobs'].items()}
    cnt[d['plan'].split()[0].split('=')[0] if d['plan'] else '?'] += 1
    print(w, d['plan'], short)
    for j, (e, r) in d['jobs'].items():
        if '-v' in sys.argv: print('   ', j, r[:400])
print('first slice of window:', dict(cnt))
