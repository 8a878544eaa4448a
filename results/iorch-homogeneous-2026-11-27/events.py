#!/usr/bin/env python3
"""Per orchestrated configuration of an iorch-homogeneous run, the windows in which a program had a dedicated
slice, its length, and the condition-3 verdict the plan was made on.
usage: python3 events.py RUN/mds.log.gz   (the MDS log of a run with RUST_LOG=info,tessera_mds::orchestrator=debug;
plain or gzipped). A slice is a probe when its verdict was "RD not measured yet", else the program passed
condition 3 (or was never checked) and got its inverse-RD slice."""
import gzip, re, sys
ansi = re.compile(r'\x1b\[[0-9;]*m')
configs, cur, verdicts = [], None, {}
opener = gzip.open if sys.argv[1].endswith('.gz') else open
for line in opener(sys.argv[1], 'rt', errors='replace'):
    line = ansi.sub('', line)
    if 'orchestrator mode changed' in line:
        new = re.search(r'new=(\S+)', line).group(1)
        cur = {'at': line[11:19], 'windows': []} if new == 'iorchestrator' else None
        if cur is not None:
            configs.append(cur)
        continue
    m = re.search(r'window=(\d+)', line)
    if not m or cur is None:
        continue
    w = int(m.group(1))
    if ' verdict ' in line:
        job = re.search(r'job=(\S+)', line).group(1)
        rd = re.search(r'\[3\] (.*?); \d+ servers', line)
        verdicts[(w, job)] = rd.group(1) if rd else '?'
    elif ' plan ' in line:
        slices = re.findall(r'(\S+)=(\d+)ms', line.split('plan=')[1])
        ded = [(j, int(ms)) for j, ms in slices if not j.startswith('(')]
        if ded:
            cur['windows'].append((w, ded))
for c in configs:
    jobs = sorted({j for _, d in c['windows'] for j, _ in d})
    print(f"configuration from {c['at']}: {len(c['windows'])} windows with dedicated slices, programs {jobs}")
    for w, ded in c['windows']:
        for j, ms in ded:
            v = verdicts.get((w, j), '?')
            kind = 'probe' if 'not measured' in v else 'slice'
            print(f"  window {w}: {j} {ms} ms ({kind}); condition 3: {v}")
