#!/usr/bin/env python3
"""Tables from runs/TAG-*.txt: python3 table.py a b"""
import re, sys, os
R = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'runs')
for tag in sys.argv[1:]:
    print(f'## round {tag}: distance (system MiB/s, off / iorchestrator, ratio)')
    for v in ['old', 'new500', 'new150']:
        p = f'{R}/{tag}-dist-{v}.txt'
        if not os.path.exists(p): continue
        d = {}
        for l in open(p):
            m = re.search(r'files (\d+) GB apart, (\w+): ([\d.]+) MiB/s', l)
            if m: d[(int(m.group(1)), m.group(2))] = float(m.group(3))
        cells = []
        for gb in [0, 10, 20, 30]:
            off, on = d.get((gb, 'off')), d.get((gb, 'iorchestrator'))
            if off and on: cells.append(f'{gb} GB: {off:.1f} / {on:.1f} ({on/off:.2f}x)')
        base = d.get((0, 'off'))
        drop = f'; vanilla 0→30 GB {100*(d[(30,"off")]/base-1):+.0f}%' if base and (30, 'off') in d else ''
        print(f'- {v}: ' + ', '.join(cells) + drop)
    print(f'## round {tag}: heterogeneous trio (system MiB/s: off, even, iorchestrator)')
    for v in ['old', 'new']:
        p = f'{R}/{tag}-het-{v}.txt'
        if not os.path.exists(p): continue
        d = {}
        for l in open(p):
            m = re.search(r'heterogeneous read, (\w+): system ([\d.]+) MiB/s \((.*?); runs', l)
            if m: d[m.group(1)] = (float(m.group(2)), m.group(3))
        print(f'- {v}: ' + '; '.join(f'{k} {s:.1f} ({parts})' for k, (s, parts) in d.items()))
